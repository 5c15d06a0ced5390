"""Time-series rows, the live timeline and the progress line."""

import pytest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.series import IntervalSeries
from llmload.aggregate.stats import LLMStats
from llmload.exporters.progress import progress_line
from llmload.exporters.timeline import Timeline
from llmload.exporters.timeseries import (
    GAUGE_COLUMNS,
    columns,
    interval_rows,
    outcome_columns,
    series_rows,
)
from llmload.request.record import ErrorInfo, Outcome, RequestRecord
from llmload.servermetrics import SERVER_COLUMNS
from llmload.testing import ok_record, spaced_s


def _ok(completion: int = 3, ttft_s: float = 0.1, model: str = "m", prompt: int = 10) -> RequestRecord:
    return ok_record(spaced_s(ttft_s, 0.02, completion), model=model, prompt_tokens=prompt)


def _failed(outcome: Outcome = Outcome.HTTP_ERROR) -> RequestRecord:
    return RequestRecord(
        endpoint="chat",
        model="m",
        started_at_unix=1_700_000_000.0,
        outcome=outcome,
        error=ErrorInfo("x", "boom", 500),
    )


def test_columns_have_one_count_per_outcome_but_ok() -> None:
    cols = columns()
    assert cols[:4] == ("t", "interval_s", "endpoint", "model")
    for outcome in Outcome:
        assert (outcome.value in cols) is (outcome is not Outcome.OK)
    assert "cancelled" in outcome_columns()
    assert {"ttft_p50_s", "itl_p90_s", "tpot_p99_s", "e2e_p99_s", "read_lag_p99_s"} <= set(cols)
    assert cols[-len(GAUGE_COLUMNS) :] == GAUGE_COLUMNS


def test_columns_put_extra_columns_last_and_refuse_clashes() -> None:
    assert columns(("server_kv_cache_usage",))[-1] == "server_kv_cache_usage"
    with pytest.raises(ValueError, match="repeat built-in"):
        columns(("users",))


def test_interval_rows_total_first_then_each_key_with_exact_quantiles() -> None:
    stats = LLMStats.empty()
    records = [_ok(ttft_s=0.01 * n) for n in range(1, 101)] + [_ok(model="b", ttft_s=1.0), _failed()]
    for record in records:
        stats.add(record)
    rows = interval_rows(3, stats, 10.0, gauges={"in_flight_requests": 4, "users": 8, "workers": 2})
    total, by_b, by_m = rows
    assert (total["t"], total["interval_s"], total["endpoint"], total["model"]) == (30.0, 10.0, None, None)
    assert (total["succeeded"], total["failed"], total["http_error"]) == (101, 1, 1)
    assert total["output_tokens"] == 303
    assert total["prompt_tokens"] == 1010
    assert total["requests_per_s"] == pytest.approx(10.1)
    assert total["output_tokens_per_s"] == pytest.approx(30.3)
    assert total["total_tokens_per_s"] == pytest.approx(131.3)
    # the quantile of the merged histogram, not an average of the keys' quantiles
    merged = LatencyHistogram.empty()
    for record in records[:101]:
        merged.add(record.ttft_s or 0.0)
    assert total["ttft_p99_s"] == merged.quantile(0.99)
    assert (total["in_flight_requests"], total["users"], total["workers"]) == (4, 8, 2)
    assert (by_b["model"], by_b["succeeded"], by_b["users"]) == ("b", 1, None)
    assert (by_m["model"], by_m["succeeded"], by_m["failed"]) == ("m", 100, 1)
    assert set(total) == set(columns()) == set(by_m)


def test_interval_rows_of_an_empty_interval_are_zero_counts_and_null_quantiles() -> None:
    (row,) = interval_rows(0, LLMStats.empty(), 5.0)
    assert (row["succeeded"], row["failed"], row["output_tokens"], row["requests_per_s"]) == (0, 0, 0, 0.0)
    assert row["ttft_p50_s"] is None
    assert row["read_lag_p99_s"] is None
    assert row["users"] is None


def test_series_rows_fill_gaps_and_cut_the_last_interval_at_the_end() -> None:
    series = IntervalSeries.empty()
    series.add(0, _ok(completion=4))
    series.add(2, _ok(completion=6))
    rows = series_rows(series, 10.0, end_s=25.0)
    totals = [r for r in rows if r["endpoint"] is None]
    assert [r["t"] for r in totals] == [0.0, 10.0, 20.0]
    assert [r["interval_s"] for r in totals] == [10.0, 10.0, 5.0]
    assert totals[2]["output_tokens_per_s"] == pytest.approx(6 / 5.0)
    assert [r["output_tokens"] for r in totals] == [4, 0, 6]


