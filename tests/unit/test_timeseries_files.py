"""--timeseries JSONL and the --csv PREFIX_llm_stats*.csv files."""

import csv
import json
from pathlib import Path

import pytest

from llmload.aggregate.series import IntervalSeries
from llmload.exporters.results import RunOutcome, build_results
from llmload.exporters.timeseries import columns, series_rows
from llmload.exporters.timeseries_files import STATS_COLUMNS, TimeseriesLog, csv_paths, write_csv_files
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource
from llmload.settings.config import RunConfig


def _record(model: str, completion: int, *, ok: bool = True) -> RequestRecord:
    times = [0.1 + 0.01 * i for i in range(completion)]
    return RequestRecord(
        endpoint="chat",
        model=model,
        started_at_unix=1_700_000_000.0 + completion,
        outcome=Outcome.OK if ok else Outcome.TIMEOUT,
        error=None if ok else ErrorInfo("timeout", "read idle"),
        token_times_s=times if ok else [],
        first_content_s=times[0] if ok else None,
        end_s=times[-1] + 0.01 if ok else None,
        prompt_tokens=TokenCount(7, TokenSource.SERVER),
        completion_tokens=TokenCount(completion, TokenSource.SERVER) if ok else TokenCount.unknown(),
    )


def _series() -> IntervalSeries:
    series = IntervalSeries.empty()
    for n in range(12):
        series.add(n // 4, _record("a" if n % 2 else "b", 2 + n, ok=n != 5))
    return series


def _results(series: IntervalSeries) -> dict:
    results = build_results(RunOutcome(stats=series.total(), config=RunConfig()))
    results["timeseries"] = series_rows(series, 1.0, end_s=2.5)
    return results


def test_timeseries_log_appends_one_json_line_per_row(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "ts.jsonl"
    log = TimeseriesLog(path)
    rows = series_rows(_series(), 1.0, end_s=2.5)
    log.write(rows[:2])
    assert len(path.read_text().splitlines()) == 2  # on disk before close
    log.write(rows[2:])
    log.close()
    log.write(rows)  # dropped after close
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == rows
    assert log.rows_written == len(rows)


def test_timeseries_log_truncates_a_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "ts.jsonl"
    path.write_text("old\n")
    TimeseriesLog(path).close()
    assert path.read_text() == ""


def test_csv_files_follow_locust_prefix_and_hold_the_results(tmp_path: Path) -> None:
    series = _series()
    results = _results(series)
    stats_path, history_path = write_csv_files(str(tmp_path / "run"), results)
    assert (stats_path, history_path) == csv_paths(str(tmp_path / "run"))
    assert stats_path.name == "run_llm_stats.csv"
    assert history_path.name == "run_llm_stats_history.csv"
    with stats_path.open(newline="") as f:
        stats_rows = list(csv.DictReader(f))
    assert list(stats_rows[0]) == list(STATS_COLUMNS)
    assert [(r["endpoint"], r["model"]) for r in stats_rows] == [("chat", "a"), ("chat", "b"), ("", "")]
    total = stats_rows[-1]
    assert int(total["succeeded"]) == results["requests"]["succeeded"] == 11
    assert int(total["timeout"]) == int(total["failed"]) == 1
    assert int(total["output_tokens"]) == results["tokens"]["completion"]
    assert float(total["ttft_p99_s"]) == results["latency"]["ttft_s"]["p99"]
    with history_path.open(newline="") as f:
        history = list(csv.DictReader(f))
    assert list(history[0]) == list(columns())
    assert len(history) == len(results["timeseries"])
    totals = [r for r in history if r["endpoint"] == ""]
    assert sum(int(r["succeeded"]) for r in totals) == 11
    assert sum(int(r["output_tokens"]) for r in totals) == results["tokens"]["completion"]
    assert totals[0]["users"] == ""  # unknown: empty cell


def test_csv_history_refuses_an_undeclared_column(tmp_path: Path) -> None:
    results = _results(_series())
    results["timeseries"][0]["server_kv_cache_usage"] = 0.5
    with pytest.raises(ValueError, match="server_kv_cache_usage"):
        write_csv_files(str(tmp_path / "run"), results)
    _stats_path, history_path = write_csv_files(str(tmp_path / "run"), results, ("server_kv_cache_usage",))
    with history_path.open(newline="") as f:
        assert next(csv.DictReader(f))["server_kv_cache_usage"] == "0.5"


def test_issue21_csv_history_writes_the_ttft_by_turn_map_as_its_json_text(tmp_path: Path) -> None:
    results = _results(_series())
    results["timeseries"][0]["turn_ttft_mean_s"] = {"1": 0.25, "2": 0.5}
    _stats_path, history_path = write_csv_files(str(tmp_path / "run"), results)
    with history_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert json.loads(rows[0]["turn_ttft_mean_s"]) == {"1": 0.25, "2": 0.5}
    assert rows[1]["turn_ttft_mean_s"] == ""  # no turn: empty cell
