"""Failure cases (BC-24, BC-25, BC-27, BC-28, BC-29) and the credential-leak checks.

Load runs use real `locust` processes on loopback against `llmload sim` or a
scripted server; each is bounded by `-t`/`--num-requests` and a subprocess timeout.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import time
import uuid

import gevent
import pytest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import MAX_ERROR_CATEGORIES, LLMStats
from llmload.edge.run_parts import CpuMonitor
from llmload.exporters.sections import client_saturated
from llmload.net.transport import GeventHTTPTransport
from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.request.record import Outcome, RequestRecord
from llmload.run.wire import to_wire
from llmload.settings.config import Timeouts
from llmload.testing import (
    CF,
    ROLE,
    C,
    Ending,
    Reply,
    ScriptedServer,
    U,
    W,
    failed_record,
    sse,
)
from tests.integration.procs import free_port, locust_argv, run_locust
from tests.integration.test_sim import REPO_ROOT, metrics, start_sim, stop_sim

pytestmark = [pytest.mark.integration]


def _locust(args: list[str], *, timeout_s: float = 120, env: dict[str, str] | None = None, preexec=None):
    return run_locust(args, timeout_s=timeout_s, env=env, preexec=preexec)


# BC-29 (a run whose every request fails, a failed preflight probe) and NC-28 (hosts refused before load)
# run in process: tests/edge/test_refusals.py.


# Issue 14, P5: a web-UI run blocked by preflight exits 2, as the README says, and says why.
def test_p5_web_ui_run_blocked_by_preflight_exits_2(tmp_path):
    url, sim = start_sim()
    out = tmp_path / "r.json"
    args = [
        "-f", "locustfiles/chat.py", "-H", url, "--web-host", "127.0.0.1", "--web-port", str(free_port()),
        "--autostart", "-u", "2", "-r", "2", "--model", "other", "--results-json", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(locust_argv(args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not out.exists():
            assert proc.poll() is None, "locust exited before writing the results"
            assert time.monotonic() < deadline, "no results file for the blocked run"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # the user closes the web UI
        stdout, stderr = proc.communicate(timeout=60)
        served = metrics(url)
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_sim(sim)
    assert proc.returncode == 2, stderr[-3000:]
    results = json.loads(out.read_text())
    assert (
        results["blocked"]
        == 'model "other" not served; available: llmload-sim. Pass --model <one of them>, e.g. --model llmload-sim'
    )
    assert (results["passed"], results["exit_status"]) == (False, 2)
    assert results["verdict"].startswith('BLOCKED before load: model "other" not served')
    assert "BLOCKED before load" in stdout
    assert "failure ratio" not in stdout
    assert sum(v for (name, _), v in served.items() if name == "llmload_sim_requests_completed_total") == 0


# ── BC-27: timeouts, truncated streams, in-flight at stop ──────────────
def _client_run(url: str, timeouts: Timeouts) -> RequestRecord:
    client = StreamingClient(GeventHTTPTransport(url, headers={}, timeouts=timeouts))
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    return client.run(request)


# Case BC-27 A: headers + role, then silence: a read-idle timeout failure, not a hang or a success.
def test_bc27_silence_after_headers_is_an_idle_timeout_failure():
    reply = Reply(writes=[W(10, sse(ROLE))], ending=Ending.STALL)
    with ScriptedServer(reply) as srv:
        record = _client_run(srv.base_url, Timeouts(connect_s=5, idle_s=0.5, total_s=30))
    assert record.outcome is Outcome.TIMEOUT
    assert record.error is not None
    assert "0.5" in record.error.message
    stats = LLMStats.empty()
    stats.add(record)
    total = stats.total()
    assert (total.succeeded, total.failed) == (0, 1)


# Case BC-27 B: two tokens then TCP close without finish_reason or [DONE].
def test_bc27_stream_closed_before_completion_is_a_failure_without_tokens():
    reply = Reply(
        writes=[W(10, sse(ROLE)), W(20, sse(C({"content": "a"}))), W(30, sse(C({"content": "b"})))],
        ending=Ending.CLOSE,
    )
    with ScriptedServer(reply) as srv:
        record = _client_run(srv.base_url, Timeouts(connect_s=5, idle_s=5, total_s=30))
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "stream ended before completion" in record.error.category + record.error.message
    results_stats = LLMStats.empty()
    results_stats.add(record)
    total = results_stats.total()
    assert total.succeeded == 0
    assert total.histograms()["ttft_s"].count == 0  # partial tokens and times stay out of latency


# ── BC-28: unique error messages must not grow memory ───────────────────
# Case BC-28: every failure carries a unique request id; grouping stays bounded.
def test_bc28_unique_error_messages_are_grouped_with_bounded_samples():
    stats = LLMStats.empty()
    for _ in range(20_000):
        message = f"internal error, request id {uuid.uuid4()}"
        stats.add(failed_record("HTTP 500 InternalServerError", message, 500, start_unix=0.0, end_s=None))
    for i in range(500):  # distinct categories are capped too
        stats.add(failed_record(f"server {i:03d}", "x", None, outcome=Outcome.SERVER_ERROR, start_unix=0.0, end_s=None))
    total = stats.total()
    assert total.failed == 20_500
    assert len(total.errors) <= MAX_ERROR_CATEGORIES
    group = total.errors["HTTP 500 InternalServerError"]
    assert group.count == 20_000
    assert len(group.samples) <= 3
    assert len(json.dumps(to_wire(stats))) < 20_000


# ── BC-24: connection pool and open-file limit ──────────────────────────


def _limit_open_files():
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


# Case BC-24: an open-file limit below the users is refused with the numbers, not Errno 24 mid-run.
def test_bc24_open_file_limit_below_users_is_refused_before_load():
    url, sim = start_sim()
    try:
        proc = _locust(
            ["-f", "locustfiles/chat.py", "--headless", "-H", url, "-u", "256", "-r", "256", "-t", "5s"],
            preexec=_limit_open_files,
            timeout_s=60,
        )
        served = metrics(url)
    finally:
        stop_sim(sim)
    assert proc.returncode == 2
    assert "open-file limit 256 (hard 256) < needed ~512" in proc.stderr
    completed = sum(v for (name, _), v in served.items() if name == "llmload_sim_requests_completed_total")
    assert completed <= 1  # at most the preflight probe


# ── BC-25: the load generator itself saturated ──────────────────────────
# Case BC-25: sustained CPU above the threshold is detected and reported.
def test_bc25_cpu_monitor_flags_only_sustained_saturation():
    samples = iter([95.0, 97.0, 20.0, 95.0, 96.0, 99.0, 10.0] + [0.0] * 100)
    monitor = CpuMonitor(threshold_percent=90.0, interval_s=0.01, sample=lambda: next(samples))
    monitor.start()
    gevent.sleep(0.3)
    monitor.stop()
    assert monitor.saturated_s == pytest.approx(0.03)
    assert monitor.max_percent == 99.0


def test_bc25_cpu_monitor_ignores_short_spikes():
    monitor = CpuMonitor(threshold_percent=90.0, interval_s=1.0, sample=lambda: 0.0)
    for percent in [95.0, 99.0, 20.0, 95.0, 10.0]:
        monitor.observe(percent)
    assert monitor.saturated_s == 2.0
    assert not client_saturated(monitor.saturated_s, LatencyHistogram.empty())


def test_bc25_cpu_monitor_samples_the_real_process():
    monitor = CpuMonitor(interval_s=0.05)
    monitor.start()
    deadline = gevent.get_hub().loop.now() + 0.5
    while gevent.get_hub().loop.now() < deadline:
        sum(range(20_000))
        gevent.sleep(0)
    monitor.stop()
    assert monitor.max_percent > 0.0


# ── Security: no credential in any output: tests/edge/test_failure_cases.py ────


def test_idle_keepalive_connection_closed_by_the_server_is_retried_once_not_failed():
    """llama-server announces keep-alive but closes after each streamed reply (found by `make test-real`).

    The next request, sent at once on the pooled connection, meets the close before any response
    byte: it is sent again on a fresh connection, and still reaches the server exactly once.
    Without the retry about half of these requests fail with "connection closed".
    """
    body = sse(ROLE, C({"content": "hi"}), CF("stop"), U(3, 1), "[DONE]")
    with ScriptedServer(Reply(writes=[W(1, body)], close_after_ms=2)) as srv:
        transport = GeventHTTPTransport(srv.base_url, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=30))
        client = StreamingClient(transport)
        request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
        outcomes = [client.run(request).outcome for _ in range(30)]
        received = len(srv.requests)
    assert outcomes == [Outcome.OK] * 30
    assert received == 30