def test_series_rows_sums_equal_totals_exactly() -> None:
    series = IntervalSeries.empty()
    stats = LLMStats.empty()
    for n in range(60):
        record = _ok(completion=1 + n % 7, prompt=5 + n) if n % 5 else _failed(Outcome.TIMEOUT)
        series.add(n // 9, record)
        stats.add(record)
    series.add_cancelled(6, "chat", "m", 3)
    stats.add_cancelled("chat", "m", 3)
    totals = [r for r in series_rows(series, 2.0, end_s=13.0) if r["endpoint"] is None]
    total = stats.total()
    assert sum(r["succeeded"] for r in totals) == total.succeeded
    assert sum(r["failed"] for r in totals) == total.failed
    assert sum(r["cancelled"] for r in totals) == total.cancelled == 3
    assert sum(r["output_tokens"] for r in totals) == total.completion_tokens_sum
    assert sum(r["prompt_tokens"] for r in totals) == total.prompt_tokens_sum


def test_timeline_writes_each_interval_once_after_the_grace() -> None:
    timeline = Timeline(10.0, grace_s=2.0)
    series = IntervalSeries.empty()
    series.add(0, _ok())
    timeline.sample(9.5, {"users": 3, "in_flight_requests": 1, "workers": 0})
    assert timeline.due_rows(series, 11.0) == []  # interval 0 ended, grace not over
    row, by_key = timeline.due_rows(series, 12.0)
    assert (row["t"], row["endpoint"], row["succeeded"], row["users"]) == (0.0, None, 1, 3)
    assert (by_key["model"], by_key["succeeded"]) == ("m", 1)
    assert timeline.due_rows(series, 12.5) == []


def test_timeline_rewrites_late_intervals_at_the_end() -> None:
    timeline = Timeline(1.0)
    series = IntervalSeries.empty()
    series.add(0, _ok(completion=2))
    assert [r["t"] for r in timeline.due_rows(series, 2.0) if r["endpoint"] is None] == [0.0, 1.0]
    late = IntervalSeries.empty()
    late.add(0, _ok(completion=5))
    timeline.note_merged(series.merge_in(late))
    final = [r for r in timeline.final_rows(series, 2.5) if r["endpoint"] is None]
    assert [(r["t"], r["output_tokens"]) for r in final] == [(0.0, 7), (2.0, 0)]
    assert timeline.late_intervals == 1


def test_timeline_rows_are_the_whole_run() -> None:
    timeline = Timeline(1.0)
    series = IntervalSeries.empty()
    series.add(1, _ok())
    timeline.sample(1.2, {"users": 2})
    totals = [r for r in timeline.rows(series, 1.5) if r["endpoint"] is None]
    assert [(r["t"], r["interval_s"], r["users"]) for r in totals] == [(0.0, 1.0, None), (1.0, 0.5, 2)]


def test_timeline_row_waits_for_its_server_columns_at_most_extra_wait() -> None:
    timeline = Timeline(1.0, grace_s=0.1, extra_columns=SERVER_COLUMNS, extra_wait_s=0.5)
    series = IntervalSeries.empty()
    series.add(0, _ok())
    assert timeline.due_rows(series, 1.2) == []  # grace over, the server read of interval 0 not in yet
    timeline.add_extra(0, {"server_running_requests": 7, "server_generation_tokens": 40})
    total, by_key = timeline.due_rows(series, 1.3)
    assert (total["t"], total["server_running_requests"], total["server_generation_tokens"]) == (0.0, 7, 40)
    assert total["server_kv_cache_usage"] is None  # not read: null
    assert by_key["server_running_requests"] is None  # server columns are in the total row only
    assert timeline.due_rows(series, 2.5) == []  # interval 1 waits for its read ...
    (late_total,) = timeline.due_rows(series, 2.6)  # ... until grace + extra_wait_s, then goes without
    assert (late_total["t"], late_total["server_running_requests"]) == (1.0, None)
    timeline.add_extra(1, {"server_running_requests": 3})  # the read came after all
    assert timeline.late_extra_intervals == 1
    assert timeline.late_intervals == 0  # no request came late
    final = [r for r in timeline.final_rows(series, 2.7) if r["endpoint"] is None]
    assert [(r["t"], r["server_running_requests"]) for r in final] == [(1.0, 3), (2.0, None)]


def test_timeline_row_whose_server_page_is_being_parsed_waits_for_it_within_the_hold() -> None:
    pending = {1, 2}  # the rounds of intervals 1 and 2 are answered; their pages are being parsed
    timeline = Timeline(
        1.0,
        grace_s=0.1,
        extra_columns=SERVER_COLUMNS,
        extra_wait_s=0.5,
        extra_pending=pending.__contains__,
        extra_hold_s=2.0,
    )
    series = IntervalSeries.empty()
    timeline.add_extra(0, {"server_running_requests": 1})
    assert [r["t"] for r in timeline.due_rows(series, 2.6)] == [0.0]  # 1 is past its wait, but still being read
    assert timeline.due_rows(series, 4.5) == []
    timeline.add_extra(1, {"server_running_requests": 5})
    pending.discard(1)
    (row,) = timeline.due_rows(series, 4.5)  # 1 came in; 2 is held
    assert (row["t"], row["server_running_requests"]) == (1.0, 5)
    rows = timeline.due_rows(series, 5.61)  # the hold is bounded: 2 goes without its read
    assert [(r["t"], r["server_running_requests"]) for r in rows] == [(2.0, None), (3.0, None), (4.0, None)]
    assert timeline.late_extra_intervals == 0


def test_timeline_refuses_a_negative_hold() -> None:
    with pytest.raises(ValueError, match="extra_hold_s"):
        Timeline(1.0, extra_hold_s=-1.0)


def test_timeline_server_columns_follow_the_gauges_in_every_row() -> None:
    timeline = Timeline(1.0, extra_columns=SERVER_COLUMNS)
    series = IntervalSeries.empty()
    timeline.sample(0.5, {"users": 2, "in_flight_requests": 1, "workers": 0})
    timeline.add_extra(0, {"server_waiting_requests": 4})
    (row,) = timeline.rows(series, 0.8)
    assert tuple(row) == columns(SERVER_COLUMNS)
    assert (row["users"], row["server_waiting_requests"]) == (2, 4)


def test_timeline_refuses_bad_interval() -> None:
    with pytest.raises(ValueError, match="--timeseries-interval"):
        Timeline(0.0)


def test_progress_line_with_time_limit() -> None:
    stats = LLMStats.empty()
    for _ in range(9):
        stats.add(_ok(completion=10, ttft_s=0.25))
    stats.add(_failed())
    (row, _) = interval_rows(5, stats, 10.0, gauges={"in_flight_requests": 7, "users": 16, "workers": 2})
    line = progress_line(row, elapsed_s=60.0, run_time_s=300.0)
    assert line == (
        "llmload: [1m00s/5m00s, 4m00s left] last 10s: 0.90 req/s, 9.0 output tok/s, TTFT p99 250 ms, "
        "1 errors (10.0%), 7 in flight, 16 users, 2 workers"
    )


def test_progress_line_with_request_count_and_no_requests() -> None:
    (row,) = interval_rows(0, LLMStats.empty(), 10.0)
    line = progress_line(row, elapsed_s=10.0, finished=40, num_requests=100)
    assert line == (
        "llmload: [0m10s, 40/100 requests, 60 left] last 10s: 0.00 req/s, 0.0 output tok/s, TTFT p99 n/a, "
        "0 errors, n/a in flight, n/a users, n/a workers"
    )


def test_issue21_rows_carry_the_mean_ttft_by_turn_and_the_schedule_lag() -> None:
    stats = LLMStats.empty()
    for turn, ttft_s in ((1, 0.1), (1, 0.3), (2, 0.5), (10, 0.7)):
        stats.add(ok_record((ttft_s, ttft_s + 0.01), turn=turn, dispatch_delay_s=0.004))
    stats.add(ok_record((0.9, 0.91)))  # no turn: not in the map
    total, by_key = interval_rows(0, stats, 10.0)
    assert total["turn_ttft_mean_s"] == pytest.approx({"1": 0.2, "2": 0.5, "10": 0.7}, abs=1e-6)
    assert list(total["turn_ttft_mean_s"]) == ["1", "2", "10"]  # in turn order
    assert by_key["turn_ttft_mean_s"] == total["turn_ttft_mean_s"]
    assert total["schedule_lag_p99_s"] == pytest.approx(0.004, rel=0.01)
    (empty, *_) = interval_rows(1, LLMStats.empty(), 10.0)
    assert empty["turn_ttft_mean_s"] is None
