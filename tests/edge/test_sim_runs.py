"""Single-process runs against the simulator's reply faults (NC-18 and the degenerate shapes), in process.

Locust's ``LocalRunner`` with llmload's hooks (``tests/edge/cluster.run_local``) against the
simulator served in this process; its counters are the ground truth. The same checks used to
start a ``locust`` process each.
"""

from __future__ import annotations

import gc

import pytest

from llmload.edge.cluster import YOUNG_COLLECTION_THRESHOLD
from llmload.edge.users import ChatUser
from tests.edge.cluster import run_local
from tests.simserver import InProcessSim, serve

CHAT = "/v1/chat/completions"
FAST_SIM = ("--decode-step-ms", "1", "--decode-ms-per-seq", "0")


def _args(*extra: str) -> list[str]:
    return ["--headless", "--only-summary", "-u", "4", "--skip-preflight", *extra]


def _injected(sim: InProcessSim, kind: str) -> float:
    value = sim.registry.get_sample_value("llmload_sim_faults_injected_total", {"endpoint": CHAT, "kind": kind})
    return 0.0 if value is None else value


def test_nc18_sim_run_with_aborts_fails_and_keeps_aborted_tokens_out(capsys: pytest.CaptureFixture[str]) -> None:
    """40 requests, a quarter aborted: failures, finish reasons and tokens equal the simulator's counters."""
    with serve(*FAST_SIM, "--seed", "5", "--abort-rate", "0.25") as sim:
        run = run_local(ChatUser, sim.url, _args("--num-requests", "40", "--max-tokens", "16", "--ignore-eos"), users=4)
    results = run.results
    assert results is not None
    aborted = _injected(sim, "abort")
    assert 0 < aborted < 40
    assert results["requests"]["total"] == 40
    assert results["requests"]["failed"] == aborted
    assert results["requests"]["succeeded"] == sim.total("requests_completed", CHAT) == 40 - aborted
    assert results["requests"]["finish_reasons"] == {"abort": aborted, "length": 40 - aborted}
    assert {e["category"]: e["count"] for e in results["errors"]} == {"finish_reason abort": aborted}
    # throughput counts only the completed replies' tokens: 16 each, never the aborted 8
    assert results["tokens"]["completion"] == sim.total("completion_tokens", CHAT)
    assert results["tokens"]["completion"] == 16 * (40 - aborted)
    assert results["requests"]["short_of_requested"] == {
        "checked": 40 - aborted,
        "short": 0,
        "mean_got_tokens": None,
        "mean_asked_tokens": None,
    }
    assert results["passed"] is False
    assert run.exit_status == 1
    assert "--max-failure-ratio" in results["verdict"]
    out = capsys.readouterr().out
    assert f"Finish reasons:                         length {int(40 - aborted)}, abort {int(aborted)}" in out


def test_sim_run_with_same_text_counts_degenerate_replies_apart(capsys: pytest.CaptureFixture[str]) -> None:
    """Synthetic prompts all differ; the simulator answers each with one text: degenerate from the fifth reply."""
    with serve(*FAST_SIM, "--degenerate-rate", "1", "--degenerate-shape", "same") as sim:
        args = _args("--num-requests", "12", "--max-tokens", "32", "--input-tokens", "24")
        run = run_local(ChatUser, sim.url, args, users=1)
    results = run.results
    assert results is not None
    degenerate = results["requests"]["degenerate"]
    assert (degenerate["same_text"], degenerate["repeated_token"], degenerate["empty"]) == (8, 0, 0)
    assert degenerate["samples"]["same_text"].startswith("degenerate output: the same text as ")
    assert results["requests"]["succeeded"] == 4
    assert results["tokens"]["completion"] == 4 * 16  # the degenerate replies' tokens are out
    assert results["passed"] is False
    assert "Degenerate replies (failed):            same text 8" in capsys.readouterr().out


def test_sim_run_with_short_replies_warns_that_ignore_eos_was_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    """--ignore-eos asks for 16 tokens; half the replies stop at 8: counted short, warned, still successes."""
    with serve(*FAST_SIM, "--seed", "2", "--short-rate", "0.5") as sim:
        run = run_local(ChatUser, sim.url, _args("--num-requests", "20", "--max-tokens", "16", "--ignore-eos"), users=4)
    results = run.results
    assert results is not None
    short = _injected(sim, "short")
    assert 0 < short < 20
    assert results["requests"]["succeeded"] == sim.total("requests_completed", CHAT) == 20
    assert results["requests"]["short_of_requested"] == {
        "checked": 20,
        "short": short,
        "mean_got_tokens": 8.0,
        "mean_asked_tokens": 16.0,
    }
    assert results["requests"]["finish_reasons"] == {"length": 20 - short, "stop": short}
    assert results["tokens"]["completion"] == 16 * (20 - short) + 8 * short  # never 20 x 16
    assert results["tokens"]["completion"] == sim.total("completion_tokens", CHAT)
    assert results["passed"] is True
    assert (
        f"WARNING: the server ignored the requested length (ignore_eos / min_tokens): {int(short)} of 20 replies "
        "ended early, on average 8.0 of 16.0 tokens"
    ) in capsys.readouterr().out


def test_issue19_a_run_collects_the_youngest_generation_every_20000_allocations_not_700() -> None:
    """The cyclic collector's young threshold is raised at the run's start (``YOUNG_COLLECTION_THRESHOLD``)."""
    before = gc.get_threshold()
    gc.set_threshold(700, *before[1:])
    try:
        with serve(*FAST_SIM) as sim:
            run = run_local(ChatUser, sim.url, _args("--num-requests", "4", "--max-tokens", "4"), users=2)
        assert run.results is not None
        assert run.results["requests"]["succeeded"] == 4
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, *before[1:])
    finally:
        gc.set_threshold(*before)
