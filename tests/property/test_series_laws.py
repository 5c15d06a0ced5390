"""IntervalSeries: merge laws, and the series of any split of the requests sums to their statistics."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from llmload.aggregate.series import FoldedTotal, IntervalSeries
from llmload.aggregate.stats import LLMStats
from llmload.exporters.timeseries import series_rows
from llmload.exporters.window import SlidingWindow, window_part
from llmload.request.record import RequestRecord
from llmload.run.wire_reports import WorkerReport, report_from_wire, report_to_wire
from tests.property.test_merge_laws import _SETTINGS, records

placed = st.lists(st.tuples(st.integers(0, 6), records()), max_size=20)


def _series(items: list[tuple[int, RequestRecord]]) -> IntervalSeries:
    series = IntervalSeries.empty()
    for index, record in items:
        series.add(index, record)
    return series


def _merged(*parts: IntervalSeries) -> IntervalSeries:
    out = IntervalSeries.empty()
    for part in parts:
        out.merge_in(part)
    return out


@_SETTINGS
@given(placed, placed)
def test_series_merge_commutative(a: list[tuple[int, RequestRecord]], b: list[tuple[int, RequestRecord]]) -> None:
    assert _merged(_series(a), _series(b)) == _merged(_series(b), _series(a))


@_SETTINGS
@given(placed, placed, placed)
def test_series_merge_associative(a: list, b: list, c: list) -> None:
    left = _merged(_merged(_series(a), _series(b)), _series(c))
    right = _merged(_series(a), _merged(_series(b), _series(c)))
    assert left == right


@_SETTINGS
@given(placed)
def test_series_merge_empty_identity(a: list[tuple[int, RequestRecord]]) -> None:
    assert _merged(_series(a), IntervalSeries.empty()) == _series(a)


@_SETTINGS
@given(placed, st.integers(1, 4))
def test_series_rows_of_worker_deltas_sum_to_the_run_totals(
    items: list[tuple[int, RequestRecord]], workers: int
) -> None:
    """However the requests are split over workers and reports, the total rows add up to the run's statistics."""
    parts = [_series(items[w::workers]) for w in range(workers)]
    stats = LLMStats.empty()
    for _, record in items:
        stats.add(record)
    total = stats.total()
    rows = [r for r in series_rows(_merged(*parts), 1.0, end_s=7.5) if r["endpoint"] is None]
    assert sum(r["succeeded"] for r in rows) == total.succeeded
    assert sum(r["failed"] for r in rows) == total.failed
    assert sum(r["output_tokens"] for r in rows) == total.completion_tokens_sum
    assert sum(r["prompt_tokens"] for r in rows) == total.prompt_tokens_sum
    assert _merged(*parts).total() == stats


@_SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.one_of(records(), st.none())), max_size=40),
    st.lists(st.sampled_from((1, 2)), min_size=5, max_size=5),
)
def test_master_merging_reports_over_the_wire_equals_single_process(
    items: list[tuple[int, int, RequestRecord | None]], versions: list[int]
) -> None:
    """Records split at random over 5 workers (some of an older wire version), reported at random moments.

    The master's totals, their quantiles, its series and its live window equal
    what one process counting every record holds (bench/scale.py measures the
    same path for cost).
    """
    single = IntervalSeries.empty()
    workers = [IntervalSeries.empty() for _ in versions]
    master_stats, master_series = LLMStats.empty(), IntervalSeries.empty()
    window = SlidingWindow(1e9, clock=lambda: 5.0)

    def ship(worker: int) -> None:
        series = workers[worker].take()
        report = WorkerReport(run_id="r", stats=series.total(), series=series)
        payload = msgpack.unpackb(msgpack.packb(report_to_wire(report, version=versions[worker])))
        got = report_from_wire(payload)
        master_stats.merge_in(got.stats)
        master_series.merge_in(got.series)
        window.add(got.stats, str(worker))

    for index, worker, record in items:
        if record is None:
            ship(worker)
            continue
        single.add(index, record)
        workers[worker].add(index, record)
    for worker in range(len(workers)):
        ship(worker)
    total = single.total()
    assert master_series == single
    assert master_stats == total
    assert window.view().stats == window_part(total)
    for key, s in total.items():
        got = master_stats.get(*key)
        for name in ("ttft_s", "itl_s", "e2e_s"):
            qs = (0.5, 0.9, 0.99)
            assert getattr(got, name).quantiles(qs) == getattr(s, name).quantiles(qs)


@_SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 3), st.one_of(records(), st.none(), st.just("read"))), max_size=40
    ),
    st.integers(0, 3),
    st.lists(records(), max_size=3),
)
def test_master_totals_folded_from_its_series_equal_single_process(
    items: list[tuple[int, int, RequestRecord | str | None]], open_intervals: int, untimed: list[RequestRecord]
) -> None:
    """Each report merged once (into the series), totals folded from it: reads at any moment, late reports into
    intervals already folded, and an older worker's statistics without a series all give the exact totals."""
    single = IntervalSeries.empty()
    workers = [IntervalSeries.empty() for _ in range(4)]
    folded, master_series = FoldedTotal(open_intervals=open_intervals), IntervalSeries.empty()

    def ship(worker: int) -> None:
        report = report_from_wire(msgpack.unpackb(msgpack.packb(report_to_wire(
            WorkerReport(run_id="r", stats=LLMStats.empty(), series=workers[worker].take())
        ))))  # fmt: skip
        changed = folded.merge_in(master_series, report.series)
        assert changed == set(report.series.indices())

    for index, worker, record in items:
        if record is None:
            ship(worker)
        elif record == "read":
            assert folded.of(master_series) == master_series.total()
        else:
            assert isinstance(record, RequestRecord)
            single.add(index, record)
            workers[worker].add(index, record)
    for worker in range(len(workers)):
        ship(worker)
    old = LLMStats.empty()
    for record in untimed:
        old.add(record)
    folded.add_untimed(old)
    expected = single.total().merge(old)
    assert master_series == single
    got = folded.of(master_series)
    assert got == expected
    assert folded.of(master_series) == expected  # a read changes nothing
    for key, s in expected.items():
        for name in ("ttft_s", "itl_s", "e2e_s"):
            qs = (0.5, 0.9, 0.99)
            assert getattr(got.get(*key), name).quantiles(qs) == getattr(s, name).quantiles(qs)
