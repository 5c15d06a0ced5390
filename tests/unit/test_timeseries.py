"""Time-series rows: columns, the rows of an interval and of a series."""

import pytest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.series import IntervalSeries
from llmload.aggregate.stats import LLMStats
from llmload.exporters.timeseries import (
    GAUGE_COLUMNS,
    columns,
    interval_rows,
    outcome_columns,
    series_rows,
)
from llmload.request.record import ErrorInfo, Outcome, RequestRecord
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
