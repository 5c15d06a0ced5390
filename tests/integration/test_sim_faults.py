"""Fault injection of ``llmload sim`` seen through llmload's real client path.

Every test runs a real simulator subprocess on loopback and sends requests
with ``StreamingClient`` over ``GeventHTTPTransport`` (what a Locust user
runs), then checks the ``Outcome`` and ``ErrorInfo`` the client produced
against the simulator's own ground truth (``llmload_sim_faults_injected_total``).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import gevent
import pytest

from llmload.net.transport import GeventHTTPTransport
from llmload.request.client import StreamingClient
from llmload.request.payloads import LLMRequest, build_chat_request, build_completion_request
from llmload.request.record import Outcome, RequestRecord, TokenSource
from llmload.settings.config import Timeouts
from tests.integration.test_sim import REPO_ROOT, TIMEOUT_S, metric_sum, metrics

pytestmark = pytest.mark.integration

MODEL = "llmload-sim"
FAST_SIM = ("--decode-step-ms", "1", "--decode-ms-per-seq", "0")
TIMEOUTS = Timeouts(connect_s=5, idle_s=10, total_s=30)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def completion_request(*, stream: bool = True, max_tokens: int = 8) -> LLMRequest:
    return build_completion_request(
        model=MODEL, prompt="Hello, world!", max_tokens=max_tokens, ignore_eos=True, stream=stream
    )


def chat_request(*, stream: bool = True, max_tokens: int = 8) -> LLMRequest:
    return build_chat_request(
        model=MODEL,
        messages=[{"role": "user", "content": "hello world"}],
        max_tokens=max_tokens,
        ignore_eos=True,
        stream=stream,
    )


@pytest.fixture
def sim(sim_server: Callable[..., str]) -> Callable[..., str]:
    """Factory: ``sim(*flags) -> base_url`` (fast decode steps), served in this process; stopped at teardown."""
    return lambda *args: sim_server(*FAST_SIM, *args)


def run_requests(url: str, requests: list[LLMRequest], timeouts: Timeouts = TIMEOUTS) -> list[RequestRecord]:
    """Send ``requests`` in order over one keep-alive transport (as one Locust user does)."""
    transport = GeventHTTPTransport(url, headers={}, timeouts=timeouts)
    try:
        client = StreamingClient(transport, total_timeout_s=timeouts.total_s)
        return [client.run(r) for r in requests]
    finally:
        transport.close()


def injected(samples: Samples, kind: str, endpoint: str = "/v1/completions") -> float:
    return samples[("llmload_sim_faults_injected_total", (("endpoint", endpoint), ("kind", kind)))]


def completed(samples: Samples, endpoint: str = "/v1/completions") -> float:
    return samples[("llmload_sim_requests_completed_total", (("endpoint", endpoint),))]


def categories(records: list[RequestRecord]) -> set[tuple[Outcome, str | None, int | None]]:
    return {(r.outcome, r.error.category if r.error else None, r.error.status if r.error else None) for r in records}


# ---------------------------------------------------------------- --fail-rate


@pytest.mark.parametrize("stream", [True, False])
def test_fault_fail_rate_gives_http_500_error_counted_by_sim(gevent_ready, sim, stream):
    url = sim("--fail-rate", "1")
    records = run_requests(url, [completion_request(stream=stream)] * 3)
    assert categories(records) == {(Outcome.HTTP_ERROR, "HTTP 500 InternalServerError", 500)}
    assert records[0].error is not None
    assert records[0].error.message == "llmload sim: injected failure"
    assert all(not r.token_times_s for r in records)
    samples = metrics(url)
    assert injected(samples, "fail") == 3
    assert completed(samples) == 0
    assert metric_sum(samples, "llmload_sim_completion_tokens_total") == 0


def test_fault_faults_after_starts_failing_requests_mid_run(gevent_ready, sim):
    # a server that breaks mid-run: healthy for the first second, then every request fails
    url = sim("--fail-rate", "1", "--faults-after", "1")
    records = run_requests(url, [completion_request()] * 2)
    gevent.sleep(1.2)
    records += run_requests(url, [completion_request()] * 2)
    assert [r.outcome for r in records] == [Outcome.OK, Outcome.OK, Outcome.HTTP_ERROR, Outcome.HTTP_ERROR]
    samples = metrics(url)
    assert (injected(samples, "fail"), completed(samples)) == (2, 2)


@pytest.mark.parametrize("shape", ["openai", "vllm"])
def test_fault_fail_shape_and_status_reach_the_error_category(gevent_ready, sim, shape):
    url = sim("--fail-rate", "1", "--fail-status", "502", "--fail-shape", shape)
    (record,) = run_requests(url, [chat_request()])
    assert categories([record]) == {(Outcome.HTTP_ERROR, "HTTP 502 BadGatewayError", 502)}
    assert injected(metrics(url), "fail", "/v1/chat/completions") == 1


def test_fault_fail_shape_vllm_body_is_top_level_error_object(sim):
    url = sim("--fail-rate", "1", "--fail-shape", "vllm")
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        conn.request("POST", "/v1/completions", body=completion_request().body)
        resp = conn.getresponse()
        body = json.loads(resp.read())
    finally:
        conn.close()
    assert resp.status == 500
    assert body == {
        "object": "error",
        "message": "llmload sim: injected failure",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }


# ---------------------------------------------------------------- --error-200-rate


@pytest.mark.parametrize("stream", [True, False])
def test_fault_error_200_is_server_error_not_empty_success(gevent_ready, sim, stream):
    url = sim("--error-200-rate", "1")
    records = run_requests(url, [chat_request(stream=stream)] * 2)
    # a JSON error body on a streaming request is still read as an error (BC-11)
    assert categories(records) == {(Outcome.SERVER_ERROR, "InternalServerError/500", 200)}
    samples = metrics(url)
    assert injected(samples, "error_200", "/v1/chat/completions") == 2
    assert completed(samples, "/v1/chat/completions") == 0


# ---------------------------------------------------------------- --midstream-error-rate


@pytest.mark.parametrize("make_request", [completion_request, chat_request])
def test_fault_midstream_error_fails_after_partial_tokens(gevent_ready, sim, make_request):
    url = sim("--midstream-error-rate", "1")
    records = run_requests(url, [make_request(max_tokens=10)] * 2)
    assert categories(records) == {(Outcome.SERVER_ERROR, "InternalServerError/500", 200)}
    # the error struck after 10 // 2 tokens: those arrived but the request is no success (BC-10)
    assert [len(r.token_times_s) for r in records] == [5, 5]
    assert not any(r.ok for r in records)
    endpoint = "/v1/completions" if make_request is completion_request else "/v1/chat/completions"
    samples = metrics(url)
    assert injected(samples, "midstream_error", endpoint) == 2
    assert completed(samples, endpoint) == 0
    assert metric_sum(samples, "llmload_sim_completion_tokens_total") == 0
    assert metric_sum(samples, "llmload_sim_requests_running") == 0


def test_fault_midstream_error_leaves_non_streaming_requests_alone(gevent_ready, sim):
    url = sim("--midstream-error-rate", "1")
    (record,) = run_requests(url, [completion_request(stream=False, max_tokens=6)])
    assert record.outcome is Outcome.OK
    assert record.completion_tokens.value == 6
    samples = metrics(url)
    assert injected(samples, "midstream_error") == 0
    assert completed(samples) == 1


# ---------------------------------------------------------------- --drop-rate


def test_fault_drop_stream_is_stream_error_and_connection_recovers(gevent_ready, sim):
    url = sim("--drop-rate", "1")
    records = run_requests(url, [completion_request(max_tokens=12)] * 3)
    assert categories(records) == {(Outcome.STREAM_ERROR, "stream ended before completion", None)}
    assert [len(r.token_times_s) for r in records] == [6, 6, 6]
    assert records[0].error is not None
    assert "connection closed mid-body" in records[0].error.message
    samples = metrics(url)
    assert injected(samples, "drop") == 3
    assert completed(samples) == 0
    assert metric_sum(samples, "llmload_sim_requests_aborted_total") == 0


def test_fault_drop_whole_reply_is_truncated_body(gevent_ready, sim):
    url = sim("--drop-rate", "1")
    (record,) = run_requests(url, [chat_request(stream=False)])
    assert categories([record]) == {(Outcome.STREAM_ERROR, "body ended before completion", None)}
    samples = metrics(url)
    assert injected(samples, "drop", "/v1/chat/completions") == 1
    assert completed(samples, "/v1/chat/completions") == 0


# ---------------------------------------------------------------- --stall-*


def test_fault_stall_longer_than_idle_timeout_is_read_idle_timeout(gevent_ready, sim):
    url = sim("--stall-rate", "1", "--stall-first-token-s", "1.5")
    short = Timeouts(connect_s=2, idle_s=0.4, total_s=10)
    (record,) = run_requests(url, [chat_request()], short)
    # a stalled stream has its headers; the silence after them trips the idle timeout
    assert categories([record]) == {(Outcome.TIMEOUT, "timeout: read idle", None)}
    assert record.headers_s is not None
    assert record.headers_s < 0.3
    assert record.token_times_s == []
    assert injected(metrics(url), "stall", "/v1/chat/completions") == 1


def test_fault_stall_of_whole_reply_times_out_before_headers(gevent_ready, sim):
    url = sim("--stall-rate", "1", "--stall-first-token-s", "1.5")
    short = Timeouts(connect_s=2, idle_s=0.4, total_s=10)
    (record,) = run_requests(url, [completion_request(stream=False)], short)
    assert categories([record]) == {(Outcome.TIMEOUT, "timeout: before headers", None)}


def test_fault_stall_shorter_than_idle_timeout_delays_ttft_and_succeeds(gevent_ready, sim):
    url = sim("--stall-rate", "1", "--stall-first-token-s", "0.5")
    (record,) = run_requests(url, [completion_request(max_tokens=4)])
    assert record.outcome is Outcome.OK
    assert record.ttft_s is not None
    assert 0.5 <= record.ttft_s < 1.5
    samples = metrics(url)
    assert injected(samples, "stall") == 1
    assert completed(samples) == 1  # a stall is a latency fault: the reply still completes


# ---------------------------------------------------------------- --overload-*


@pytest.mark.parametrize(("status", "kind"), [("429", "RateLimitError"), ("503", "ServiceUnavailableError")])
def test_fault_overload_is_throttled_with_its_status(gevent_ready, sim, status, kind):
    url = sim("--overload-rate", "1", "--overload-status", status)
    records = run_requests(url, [completion_request()] * 2)
    assert categories(records) == {(Outcome.THROTTLED, f"HTTP {status} {kind}", int(status))}
    samples = metrics(url)
    assert injected(samples, "overload") == 2
    assert metric_sum(samples, "llmload_sim_requests_rejected_total") == 0


def test_fault_overload_sends_retry_after(sim):
    url = sim("--overload-rate", "1", "--overload-status", "503")
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        conn.request("POST", "/v1/completions", body=completion_request(stream=False).body)
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()
    assert (resp.status, resp.getheader("Retry-After")) == (503, "1")


# ---------------------------------------------------------------- mixed rates, determinism

_KIND_OF_CATEGORY = {
    (Outcome.HTTP_ERROR, "HTTP 500 InternalServerError"): "fail",
    (Outcome.THROTTLED, "HTTP 429 RateLimitError"): "overload",
    (Outcome.SERVER_ERROR, "InternalServerError/500"): "error_200 or midstream_error",
    (Outcome.STREAM_ERROR, "stream ended before completion"): "drop",
}
MIXED = (
    "--fail-rate", "0.1", "--error-200-rate", "0.1", "--midstream-error-rate", "0.1",
    "--drop-rate", "0.1", "--overload-rate", "0.1", "--output-len-mean", "6",
)  # fmt: skip


def _kinds(records: list[RequestRecord]) -> list[str]:
    out = []
    for r in records:
        if r.ok:
            out.append("ok")
        else:
            assert r.error is not None, r
            out.append(_KIND_OF_CATEGORY[(r.outcome, r.error.category)])
    return out


def test_fault_mixed_rates_client_outcomes_equal_sim_ground_truth(gevent_ready, sim):
    url = sim(*MIXED, "--seed", "7")
    records = run_requests(url, [completion_request(max_tokens=16)] * 80)
    seen = Counter(_kinds(records))
    samples = metrics(url)
    kinds = ("fail", "overload", "error_200", "midstream_error", "drop")
    truth = {kind: injected(samples, kind) for kind in kinds}
    assert seen["fail"] == truth["fail"] > 0
    assert seen["overload"] == truth["overload"] > 0
    assert seen["error_200 or midstream_error"] == truth["error_200"] + truth["midstream_error"]
    assert truth["error_200"] > 0
    assert truth["midstream_error"] > 0
    assert seen["drop"] == truth["drop"] > 0
    assert seen["ok"] == completed(samples) == 80 - sum(truth.values())
    # partial tokens of failures never reach the success totals
    ok = [r for r in records if r.ok]
    assert {r.completion_tokens.source for r in ok} == {TokenSource.SERVER}
    assert sum(r.completion_tokens.value or 0 for r in ok) == metric_sum(samples, "llmload_sim_completion_tokens_total")
    assert sum(r.prompt_tokens.value or 0 for r in ok) == metric_sum(samples, "llmload_sim_prompt_tokens_total")
    assert any(r.token_times_s for r in records if not r.ok)


def test_fault_decisions_reproduce_with_seed(gevent_ready, sim):
    def kinds_with(seed: str) -> list[str]:
        return _kinds(run_requests(sim(*MIXED, "--seed", seed), [completion_request()] * 30))

    first, again, other = kinds_with("1"), kinds_with("1"), kinds_with("2")
    assert first == again
    assert first != other
    assert len(set(first)) >= 4


# ---------------------------------------------------------------- option validation


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-rate", "0.7", "--drop-rate", "0.5"], "failure rates add up to 1.2 > 1"),
        (["--fail-rate", "1.5"], "--fail-rate must be a probability within 0..1, got 1.5"),
        (["--fail-status", "200"], "--fail-status must be an HTTP error status 400-599, got 200"),
        (["--overload-status", "500"], "--overload-status must be 429 or 503, got 500"),
        (["--stall-rate", "0.5"], "--stall-rate (0.5) and --stall-first-token-s (0.0) go together"),
        (["--faults-after", "-1"], "--faults-after must be seconds >= 0, got -1.0"),
    ],
)
def test_fault_bad_option_exits_2_naming_the_flag(args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "llmload.sim", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 2
    assert message in proc.stderr.decode()


# ---------------------------------------------------------------- Locust end to end
