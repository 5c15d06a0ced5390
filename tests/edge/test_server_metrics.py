"""--server-metrics end to end against `llmload sim` (which publishes vLLM names): bounded runs in this process.

The simulator is served here (``tests/simserver.serve``) and each locust command line runs here
(``tests/edge/cluster.run_locustfile_here``; ``--processes 2``: a master and two workers). The runs
whose subject is the log's timestamps, the web UI's RESET or Locust's own ``--json-file``, and the
per-interval server reads (each interval read in time: not in one traced process shared with the
simulator), stay process tests in ``tests/integration/test_server_metrics.py``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.edge.cluster import run_locustfile_here as run_locust
from tests.simserver import serve


@pytest.fixture
def sim_url() -> Iterator[str]:
    with serve("--seed", "3", "--output-len-mean", "24") as sim:
        yield sim.url


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


def _total_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["endpoint"] is None]


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
    if split["p50"] is None:  # the difference is finer than the range the server's buckets allow its p50
        resolution = split["p50_resolution_s"]
        server_p50 = server["latency"]["ttft_s"]["p50"]
        assert resolution is not None
        assert abs(results["latency"]["ttft_s"]["p50"] - server_p50) < resolution
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
    assert "the answer is JSON, not the Prometheus text format: is it the /metrics path?" in wrong["error"]
    assert "WARNING: server metrics incomplete" in stdout
    assert elapsed_s < 60  # two bounded scrapes of 2 s, never the run's limit


def test_ttft_client_minus_server_over_requests_cancelled_at_the_stop_is_not_comparable(tmp_path):
    """Issue 24: with many requests cancelled at the stop the summary printed "TTFT client − server
    −726 ms (network + HTTP + client time)": the server's TTFT histogram holds the cancelled requests, the
    client's only its successes. Now: not comparable, and why."""
    out = tmp_path / "r.json"
    with serve("--decode-step-ms", "40", "--output-len-mean", "200") as sim:
        url = sim.url
        proc = run_locust(
            ["-f", "locustfiles/chat.py", "--headless", "-H", url, "-u", "16", "-r", "16", "-t", "6s",
             "--max-tokens", "60", "--skip-preflight", "--results-json", str(out)],
            timeout_s=90,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["requests"]["cancelled"] >= 4
    split = results["server"]["cross_check"]["ttft_client_minus_server_s"]
    assert split["client_count"] == results["latency"]["ttft_s"]["count"]
    assert split["server_count"] > split["client_count"]
    assert (split["mean"], split["p50"]) == (None, None)
    assert split["not_comparable"].startswith(f"the server timed {split['server_count']:,} first tokens")
    assert "TTFT client − server:" in proc.stdout
    assert "not comparable" in proc.stdout
    assert "network + HTTP" not in proc.stdout


def test_a_slow_last_server_read_writes_no_row_after_the_end(sim_url, tmp_path):
    """The last server read (up to 2 s against a hanging endpoint) came after the run's end was taken,
    and the timeline went on ticking during it: the end's interval reached ``--timeseries`` as a whole
    0.5 s one while the results cut it at the end (a CI failure of the single-process time-series test)."""
    series = tmp_path / "ts.jsonl"
    with socket.socket() as hanging:  # accepts connections (kernel backlog) and never answers
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(16)
        hang_url = f"http://127.0.0.1:{hanging.getsockname()[1]}/metrics"
        results, _ = run(
            sim_url, tmp_path, "--server-metrics", f"auto,{hang_url}",
            "--timeseries-interval", "0.5", "--timeseries", str(series),
        )  # fmt: skip
    assert results["server"]["endpoints"][1]["failed_scrapes"] >= 2  # the last read did wait its 2 s
    lines = [json.loads(line) for line in series.read_text().splitlines()]
    last_t = max(r["t"] for r in results["timeseries"])
    assert max(r["t"] for r in lines) == last_t  # no interval after the end's
    last = {(r["t"], r["endpoint"]): r for r in lines}  # a later line replaces an earlier one
    assert list(last.values()) == results["timeseries"]
