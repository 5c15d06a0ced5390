"""End to end: the per-interval time series of real runs against `llmload sim` (single process and distributed).

Sums over the intervals' total rows equal the run's totals exactly; the
``--timeseries`` JSONL holds the same rows as the results; ``--csv`` writes
the LLM CSV files; the log has a progress line per interval.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from llmload.exporters.timeseries import outcome_columns
from tests.integration.procs import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INTERVAL_S = 0.5


@pytest.fixture
def sim_url(sim_server) -> str:
    return sim_server(
        "--decode-step-ms", "4", "--output-len-mean", "30", "--fail-rate", "0.1", "--overload-rate", "0.1"
    )


def _totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["endpoint"] is None]


def _assert_sums_equal_totals(results: dict[str, Any]) -> None:
    rows = _totals(results["timeseries"])
    requests, tokens = results["requests"], results["tokens"]
    assert sum(r["succeeded"] for r in rows) == requests["succeeded"]
    assert sum(r["failed"] for r in rows) == requests["failed"]
    assert sum(r["cancelled"] for r in rows) == requests["cancelled"]
    for outcome in outcome_columns():  # throttled, skipped, ... each as its own column
        assert sum(r[outcome] for r in rows) == requests["by_outcome"][outcome], outcome
    assert sum(r["output_tokens"] for r in rows) == tokens["completion"]
    assert sum(r["prompt_tokens"] for r in rows) == tokens["prompt"]
    # consecutive intervals from 0, every one full but the last
    assert [r["t"] for r in rows] == [i * INTERVAL_S for i in range(len(rows))]
    assert all(r["interval_s"] == INTERVAL_S for r in rows[:-1])
    assert 0 <= rows[-1]["interval_s"] <= INTERVAL_S
    # the per-key rows add up to the total row of their interval
    for total in rows:
        keyed = [r for r in results["timeseries"] if r["t"] == total["t"] and r["endpoint"] is not None]
        assert sum(r["succeeded"] for r in keyed) == total["succeeded"]


def test_timeseries_single_process_sums_equal_totals_and_files_agree(sim_url, tmp_path: Path) -> None:
    out, series, prefix = tmp_path / "r.json", tmp_path / "ts.jsonl", tmp_path / "run"
    proc = run_locust(
        [
            "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", sim_url,
            "-u", "16", "-r", "16", "-t", "4s", "--max-tokens", "32", "--max-failure-ratio", "1",
            "--timeseries-interval", str(INTERVAL_S), "--timeseries", str(series),
            "--results-json", str(out), "--csv", str(prefix),
        ],
        timeout_s=90,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["requests"]["failed"] > 0  # the sim's --fail-rate: failures are counted per interval too
    assert results["requests"]["by_outcome"]["throttled"] > 0  # --overload-rate: 429s
    _assert_sums_equal_totals(results)
    assert all(r["users"] is not None for r in _totals(results["timeseries"]))  # a sample in every interval
    assert max(r["users"] for r in _totals(results["timeseries"])) == 16
    lines = [json.loads(line) for line in series.read_text().splitlines()]
    assert lines == results["timeseries"]  # one process: nothing late, each row written once
    progress = [line for line in proc.stderr.splitlines() if "output tok/s" in line]
    assert len(progress) == len(_totals(results["timeseries"]))
    assert "left] last 0.5s:" in progress[0]
    with (tmp_path / "run_llm_stats_history.csv").open(newline="") as f:
        history = list(csv.DictReader(f))
    assert len(history) == len(results["timeseries"])
    # the server's columns (the sim publishes vLLM names): read at each interval's end, in all three outputs
    totals = _totals(results["timeseries"])
    server_gen = [r["server_generation_tokens"] for r in totals]
    assert sum(g or 0 for g in server_gen) == results["server"]["generation_tokens"] > 0
    # a read bounded by a quarter of the 0.5 s interval may fail on a busy machine: then it is counted
    for row in totals:
        if row["server_generation_tokens"] is None:
            assert row["server_scrape_failures"] is None or row["server_scrape_failures"] > 0
    by_t = {float(h["t"]): h for h in history if h["endpoint"] == ""}
    for row in totals:
        cell = by_t[row["t"]]["server_running_requests"]
        assert (cell == "") is (row["server_running_requests"] is None)
    with (tmp_path / "run_llm_stats.csv").open(newline="") as f:
        (total,) = list(csv.DictReader(f))
    assert int(total["succeeded"]) == results["requests"]["succeeded"]
