"""--server-metrics end to end against `llmload sim` (which publishes vLLM names): bounded runs on loopback.

The runs whose subject is llmload's scrape and its figures run in process
(``tests/edge/test_server_metrics.py``). These stay process tests: the log's timestamps, the web
UI's RESET, Locust's own ``--json-file``, and the per-interval server reads (in one traced process
with the simulator and two workers, two of nine intervals' reads were missing).
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest

from llmload.testing import Reply, ScriptedServer
from tests.integration.procs import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def sim_url(sim_server) -> str:
    return sim_server("--seed", "3", "--output-len-mean", "24")


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
def test_server_metrics_per_interval_columns_add_up_to_the_run(sim_url, tmp_path, processes):
    """Every interval's total row gets the server's gauges and token rates, read at the interval's end.

    The intervals' server token deltas add up to the run's server deltas exactly (each is the
    increase between two consecutive reads of the same counter, from the read before the load to
    the one after it). Per interval they differ from the client's tokens: the server counts tokens as
    it generates them, up to the moment of the read (a few ms after the interval's end), while
    the client counts a request's tokens in the interval it finished; only the sums must agree.
    """
    series = tmp_path / "ts.jsonl"
    results, _ = run(
        sim_url,
        tmp_path,
        *("--num-requests", "600", "--timeseries-interval", "2", "--timeseries", str(series)),
        *("--csv", str(tmp_path / "run")),
        *(["--processes", processes] if processes else []),
    )
    server, rows = results["server"], _total_rows(results["timeseries"])
    assert results["requests"]["succeeded"] == 600
    assert server["generation_tokens"] == results["tokens"]["completion"] > 0
    assert sum(r["server_generation_tokens"] or 0 for r in rows) == server["generation_tokens"]
    assert sum(r["server_prompt_tokens"] or 0 for r in rows) == server["prompt_tokens"]
    read = [r for r in rows if r["server_scrape_s"] is not None]
    assert len(read) >= len(rows) - 1  # a read for each interval (the stop's read closes the last one)
    assert all(r["server_scrape_s"] < 2.0 for r in read)
    assert all(r["server_scrape_failures"] == 0 or r["server_generation_tokens"] is None for r in read)
    # reads that answered while the load ran (a read bounded by 0.5 s can fail on a very busy machine: counted)
    under_load = [r for r in read[:-1] if r["server_running_requests"] is not None and r["succeeded"] > 0]
    assert under_load, [(r["server_scrape_s"], r["server_scrape_failures"]) for r in read]
    assert any(r["server_running_requests"] > 0 for r in under_load)
    assert all(0.0 <= r["server_kv_cache_usage"] <= 1.0 for r in under_load)
    rated = [r for r in rows if r["server_generation_tokens_per_s"] is not None]
    assert rated
    assert all(r["server_generation_tokens_per_s"] > 0 for r in rated if r["server_generation_tokens"])
    assert all(r["server_running_requests"] is None for r in results["timeseries"] if r["endpoint"] is not None)
    # the JSONL carries the same columns (an interval written again later replaces the earlier line)
    latest = {}
    for line in series.read_text().splitlines():
        row = json.loads(line)
        latest[(row["t"], row["endpoint"], row["model"])] = row
    assert sorted(_total_rows(list(latest.values())), key=lambda r: r["t"]) == rows
    history = (tmp_path / "run_llm_stats_history.csv").read_text().splitlines()
    assert history[0].endswith(",server_scrape_s,server_scrape_failures")
    durations = sorted(r["server_scrape_s"] for r in read)
    print(
        f"\nserver reads per interval: {len(read)}/{len(rows)}, read time median "
        f"{durations[len(durations) // 2] * 1e3:.1f} ms, max {durations[-1] * 1e3:.1f} ms"
    )


def test_server_metrics_hanging_url_changes_nothing_but_a_warning(sim_url, tmp_path):
    """A --server-metrics URL that never answers: a summary warning, null server columns, rows on schedule."""
    hanging = ScriptedServer(Reply(headers_at_ms=120_000))  # takes the request, never answers
    hanging.start()
    try:
        url = f"{hanging.base_url}/metrics"
        series = tmp_path / "ts.jsonl"
        out = tmp_path / "run.json"
        began = time.monotonic()
        proc = run_locust(
            [
                *("-f", "locustfiles/chat.py", "--headless", "-H", sim_url, "-u", "8", "-r", "8", "-t", "4s"),
                *("--max-tokens", "32", "--timeseries-interval", "1", "--timeseries", str(series)),
                *("--server-metrics", url, "--results-json", str(out), "--max-failure-ratio", "1"),
            ],
            timeout_s=90,
        )
        elapsed_s = time.monotonic() - began
        requests_seen = len(hanging.requests)
    finally:
        hanging.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["server"] is None
    (warning,) = results["server_warnings"]
    assert warning.startswith(f"--server-metrics {url} never answered with Prometheus text")
    assert f"WARNING: {warning}" in proc.stdout
    assert results["requests"]["succeeded"] > 0
    rows = _total_rows(results["timeseries"])
    assert [r["t"] for r in rows] == [float(i) for i in range(len(rows))]
    assert all(r["users"] is not None for r in rows)  # every interval was sampled
    assert all(r["server_running_requests"] is None and r["server_generation_tokens"] is None for r in rows)
    full = [r for r in rows[:-1] if r["server_scrape_s"] is not None]
    assert full
    assert all(r["server_scrape_failures"] == 1 for r in full)
    assert all(r["server_scrape_s"] <= 0.25 + 0.125 + 0.1 for r in full)  # each round within its bound
    assert requests_seen >= 2 + len(full)  # the start, every interval's end, the stop
    # each progress line came after its interval's end, within grace + the read's bound + a tick (0.5 s):
    # the hanging reads delayed no tick
    started = results["run"]["started_at_unix"]
    stamps = [_log_time(line) - started for line in proc.stderr.splitlines() if "output tok/s" in line]
    assert len(stamps) == len(rows)
    for k, stamp in enumerate(stamps[:-1]):
        assert k + 1 - 0.05 < stamp < k + 1 + 0.1 + 0.625 + 0.5 + 0.3, (k, stamps)
    assert elapsed_s < 60  # 4 s of load, the start and stop reads of at most 2 s each


def _log_time(line: str) -> float:
    """Seconds of a Locust log line's timestamp ("[2026-11-30 13:27:05,182] ...")."""
    stamp = line[1 : line.index("]")]
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_reset_restarts_the_server_metrics_with_the_clients(tmp_path):
    """Issue 24: RESET cleared llmload's client figures but not the server's: the server block (and the
    client - server cross-check) still counted every request since the run's start."""
    from tests.integration.procs import final_results_written
    from tests.integration.webui import web_ui

    out = tmp_path / "r.json"
    with web_ui("--request-rate", "20", "--results-json", str(out), "--timeseries-interval", "1") as ui:
        assert ui.swarm(max_tokens="4")["success"] is True
        ui.wait(lambda s: s["stats"] and s["stats"][-1]["num_requests"] >= 20, "20 requests")
        ui.reset()
        ui.wait(lambda s: s["stats"] and s["stats"][-1]["num_requests"] >= 10, "10 requests after RESET")
        ui.post("/stop")
        ui.wait(lambda s: s["state"] == "stopped" and final_results_written(out), "the stop and its results")
        results = json.loads(out.read_text())
        locust_total = ui.aggregated()["num_requests"]
    requests, server = results["requests"], results["server"]
    assert requests["succeeded"] + requests["failed"] == locust_total  # the same requests as Locust's table
    assert server is not None
    assert server["kind"] == "llmload-sim"
    served = server["counters"]["requests_succeeded"]
    # requests that finished between the RESET and the server's new baseline count on the client only: the
    # results say how many the client had counted when the baseline came (on a busy CI machine 9, in 0.45 s);
    # up to 5 more may have ended on the server before its read and on the client only after it
    window = server["reset"]
    assert window is not None, server
    assert window["baseline_after_s"] >= 0, window
    early = window["client_succeeded_before_baseline"]
    assert requests["succeeded"] - early - 5 <= served <= requests["succeeded"] + requests["cancelled"], (
        served,
        requests,
        window,
    )
    rows = [r for r in results["timeseries"] if r["endpoint"] is None]
    assert sum(r["server_generation_tokens"] or 0 for r in rows) == server["generation_tokens"]


def test_reset_stats_option_resets_llmloads_figures_with_locusts(sim_url, tmp_path):
    """Issue 24: --reset-stats clears Locust's table when the ramp-up completes, but fires no reset event:
    llmload's summary, results and server block still covered the ramp-up."""
    out = tmp_path / "r.json"
    proc = run_locust(
        ["-f", "locustfiles/chat.py", "--headless", "-H", sim_url, "-u", "8", "-r", "2", "-t", "8s",
         "--reset-stats", "--max-tokens", "8", "--skip-preflight", "--results-json", str(out),
         "--json-file", str(tmp_path / "locust")],
        timeout_s=90,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Resetting stats" in proc.stderr
    results = json.loads(out.read_text())
    locust_total = sum(e["num_requests"] for e in json.loads((tmp_path / "locust.json").read_text()))
    requests = results["requests"]
    assert requests["succeeded"] + requests["failed"] == locust_total > 0
    served = results["server"]["counters"]["requests_succeeded"]
    # the server is read again at the reset: each of the 8 users' requests may finish during that read
    # (counted by the client only); without the reset the server counted the whole ramp-up on top
    assert requests["succeeded"] - 8 <= served <= requests["succeeded"] + requests["cancelled"], (served, requests)
