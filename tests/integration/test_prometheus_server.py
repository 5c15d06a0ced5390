"""The exporter under a real Prometheus server: master + 2 workers against `llmload sim`, checked by PromQL.

Prometheus (Debian package ``prometheus``, ``/usr/bin/prometheus``; ``.ci/run``
installs it) runs on loopback with a generated config scraping the master
every second and a temporary storage directory. Every wait is bounded.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import free_port, run_locust
from tests.integration.test_sim import metric_sum, metrics
from tests.unit.test_prometheus import dashboard_exprs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROMETHEUS_BIN = shutil.which("prometheus") or "/usr/bin/prometheus"
READY_TIMEOUT_S = 30.0
QUERY_TIMEOUT_S = 10.0
RUN_S = 15
USERS = 16


@dataclass
class Prometheus:
    """A Prometheus server on loopback scraping ``127.0.0.1:exporter_port`` every second."""

    url: str
    exporter_port: int

    def query(self, promql: str, at_unix: float) -> list[dict[str, Any]]:
        """Instant query at ``at_unix``; returns the result vector."""
        params = urllib.parse.urlencode({"query": promql, "time": f"{at_unix:.3f}"})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=QUERY_TIMEOUT_S) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, promql: str, at_unix: float) -> float | None:
        """The single value of an instant query, or None when the vector is empty."""
        result = self.query(promql, at_unix)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def series(self, promql: str, start_unix: float, end_unix: float) -> list[tuple[float, float]]:
        """Range query at 0.5 s steps; returns ``(time, value)`` of the single series (empty if none)."""
        params = urllib.parse.urlencode(
            {"query": promql, "start": f"{start_unix:.3f}", "end": f"{end_unix:.3f}", "step": "0.5"}
        )
        url = f"{self.url}/api/v1/query_range?{params}"
        with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT_S) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result = body["data"]["result"]
        assert len(result) <= 1, result
        return [(float(t), float(v)) for t, v in result[0]["values"]] if result else []

    def scalar_eventually(self, promql: str, at_unix: float, expected: float) -> float | None:
        """Re-query for up to 10 s until the value equals ``expected`` (ingestion lag); return the last value."""
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        value = self.scalar(promql, at_unix)
        while value != expected and time.monotonic() < deadline:
            time.sleep(0.25)
            value = self.scalar(promql, at_unix)
        return value


def _scraping(url: str) -> bool:
    """True once Prometheus is ready and has tried to scrape its target (up or down).

    A new Prometheus applies its targets up to 5 s after it is ready; a run
    started before that would miss its first seconds.
    """
    try:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=2) as response:
            targets = json.load(response)["data"]["activeTargets"]
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return False
    return bool(targets) and targets[0]["health"] in ("up", "down")


@pytest.fixture
def prometheus(tmp_path: Path, sim_url: str) -> Iterator[Prometheus]:
    if not os.access(PROMETHEUS_BIN, os.X_OK):
        pytest.skip(
            f"Prometheus server not installed ({PROMETHEUS_BIN} missing); "
            "install the Debian package: apt-get install prometheus (.ci/run does)"
        )
    exporter_port, web_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: llmload\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter_port}']\n"
        # the simulator's vLLM-named metrics feed the dashboard's inference-server row
        "  - job_name: server\n    static_configs:\n"
        f"      - targets: ['{sim_url.removeprefix('http://')}']\n"
    )
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [
            PROMETHEUS_BIN,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _scraping(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"Prometheus did not become ready: {log.read().decode()[-2000:]}")
            time.sleep(0.1)
        yield Prometheus(url, exporter_port)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


@pytest.fixture
def sim_url(sim_server) -> str:
    # Server-paced load (20 ms per decode step) with short geometric replies: throughput is steady,
    # users do not move in lockstep and the machine is not saturated. The results' average is
    # below the steady rate by about one E2E of throughput at each end (nothing completes in the
    # first E2E; requests cancelled at the stop are not counted): ~2% here, measured with
    # --requests-log; short replies keep that bias well inside the 5% tolerance.
    return sim_server("--decode-step-ms", "20", "--output-len-mean", "5")


def test_prometheus_promql_agrees_with_results_json(prometheus: Prometheus, sim_url: str, tmp_path: Path):
    out = tmp_path / "results.json"
    proc = run_locust(
        [
            "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", sim_url,
            "--processes", "2", "-u", str(USERS), "-r", "1000", "-t", f"{RUN_S}s", "--max-tokens", "64",
            "--skip-preflight", "--results-json", str(out),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus.exporter_port),
            "--prometheus-grace", "10",
        ],
        timeout_s=90,
    )  # fmt: skip
    exited_unix = time.time()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no scrape of the final totals" not in proc.stderr
    results = json.loads(out.read_text())
    completion = results["tokens"]["completion"]
    assert completion > 1_000  # a real load (about 5,000 tokens on a quiet machine); the checks below are exact

    # After the final scrape the counter equals the results exactly. Once the master is gone, the
    # next failed scrape marks its series stale, so "the value now" is the last sample before that:
    # last_over_time (range selectors skip staleness markers).
    total = prometheus.scalar_eventually(
        "sum(last_over_time(llmload_completion_tokens_total[1m]))", exited_unix, completion
    )
    assert total == completion
    ok = prometheus.scalar('sum(last_over_time(llmload_requests_total{outcome="ok"}[1m]))', exited_unix)
    assert ok == results["requests"]["succeeded"]

    # The rate over the steady part (all users running, 1 s margins) matches the run's tok/s.
    started = results["run"]["started_at_unix"]
    full = [t for t, users in prometheus.series("llmload_users", started, exited_unix) if users == USERS]
    steady_from = full[0] + 1.0
    steady_s = math.floor(full[-1] - 1.0 - steady_from)
    assert steady_s >= 9
    rate = prometheus.scalar(f"sum(rate(llmload_completion_tokens_total[{steady_s}s]))", steady_from + steady_s)
    assert rate == pytest.approx(results["throughput"]["output_tokens_per_s"], rel=0.05)

    # histogram_quantile over the run's buckets lands within 5% of the results' TTFT p99.
    p99 = prometheus.scalar(
        "histogram_quantile(0.99, sum by (le) (last_over_time(llmload_time_to_first_token_seconds_bucket[1m])))",
        exited_unix,
    )
    assert p99 == pytest.approx(results["latency"]["ttft_s"]["p99"], rel=0.05)

    # Runner gauges were live during the run.
    mid = (full[0] + full[-1]) / 2
    assert prometheus.scalar("llmload_workers", mid) == 2
    assert prometheus.scalar("llmload_users", mid) == USERS
    in_flight = prometheus.scalar("llmload_in_flight_requests", mid)
    assert in_flight is not None
    assert 0 < in_flight <= USERS
    info = prometheus.query("llmload_run_info", mid)
    assert info[0]["metric"]["run_id"] == results["run"]["run_id"]

    # The live 10 s window, once it holds only steady load, agrees with Prometheus' steady rate.
    late = full[-1] - 1.0
    window_rate = prometheus.scalar("sum(llmload_window_output_tokens_per_second)", late)
    assert window_rate == pytest.approx(rate, rel=0.05)

    # Every query of the shipped Grafana dashboard runs and (except error panels) finds data.
    for expr in dashboard_exprs():
        promql = expr.replace("$instance", ".*").replace("$endpoint", ".*").replace("$__rate_interval", "5s")
        found = prometheus.query(promql, late)
        assert found or "llmload_request_errors_total" in expr or "outcome!~" in expr, promql


def test_prometheus_port_in_use_stops_before_any_load(sim_url: str):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_locust(
            [
                "-f", "locustfiles/chat.py", "--headless", "-H", sim_url, "-u", "2", "-r", "2", "-t", "5s",
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(port),
            ],
            timeout_s=60,
        )  # fmt: skip
    assert proc.returncode == 2
    assert f"cannot serve Prometheus metrics on 127.0.0.1:{port}" in proc.stderr
    assert "--prometheus-port 0 to disable" in proc.stderr
    assert metric_sum(metrics(sim_url), "llmload_sim_requests_completed_total") == 0


def test_prometheus_never_scraped_does_not_delay_the_end_of_the_run(sim_url: str, tmp_path: Path):
    """No Prometheus at all: the run is unaffected and does not wait the (long) grace period."""
    out = tmp_path / "results.json"
    started = time.monotonic()
    proc = run_locust(
        [
            "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", sim_url, "-u", "4", "-r", "4",
            "-t", "2s", "--skip-preflight", "--results-json", str(out),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--prometheus-grace", "120",
        ],
        timeout_s=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.monotonic() - started < 60
    assert json.loads(out.read_text())["requests"]["succeeded"] > 0
