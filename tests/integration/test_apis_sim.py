"""The Responses, Messages and embeddings users against `llmload sim`: totals equal the simulator's counters.

Real `locust` processes on loopback, bounded by `--num-requests`, `-t` and a subprocess timeout:
the sweep and the web UI's stop. The totals over two workers, multi-turn and open loop run in
process: ``tests/edge/test_api_runs.py``. The preflight sends one probe per user class (max_tokens 2), which the
simulator counts too.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from llmload.request.api_bodies import build_messages_request, build_responses_request
from llmload.request.record import Outcome
from llmload.settings.config import Timeouts
from tests.integration.procs import free_port, locust_argv, web_ui_stop
from tests.integration.test_sim import REPO_ROOT, metric_sum, metrics, start_sim, stop_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_PATHS = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "embeddings": "/v1/embeddings",
}


@pytest.fixture
def sim_url(sim_server) -> str:
    return sim_server("--decode-step-ms", "5", "--output-len-mean", "20")


def _truth(url: str, endpoint: str) -> dict[str, float]:
    samples = metrics(url)
    label = (("endpoint", _PATHS[endpoint]),)
    return {
        name: samples[(f"llmload_sim_{name}_total", label)]
        for name in ("requests_completed", "requests_aborted", "prompt_tokens", "completion_tokens")
    }


@pytest.mark.parametrize("endpoint", ["responses", "embeddings"])
def test_sweep_runs_the_new_users_step_by_step(sim_url, tmp_path, endpoint):
    out = tmp_path / "sweep.json"
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", "sweep", "--sweep", "users=1,4", "--results-json", str(out), "--",
         "-f", f"locustfiles/{endpoint}.py", "-H", sim_url, "--num-requests", "12", "-t", "60s",
         "--max-tokens", "8", "--prometheus-port", "0", "--only-summary"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = json.loads(out.read_text())["steps"]
    assert [s["step"] for s in steps] == [1, 4]
    assert [s["requests"]["succeeded"] for s in steps] == [12, 12]
    assert [s["requests"]["failed"] for s in steps] == [0, 0]
    if endpoint == "embeddings":
        assert all(s["throughput"]["output_tokens_per_s"] is None for s in steps)
        assert all(s["throughput"]["inputs_per_s"] > 0 for s in steps)
    else:
        assert all(s["throughput"]["output_tokens_per_s"] > 0 for s in steps)
    table = proc.stdout[proc.stdout.index("req/s") :]
    assert table.count("\n") >= 2


# ── the simulator's own failure events, read by the client ─────────────────
def _client_run(url: str, request):
    from llmload.net.transport import GeventHTTPTransport
    from llmload.request.client import StreamingClient

    transport = GeventHTTPTransport(url, headers={}, timeouts=Timeouts(connect_s=5, idle_s=10, total_s=30))
    try:
        return StreamingClient(transport).run(request)
    finally:
        transport.close()


@pytest.mark.parametrize(
    ("flag", "api", "category"),
    [
        ("--midstream-error-rate", "responses", "response.failed code server_error"),
        ("--abort-rate", "responses", "finish_reason incomplete:abort"),
        ("--midstream-error-rate", "messages", "api_error"),
        ("--abort-rate", "messages", "finish_reason abort"),
    ],
)
def test_sim_fault_flags_end_streams_with_the_apis_own_failure_events(gevent_ready, sim_server, flag, api, category):
    url = sim_server(flag, "1", "--decode-step-ms", "2", "--output-len-mean", "20")
    messages = [{"role": "user", "content": "hi"}]
    build = build_responses_request if api == "responses" else build_messages_request
    record = _client_run(url, build(model="llmload-sim", messages=messages, max_tokens=16))
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == category


@pytest.mark.parametrize("stream", [True, False])
def test_sim_continues_a_stored_response_and_refuses_an_unknown_id(gevent_ready, sim_url, stream):
    def send(previous: str | None):
        request = build_responses_request(
            model="llmload-sim", messages=[{"role": "user", "content": "hi there"}], max_tokens=8, stream=stream,
            previous_response_id=previous,
        )  # fmt: skip
        return _client_run(sim_url, request)

    first = send(None)
    assert first.outcome is Outcome.OK, first.error
    assert first.response_id is not None
    assert first.response_id.startswith("resp_")
    second = send(first.response_id)
    assert second.outcome is Outcome.OK, second.error
    # the stored conversation (prompt and reply) comes before the new input
    assert second.prompt_tokens.value == first.prompt_tokens.value * 2 + first.completion_tokens.value
    assert second.response_id not in (None, first.response_id)
    unknown = send("resp_never-served")
    assert unknown.outcome is Outcome.HTTP_ERROR
    assert unknown.error is not None
    assert unknown.error.status == 400
    assert "Previous response with id 'resp_never-served' not found" in unknown.error.message


# ── the web UI: a mixed run started and stopped there, every request counted per endpoint ──
def test_mixed_locustfile_in_the_web_ui_counts_every_request_per_endpoint(tmp_path):
    url, sim = start_sim("--decode-step-ms", "10", "--output-len-mean", "20")
    out = tmp_path / "r.json"
    port = free_port()
    args = [
        "-f", "locustfiles/mixed.py", "-H", url, "--web-host", "127.0.0.1", "--web-port", str(port),
        "--autostart", "-u", "10", "-r", "10", "--max-tokens", "24", "--skip-preflight", "--results-json", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(locust_argv(args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while metric_sum(metrics(url), "llmload_sim_requests_completed_total") < 40:
            assert time.monotonic() < deadline, "no load within 60 s"
            time.sleep(0.2)
        web_ui_stop(port, out)
        for _ in range(100):  # until the simulator noticed every client that went away
            samples = metrics(url)
            if (
                metric_sum(samples, "llmload_sim_requests_running")
                + metric_sum(samples, "llmload_sim_requests_waiting")
                == 0
            ):
                break
            time.sleep(0.1)
        truth = {e: _truth(url, e) for e in ("chat", "responses", "embeddings")}
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        stop_sim(sim)
    assert "Traceback" not in stderr
    results = json.loads(out.read_text())
    entries = {entry["endpoint"]: entry for entry in results["by_endpoint"]}
    assert set(entries) == {"chat", "responses", "embeddings"}
    for endpoint, entry in entries.items():
        req = entry["requests"]
        received = truth[endpoint]["requests_completed"] + truth[endpoint]["requests_aborted"]
        assert req["succeeded"] + req["failed"] + req["cancelled"] == received, endpoint
        assert req["failed"] == 0
        assert req["succeeded"] >= 1
    assert sum(e["requests"]["succeeded"] for e in entries.values()) == results["requests"]["succeeded"]
