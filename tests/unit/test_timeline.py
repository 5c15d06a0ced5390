"""The live timeline: which intervals are due, late intervals rewritten, waits for server columns."""

import pytest

from llmload.aggregate.series import IntervalSeries
from llmload.exporters.timeline import Timeline
from llmload.exporters.timeseries import columns
from llmload.request.record import RequestRecord
from llmload.servermetrics import SERVER_COLUMNS
from llmload.testing import ok_record, spaced_s


def _ok(completion: int = 3, ttft_s: float = 0.1, model: str = "m", prompt: int = 10) -> RequestRecord:
    return ok_record(spaced_s(ttft_s, 0.02, completion), model=model, prompt_tokens=prompt)


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


def test_timeline_after_the_end_writes_only_the_intervals_that_ended_before_it() -> None:
    # The stop took the end (3.4 s) and its last server read then took seconds: ticks meanwhile
    # write intervals 0-2; interval 3 holds the end and is written by final_rows, cut at 3.4 s.
    timeline = Timeline(1.0, grace_s=0.1)
    series = IntervalSeries.empty()
    series.add(3, _ok())
    assert [r["t"] for r in timeline.due_rows(series, 5.5, end_s=3.4) if r["endpoint"] is None] == [0.0, 1.0, 2.0]
    assert timeline.due_rows(series, 6.5, end_s=3.4) == []
    (last,) = [r for r in timeline.final_rows(series, 3.4) if r["endpoint"] is None]
    assert (last["t"], last["interval_s"], last["succeeded"]) == (3.0, pytest.approx(0.4), 1)
