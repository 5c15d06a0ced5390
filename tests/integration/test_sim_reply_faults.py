"""Reply faults of ``llmload sim`` (aborted and degenerate replies) through llmload's real client, and a whole run.

The client-level tests send requests with ``StreamingClient`` over
``GeventHTTPTransport``; the runs start ``locust`` headless against the
simulator and read the results file. Each checks the client's figures
against the simulator's own ground truth (``llmload_sim_faults_injected_total``,
completed requests and token counters).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llmload.net.transport import GeventHTTPTransport
from llmload.request.client import StreamingClient
from llmload.request.degenerate import DEGENERATE_REPEATED, DEGENERATE_SAME_TEXT, SameTextWatch
from llmload.request.payloads import LLMRequest, build_chat_request
from llmload.request.record import Outcome, RequestRecord
from tests.integration.procs import locust_argv
from tests.integration.test_sim import REPO_ROOT, metric_sum, metrics, start_sim, stop_sim
from tests.integration.test_sim_faults import (
    FAST_SIM,
    MODEL,
    TIMEOUTS,
    categories,
    chat_request,
    completed,
    completion_request,
    injected,
    run_requests,
)
from tests.integration.test_sim_faults import sim as sim_fixture

sim = sim_fixture  # the simulator factory fixture of the fault tests

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"


def chat_about(topic: str, max_tokens: int = 32, *, stream: bool = True) -> LLMRequest:
    return build_chat_request(
        model=MODEL,
        messages=[{"role": "user", "content": f"tell me about {topic}"}],
        max_tokens=max_tokens,
        stream=stream,
    )


def run_watched(url: str, requests: list[LLMRequest]) -> list[RequestRecord]:
    """As ``run_requests``, with the same-text watch a Locust process shares between its users."""
    transport = GeventHTTPTransport(url, headers={}, timeouts=TIMEOUTS)
    try:
        client = StreamingClient(transport, total_timeout_s=TIMEOUTS.total_s, same_text=SameTextWatch())
        return [client.run(r) for r in requests]
    finally:
        transport.close()


# NC-18 (end to end): the simulator aborts replies with HTTP 200, usage and [DONE].
@pytest.mark.parametrize("stream", [True, False])
def test_nc18_sim_abort_rate_replies_fail_as_finish_reason_abort(gevent_ready, sim, stream):
    url = sim("--abort-rate", "1")
    records = run_requests(url, [completion_request(stream=stream, max_tokens=8)] * 3)
    assert categories(records) == {(Outcome.SERVER_ERROR, "finish_reason abort", None)}
    assert all(r.finish_reason == "abort" for r in records)
    assert all(r.completion_tokens.value == 4 for r in records)  # usage of what was written: half of 8
    samples = metrics(url)
    assert injected(samples, "abort") == 3
    assert completed(samples) == 0
    assert metric_sum(samples, "llmload_sim_completion_tokens_total") == 0


def test_sim_degenerate_repeat_is_a_repeated_token_failure_with_a_sample(gevent_ready, sim):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "repeat")
    records = run_requests(url, [chat_request(max_tokens=32)] * 2)
    assert categories(records) == {(Outcome.SERVER_ERROR, DEGENERATE_REPEATED, None)}
    error = records[0].error
    assert error is not None
    assert "makes 32 of the reply's 32 pieces" in error.message
    assert injected(metrics(url), "degenerate", CHAT) == 2


def test_sim_degenerate_empty_is_empty_not_a_fast_success(gevent_ready, sim):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "empty")
    records = run_requests(url, [chat_request(max_tokens=16), chat_request(stream=False, max_tokens=16)])
    assert [r.outcome for r in records] == [Outcome.EMPTY, Outcome.EMPTY]
    assert records[0].completion_tokens.value == 16  # usage says 16, none of them streamed
    assert injected(metrics(url), "degenerate", CHAT) == 2


@pytest.mark.parametrize("stream", [True, False])
def test_sim_degenerate_same_text_for_different_prompts_fails_from_the_fifth(gevent_ready, sim, stream):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "same")
    records = run_watched(url, [chat_about(f"topic {i}", stream=stream) for i in range(8)])
    assert [r.outcome for r in records] == [Outcome.OK] * 4 + [Outcome.SERVER_ERROR] * 4
    assert {r.error.category for r in records if r.error} == {DEGENERATE_SAME_TEXT}
    assert injected(metrics(url), "degenerate", CHAT) == 8


def test_sim_degenerate_same_text_for_one_prompt_is_not_flagged(gevent_ready, sim):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "same")
    records = run_watched(url, [chat_about("one topic")] * 8)
    assert [r.outcome for r in records] == [Outcome.OK] * 8


# ---------------------------------------------------------------- Locust end to end


def _run(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        locust_argv([
            "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", url, "-u", "4", "-r", "4",
            "-t", "60s", "--results-json", str(out), "--skip-preflight", *extra,
        ]),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )  # fmt: skip


def test_nc18_sim_run_with_aborts_fails_and_keeps_aborted_tokens_out(tmp_path: Path):
    """40 requests, a quarter aborted: failures, finish reasons and tokens equal the simulator's counters."""
    url, proc = start_sim(*FAST_SIM, "--seed", "5", "--abort-rate", "0.25")
    out = tmp_path / "r.json"
    try:
        run = _run(url, out, "--num-requests", "40", "--max-tokens", "16", "--ignore-eos")
        samples = metrics(url)
    finally:
        stop_sim(proc)
    assert out.exists(), run.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    aborted = injected(samples, "abort", CHAT)
    assert 0 < aborted < 40
    assert results["requests"]["total"] == 40
    assert results["requests"]["failed"] == aborted
    assert results["requests"]["succeeded"] == completed(samples, CHAT) == 40 - aborted
    assert results["requests"]["finish_reasons"] == {"abort": aborted, "length": 40 - aborted}
    assert {e["category"]: e["count"] for e in results["errors"]} == {"finish_reason abort": aborted}
    # throughput counts only the completed replies' tokens: 16 each, never the aborted 8
    assert results["tokens"]["completion"] == metric_sum(samples, "llmload_sim_completion_tokens_total")
    assert results["tokens"]["completion"] == 16 * (40 - aborted)
    assert results["requests"]["short_of_requested"] == {
        "checked": 40 - aborted,
        "short": 0,
        "mean_got_tokens": None,
        "mean_asked_tokens": None,
    }
    assert results["passed"] is False
    assert run.returncode == 1
    assert "--max-failure-ratio" in results["verdict"]
    assert f"Finish reasons:                         length {int(40 - aborted)}, abort {int(aborted)}" in run.stdout


