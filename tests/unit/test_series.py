"""IntervalSeries: requests by the interval of their finish time; merge and take; wire round-trip."""

import pytest

from llmload.aggregate.series import IntervalSeries, interval_index
from llmload.aggregate.stats import LLMStats
from llmload.errors import WireFormatError
from llmload.request.record import ErrorInfo, Outcome, RequestRecord
from llmload.run.wire_reports import WorkerReport, report_from_wire, report_to_wire
from llmload.testing import ok_record, spaced_s


def _ok(completion: int = 3, ttft_s: float = 0.1, model: str = "m") -> RequestRecord:
    return ok_record(spaced_s(ttft_s, 0.02, completion), model=model, prompt_tokens=10)


def _failed() -> RequestRecord:
    return RequestRecord(
        endpoint="chat",
        model="m",
        started_at_unix=1_700_000_000.0,
        outcome=Outcome.HTTP_ERROR,
        error=ErrorInfo("http 500", "boom", 500),
    )


def test_interval_index_floors_and_clamps_before_start() -> None:
    assert interval_index(0.0, 10.0) == 0
    assert interval_index(9.999, 10.0) == 0
    assert interval_index(10.0, 10.0) == 1
    assert interval_index(25.0, 0.5) == 50
    assert interval_index(-0.003, 10.0) == 0  # a worker's zero lies a few ms after the master's


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_interval_index_rejects_bad_interval(bad: float) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        interval_index(1.0, bad)


def test_series_counts_each_request_in_its_interval() -> None:
    series = IntervalSeries.empty()
    series.add(0, _ok(completion=4))
    series.add(2, _ok(completion=5))
    series.add(2, _failed())
    series.add_cancelled(3, "chat", "m", 2)
    assert series.indices() == [0, 2, 3]
    assert series.get(0).total().completion_tokens_sum == 4
    assert series.get(1).is_empty()
    two = series.get(2).total()
    assert (two.succeeded, two.failed, two.completion_tokens_sum) == (1, 1, 5)
    assert series.get(3).total().cancelled == 2


def test_series_total_equals_stats_of_every_request() -> None:
    records = [_ok(completion=n, ttft_s=0.05 * n) for n in range(1, 9)] + [_failed(), _failed()]
    series = IntervalSeries.empty()
    stats = LLMStats.empty()
    for n, record in enumerate(records):
        series.add(n % 3, record)
        stats.add(record)
    assert series.total() == stats


def test_series_merge_in_is_per_interval_and_reports_indices() -> None:
    a, b = IntervalSeries.empty(), IntervalSeries.empty()
    a.add(0, _ok(completion=2))
    b.add(0, _ok(completion=3))
    b.add(4, _ok(completion=5))
    changed = a.merge_in(b)
    assert changed == {0, 4}
    assert a.get(0).total().completion_tokens_sum == 5
    assert a.get(4).total().completion_tokens_sum == 5
    assert b.get(0).total().completion_tokens_sum == 3  # the input is unchanged


def test_series_take_returns_delta_and_starts_afresh() -> None:
    series = IntervalSeries.empty()
    series.add(1, _ok())
    taken = series.take()
    assert series.is_empty()
    assert taken.indices() == [1]


def test_series_rejects_negative_index() -> None:
    with pytest.raises(ValueError, match="interval index must be >= 0"):
        IntervalSeries.empty().add(-1, _ok())


def test_worker_report_carries_series_over_the_wire() -> None:
    series = IntervalSeries.empty()
    series.add(0, _ok(completion=2))
    series.add(7, _ok(completion=6, model="other"))
    series.add(7, _failed())
    report = WorkerReport(run_id="r1", stats=series.total(), series=series)
    decoded = report_from_wire(report_to_wire(report))
    assert decoded.series == series
    assert decoded.stats == series.total()


def test_worker_report_without_series_decodes_empty() -> None:
    payload = report_to_wire(WorkerReport(run_id="r1", stats=LLMStats.empty()))
    del payload["series"]
    assert report_from_wire(payload).series.is_empty()


def test_worker_report_rejects_bad_series_index() -> None:
    payload = report_to_wire(WorkerReport(run_id="r1", stats=LLMStats.empty()))
    payload["series"] = [{"i": -2, "stats": {"v": 1, "endpoints": []}}]
    with pytest.raises(WireFormatError, match=r"report.series\[0\].i"):
        report_from_wire(payload)
