"""--server-metrics end to end against `llmload sim` (which publishes vLLM names): bounded runs on loopback."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.procs import run_locust
from tests.integration.test_sim import start_sim, stop_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def sim_url() -> Iterator[str]:
    url, proc = start_sim("--seed", "3", "--output-len-mean", "24")
    try:
        yield url
    finally:
        stop_sim(proc)


def run(sim_url: str, tmp_path: Path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "run.json"
    proc = run_locust(
        [
            "-f",
            "locustfiles/chat.py",
            "--headless",
            "-H",
            sim_url,
            "-u",
            "16",
            "-r",
            "16",
            "-t",
            "60s",
            "--num-requests",
            "150",
            "--max-tokens",
            "48",
            "--results-json",
            str(out),
            *extra,
        ],
        timeout_s=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.parametrize("processes", [None, "2"])
def test_server_metrics_sim_token_deltas_equal_client_totals(sim_url, tmp_path, processes):
    results, stdout = run(sim_url, tmp_path, *(["--processes", processes] if processes else []))
    server = results["server"]
    assert server["kind"] == "llmload-sim"
    assert server["complete"] is True
    assert results["requests"]["succeeded"] == 150
    assert results["requests"]["cancelled"] == 0
    assert server["prompt_tokens"] == results["tokens"]["prompt"] > 0
    assert server["generation_tokens"] == results["tokens"]["completion"] > 0
    assert server["counters"]["requests_succeeded"] == 150  # preflight probes came before the first scrape
    assert server["names"]["ttft_s"] == "vllm:time_to_first_token_seconds"
    assert server["latency"]["ttft_s"]["count"] == 150
    check = server["cross_check"]
    assert check["tokens"] == "client = server"
    split = check["ttft_client_minus_server_s"]
    # client TTFT = server TTFT + network + HTTP + client time: a small positive remainder on loopback
    assert -0.002 < split["mean"] < 0.05
    assert split["p50"] is not None
    assert "Tokens: client = server" in stdout
    assert "TTFT client − server mean / p50 (ms):" in stdout


def test_server_metrics_off_writes_null(sim_url, tmp_path):
    results, stdout = run(sim_url, tmp_path, "--server-metrics", "off")
    assert results["server"] is None
    assert "--- Server" not in stdout


def test_server_metrics_hanging_and_wrong_endpoints_only_warn(sim_url, tmp_path):
    with socket.socket() as hanging:  # accepts connections (kernel backlog) and never answers
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(16)
        hang_url = f"http://127.0.0.1:{hanging.getsockname()[1]}/metrics"
        json_url = f"{sim_url}/v1/models"  # answers, but JSON, not Prometheus text
        began = time.monotonic()
        results, stdout = run(sim_url, tmp_path, "--server-metrics", f"auto,{hang_url},{json_url}")
        elapsed_s = time.monotonic() - began
    server = results["server"]
    assert server["generation_tokens"] == results["tokens"]["completion"]  # the target is still read
    assert server["complete"] is False
    hang, wrong = server["endpoints"][1], server["endpoints"][2]
    assert (hang["url"], hang["scrapes"], hang["failed_scrapes"]) == (hang_url, 0, 2)
    assert "no answer within 2 s" in hang["error"]
    assert (wrong["scrapes"], wrong["failed_scrapes"]) == (0, 2)
    assert "not Prometheus text" in wrong["error"]
    assert "WARNING: server metrics incomplete" in stdout
    assert elapsed_s < 60  # two bounded scrapes of 2 s, never the run's limit