def test_sim_run_with_same_text_counts_degenerate_replies_apart(tmp_path: Path):
    """Synthetic prompts all differ; the simulator answers each with one text: degenerate from the fifth reply."""
    url, proc = start_sim(*FAST_SIM, "--degenerate-rate", "1", "--degenerate-shape", "same")
    out = tmp_path / "r.json"
    try:
        run = _run(url, out, "--num-requests", "12", "--max-tokens", "32", "--input-tokens", "24", "-u", "1")
    finally:
        stop_sim(proc)
    assert out.exists(), run.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    degenerate = results["requests"]["degenerate"]
    assert (degenerate["same_text"], degenerate["repeated_token"], degenerate["empty"]) == (8, 0, 0)
    assert degenerate["samples"]["same_text"].startswith("degenerate output: the same text as ")
    assert results["requests"]["succeeded"] == 4
    assert results["tokens"]["completion"] == 4 * 16  # the degenerate replies' tokens are out
    assert results["passed"] is False
    assert "Degenerate replies (failed):            same text 8" in run.stdout


def test_sim_run_with_short_replies_warns_that_ignore_eos_was_ignored(tmp_path: Path):
    """--ignore-eos asks for 16 tokens; half the replies stop at 8: counted short, warned, still successes."""
    url, proc = start_sim(*FAST_SIM, "--seed", "2", "--short-rate", "0.5")
    out = tmp_path / "r.json"
    try:
        run = _run(url, out, "--num-requests", "20", "--max-tokens", "16", "--ignore-eos")
        samples = metrics(url)
    finally:
        stop_sim(proc)
    assert out.exists(), run.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    short = injected(samples, "short", CHAT)
    assert 0 < short < 20
    assert results["requests"]["succeeded"] == completed(samples, CHAT) == 20
    assert results["requests"]["short_of_requested"] == {
        "checked": 20,
        "short": short,
        "mean_got_tokens": 8.0,
        "mean_asked_tokens": 16.0,
    }
    assert results["requests"]["finish_reasons"] == {"length": 20 - short, "stop": short}
    assert results["tokens"]["completion"] == 16 * (20 - short) + 8 * short  # never 20 x 16
    assert results["tokens"]["completion"] == metric_sum(samples, "llmload_sim_completion_tokens_total")
    assert results["passed"] is True
    assert (
        f"WARNING: the server ignored the requested length (ignore_eos / min_tokens): {int(short)} of 20 replies "
        "ended early, on average 8.0 of 16.0 tokens"
    ) in run.stdout
