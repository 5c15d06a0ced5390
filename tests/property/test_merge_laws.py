"""Merge laws for LatencyHistogram and LLMStats, and the wire round-trip, with hypothesis.

merge is associative and commutative with empty() as identity, including the
bounded error table (more categories than MAX_ERROR_CATEGORIES, many samples),
and a master merging N worker deltas holds exactly what one process adding
every record would hold.
"""

from array import array

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmload.aggregate.histogram import GAMMA, MAX_INDEX, MIN_INDEX, ZERO_THRESHOLD_S, LatencyHistogram
from llmload.aggregate.stats import MAX_ERROR_CATEGORIES, STATS_SCHEMA, EndpointStats, LLMStats, bound_labels
from llmload.aggregate.stats_schema import FieldRule, Merge
from llmload.errors import WireFormatError
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource
from llmload.run.wire import from_wire, to_wire
from llmload.testing import failed_record, stats_of

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

latencies = st.one_of(
    st.floats(min_value=0.0, max_value=600.0, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1e-10, 1e-9, 0.02, 0.1]),
)


def _hist(values: list[float]) -> LatencyHistogram:
    hist = LatencyHistogram.empty()
    hist.add_many(values)
    return hist


histograms = st.lists(latencies, max_size=40).map(_hist)


# A pool larger than MAX_ERROR_CATEGORIES so the overflow rule is exercised,
# including a real category literally named "other".
_CATEGORIES = [f"cat{i:02d}" for i in range(MAX_ERROR_CATEGORIES + 15)] + ["other", "HTTP 500"]
_FAILURES = [o for o in Outcome if o.is_failure]
_SOURCES = list(TokenSource)


@st.composite
def token_counts(draw: st.DrawFn) -> TokenCount:
    source = draw(st.sampled_from(_SOURCES))
    if source is TokenSource.UNKNOWN:
        return TokenCount.unknown()
    return TokenCount(draw(st.integers(min_value=0, max_value=5000)), source)


_FINISH_REASONS = ["stop", "length", "abort", "STOP", "weird reason!", *(f"r{i:02d}" for i in range(36))]


@st.composite
def records(draw: st.DrawFn) -> RequestRecord:
    gaps = draw(st.lists(st.floats(min_value=0.0, max_value=2.0), max_size=6))
    first = draw(st.floats(min_value=0.0, max_value=30.0))
    times = []
    t = first
    for gap in gaps:
        times.append(t)
        t += gap
    end = draw(st.one_of(st.none(), st.just(t + 0.001)))
    outcome = draw(st.sampled_from([Outcome.OK, Outcome.OK, Outcome.CANCELLED, Outcome.SKIPPED, *_FAILURES]))
    error = None
    if outcome.is_failure and draw(st.booleans()):
        error = ErrorInfo(
            draw(st.sampled_from(_CATEGORIES)),
            draw(st.sampled_from(["", "a", "b", "c", "d", "e", "request id 9"])),
            draw(st.one_of(st.none(), st.sampled_from([400, 404, 500, 503]))),
        )
    n_times = len(times)
    return RequestRecord(
        endpoint=draw(st.sampled_from(["chat", "completions"])),
        model=draw(st.sampled_from(["m", "n"])),
        started_at_unix=draw(st.floats(min_value=1.7e9, max_value=1.7e9 + 1000.0)),
        outcome=outcome,
        error=error,
        token_times_s=times,
        token_counts=draw(st.one_of(st.none(), st.lists(st.integers(1, 4), min_size=n_times, max_size=n_times))),
        first_content_s=draw(st.one_of(st.none(), st.sampled_from(times))) if times else None,
        end_s=end,
        prompt_tokens=draw(token_counts()),
        completion_tokens=draw(token_counts()),
        requested_prompt_tokens=draw(st.one_of(st.none(), st.integers(0, 4000))),
        finish_reason=draw(st.one_of(st.none(), st.sampled_from(_FINISH_REASONS))),
        requested_output_tokens=draw(st.one_of(st.none(), st.integers(1, 5000))),
    )


stats_values = st.builds(
    lambda recs, cancelled: stats_of(*recs, cancelled=cancelled), st.lists(records(), max_size=25), st.integers(0, 3)
)


# Many failures over many categories: the 50-category bound must hold and stay lawful.
@st.composite
def failure_heavy(draw: st.DrawFn) -> LLMStats:
    """20-60 distinct categories in a random order, with a few messages and statuses each."""
    order = draw(st.permutations(_CATEGORIES))
    n = draw(st.integers(min_value=20, max_value=60))
    recs = [
        failed_record(
            category,
            draw(st.sampled_from(["", "a", "b", "c", "d"])),
            draw(st.sampled_from([None, 404, 500])),
            start_unix=1.7e9,
            end_s=None,
        )
        for category in order[:n]
    ]
    return stats_of(*recs)


# Every EndpointStats field drawn from its schema rule: a field added later is covered
# by the laws below without touching this file (a new merge kind fails loudly here).
stamps = st.one_of(st.none(), st.floats(min_value=1.7e9, max_value=1.7e9 + 1000.0))


def _error_table(failures: list[tuple[str, str, int | None, int]]) -> dict[str, object]:
    holder = EndpointStats()
    for category, message, status, count in failures:
        holder.add_failure(category, status, message, count)
    return dict(holder.errors)


_error_tables = st.lists(
    st.tuples(
        st.sampled_from(_CATEGORIES),
        st.sampled_from(["", "a", "b", "c", "d"]),
        st.sampled_from([None, 404, 500]),
        st.integers(1, 5),
    ),
    max_size=60,
).map(_error_table)


def _bounded(counts: dict[str, int]) -> dict[str, int]:
    bound_labels(counts)
    return counts


# Up to 40 distinct labels (past the bound of 32), "other" among them.
_LABELS = ["other", *(f"reason{i:02d}" for i in range(40))]
_label_counts = st.dictionaries(st.sampled_from(_LABELS), st.integers(1, 10**6), max_size=40).map(_bounded)


def _field_values(rule: FieldRule) -> st.SearchStrategy[object]:
    if rule.merge is Merge.SUM:
        return st.integers(min_value=0, max_value=10**9)
    if rule.merge is Merge.COUNTS:
        assert rule.keys is not None
        return st.dictionaries(st.sampled_from(list(rule.keys)), st.integers(1, 10**6), max_size=len(rule.keys))
    if rule.merge is Merge.HISTOGRAM:
        return histograms
    if rule.merge in (Merge.EARLIEST, Merge.LATEST):
        return stamps
    if rule.merge is Merge.ERRORS:
        return _error_tables
    if rule.merge is Merge.LABELS:
        return _label_counts
    raise AssertionError(f"no strategy for merge rule {rule.merge} of field {rule.name}; add one here")


any_endpoint_stats = st.fixed_dictionaries({rule.name: _field_values(rule) for rule in STATS_SCHEMA}).map(
    lambda values: EndpointStats(**values)  # type: ignore[arg-type]
)


def _by_key(s: EndpointStats, key: tuple[str, str]) -> LLMStats:
    return LLMStats.from_endpoints([(key, s)])


# ── histogram ─────────────────────────────────────────────────────────────
@_SETTINGS
@given(histograms, histograms)
def test_histogram_merge_commutative(a: LatencyHistogram, b: LatencyHistogram) -> None:
    assert a.merge(b) == b.merge(a)


@_SETTINGS
@given(histograms, histograms, histograms)
def test_histogram_merge_associative(a: LatencyHistogram, b: LatencyHistogram, c: LatencyHistogram) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@_SETTINGS
@given(histograms)
def test_histogram_merge_empty_identity(a: LatencyHistogram) -> None:
    assert a.merge(LatencyHistogram.empty()) == a
    assert LatencyHistogram.empty().merge(a) == a


@_SETTINGS
@given(st.lists(latencies, min_size=1, max_size=200), st.floats(min_value=0.0, max_value=1.0))
def test_histogram_quantile_within_bounds_and_accuracy(values: list[float], q: float) -> None:
    hist = _hist(values)
    estimate = hist.quantile(q)
    assert estimate is not None
    assert min(values) <= estimate <= max(values)


# ── stats ─────────────────────────────────────────────────────────────────
@_SETTINGS
@given(st.one_of(stats_values, failure_heavy()), st.one_of(stats_values, failure_heavy()))
def test_stats_merge_commutative(a: LLMStats, b: LLMStats) -> None:
    assert a.merge(b) == b.merge(a)


@_SETTINGS
@given(
    st.one_of(stats_values, failure_heavy()),
    st.one_of(stats_values, failure_heavy()),
    st.one_of(stats_values, failure_heavy()),
)
def test_stats_merge_associative(a: LLMStats, b: LLMStats, c: LLMStats) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@_SETTINGS
@given(st.one_of(stats_values, failure_heavy()))
def test_stats_merge_empty_identity(a: LLMStats) -> None:
    assert a.merge(LLMStats.empty()) == a
    assert LLMStats.empty().merge(a) == a


@_SETTINGS
@given(failure_heavy(), failure_heavy())
def test_stats_error_table_stays_bounded(a: LLMStats, b: LLMStats) -> None:
    merged = a.merge(b)
    for _, s in merged.items():
        assert len(s.errors) <= MAX_ERROR_CATEGORIES
        assert sum(g.count for g in s.errors.values()) == s.failed + s.skipped
        assert all(len(g.samples) <= 3 for g in s.errors.values())


@_SETTINGS
@given(st.lists(st.one_of(records(), st.none()), max_size=60), st.integers(min_value=1, max_value=5))
def test_master_merging_worker_deltas_equals_single_process(items: list[RequestRecord | None], n_workers: int) -> None:
    """Each worker adds its share and ships a delta after every few requests; None = report tick."""
    single = LLMStats.empty()
    master = LLMStats.empty()
    deltas = [LLMStats.empty() for _ in range(n_workers)]
    for i, record in enumerate(items):
        worker = i % n_workers
        if record is None:  # report_to_master: ship the delta through the wire and start afresh
            master.merge_in(from_wire(msgpack.unpackb(msgpack.packb(to_wire(deltas[worker])))))
            deltas[worker] = LLMStats.empty()
            continue
        single.add(record)
        deltas[worker].add(record)
    for delta in deltas:
        master.merge_in(from_wire(to_wire(delta)))
    assert master == single


# ── wire ──────────────────────────────────────────────────────────────────
@_SETTINGS
@given(st.one_of(stats_values, failure_heavy()))
def test_wire_round_trip(stats: LLMStats) -> None:
    assert from_wire(to_wire(stats)) == stats
    assert from_wire(msgpack.unpackb(msgpack.packb(to_wire(stats)))) == stats


# From the shortest duration a histogram buckets to near the longest it adds (30 of them: a sum in ns stays finite).
any_durations = st.lists(st.floats(min_value=ZERO_THRESHOLD_S, max_value=1e290), min_size=1, max_size=30)
beyond_the_range = st.integers(-(2**31), MIN_INDEX - 1) | st.integers(MAX_INDEX + 1, 2**31 - 1)


def _ttft_stats(values: list[float]) -> LLMStats:
    return _by_key(EndpointStats(requests_by_outcome={Outcome.OK: len(values)}, ttft_s=_hist(values)), ("chat", "m"))


@_SETTINGS
@given(any_durations, st.sampled_from([1, 2]))
def test_wire_round_trips_histograms_of_any_durations(values: list[float], version: int) -> None:
    """Every bucket a histogram can hold is within the range of bucket indexes the decoder accepts."""
    stats = _ttft_stats(values)
    assert from_wire(to_wire(stats, version=version)) == stats  # not through msgpack: its ints end at 2**64 (ns)


@_SETTINGS
@given(any_durations, beyond_the_range, st.sampled_from([1, 2]), st.data())
def test_wire_refuses_any_bucket_index_beyond_the_range(
    values: list[float], index: int, version: int, data: st.DataObject
) -> None:
    """One bucket index beyond the range, anywhere in a histogram (version 1: its first), refuses the payload."""
    payload = to_wire(_ttft_stats(values), version=version)
    raw = payload["endpoints"][0]["hist"]["ttft_s"]
    if version == 1:
        raw["idx"][0] = index
    else:
        indexes = array("i", raw["idx"])
        indexes[data.draw(st.integers(0, len(indexes) - 1))] = index
        raw["idx"] = indexes.tobytes()
    with pytest.raises(WireFormatError, match=f"{MIN_INDEX} to {MAX_INDEX}"):
        from_wire(payload)


# ── every field, by construction from the schema ─────────────────────────
@_SETTINGS
@given(any_endpoint_stats, any_endpoint_stats)
def test_schema_every_field_merges_commutatively(a: EndpointStats, b: EndpointStats) -> None:
    assert a.merge(b) == b.merge(a)


@_SETTINGS
@given(any_endpoint_stats, any_endpoint_stats, any_endpoint_stats)
def test_schema_every_field_merges_associatively(a: EndpointStats, b: EndpointStats, c: EndpointStats) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@_SETTINGS
@given(any_endpoint_stats)
def test_schema_every_field_has_empty_as_identity(a: EndpointStats) -> None:
    assert a.merge(EndpointStats()) == a
    assert EndpointStats().merge(a) == a
    assert a.copy() == a


def _expected(rule: FieldRule, x: object, y: object) -> object:
    """The merge each rule promises, written independently of EndpointStats.merge_in."""
    if rule.merge is Merge.SUM:
        return x + y  # type: ignore[operator]
    if rule.merge is Merge.COUNTS:
        assert isinstance(x, dict)
        assert isinstance(y, dict)
        return {k: x.get(k, 0) + y.get(k, 0) for k in x.keys() | y.keys()}
    if rule.merge is Merge.HISTOGRAM:
        return x.merge(y)  # type: ignore[attr-defined]
    known = [v for v in (x, y) if v is not None]
    if rule.merge is Merge.EARLIEST:
        return min(known) if known else None  # type: ignore[type-var]
    if rule.merge is Merge.LATEST:
        return max(known) if known else None  # type: ignore[type-var]
    if rule.merge is Merge.LABELS:  # summed per label, then bounded
        assert isinstance(x, dict)
        assert isinstance(y, dict)
        return _bounded({k: x.get(k, 0) + y.get(k, 0) for k in x.keys() | y.keys()})
    assert isinstance(x, dict)
    assert isinstance(y, dict)
    return {c: sum(g.count for g in (x.get(c), y.get(c)) if g is not None) for c in x.keys() | y.keys()}


@_SETTINGS
@given(any_endpoint_stats, any_endpoint_stats)
def test_schema_every_field_merges_by_its_rule(a: EndpointStats, b: EndpointStats) -> None:
    merged = a.merge(b)
    for rule in STATS_SCHEMA:
        got = getattr(merged, rule.name)
        want = _expected(rule, getattr(a, rule.name), getattr(b, rule.name))
        if rule.merge is Merge.ERRORS:
            assert sum(g.count for g in got.values()) == sum(want.values()), rule.name  # type: ignore[attr-defined]
            if len(want) <= MAX_ERROR_CATEGORIES:  # type: ignore[arg-type]
                assert {c: g.count for c, g in got.items()} == want, rule.name
        else:
            assert got == want, rule.name


@_SETTINGS
@given(any_endpoint_stats)
def test_schema_every_field_round_trips_the_wire(s: EndpointStats) -> None:
    stats = _by_key(s, ("chat", "m"))
    assert from_wire(to_wire(stats)) == stats
    assert from_wire(msgpack.unpackb(msgpack.packb(to_wire(stats)))) == stats


@_SETTINGS
@given(
    st.lists(
        st.tuples(st.lists(st.floats(0.0, 50.0, allow_nan=False), max_size=12), st.booleans()),
        min_size=1,
        max_size=80,
    )
)
def test_histogram_bulk_merge_of_many_arrays_equals_one_histogram(parts: list[tuple[list[float], bool]]) -> None:
    """Parts rebuilt from bucket arrays (the wire's path; past the pending limit they are summed in bulk) or
    counted with ``add``, merged into one: buckets, count, sum, min, max and quantiles equal one histogram's."""
    single = LatencyHistogram.empty()
    merged = LatencyHistogram.empty()
    for values, via_arrays in parts:
        part = LatencyHistogram.empty()
        for value in values:
            part.add(value)
            single.add(value)
        if via_arrays:
            indexes, counts = part.arrays()
            part = LatencyHistogram.from_arrays(
                indexes=indexes,
                counts=counts,
                zero_count=part.zero_count,
                sum_ns=part.sum_ns,
                min_s=part.min,
                max_s=part.max,
            )
        merged.merge_in(part)
    assert merged == single
    assert merged.buckets() == single.buckets()
    assert (merged.count, merged.sum_ns) == (single.count, single.sum_ns)
    assert (merged.min, merged.max) == (single.min, single.max)
    qs = (0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)
    assert merged.quantiles(qs) == single.quantiles(qs)
    assert merged.copy() == single


@st.composite
def _clustered(draw: st.DrawFn) -> list[float]:
    """Batches like a reply's ITL samples or read lags: values near one centre (the sorted walk), zeros, outliers."""
    centre = draw(st.one_of(st.floats(min_value=1e-8, max_value=100.0), st.integers(-1035, 230).map(GAMMA.__pow__)))
    spread = draw(st.sampled_from([1e-15, 1e-12, 1e-9, 1e-6, 0.01, 0.1, 1.0]))  # bucket edges: 1e-9 is the margin
    values = draw(st.lists(st.floats(min_value=-spread, max_value=spread).map(lambda d: centre * (1 + d)), max_size=80))
    return values + draw(st.lists(latencies, max_size=5))


@_SETTINGS
@given(st.one_of(_clustered(), st.lists(latencies, max_size=60)))
def test_histogram_add_many_holds_what_add_one_by_one_holds(values: list[float]) -> None:
    one_by_one = LatencyHistogram.empty()
    for value in values:
        one_by_one.add(value)
    batch = _hist(values)
    assert batch.buckets() == one_by_one.buckets()
    assert (batch.count, batch.zero_count, batch.min, batch.max) == (
        one_by_one.count,
        one_by_one.zero_count,
        one_by_one.min,
        one_by_one.max,
    )
    assert abs(batch.sum_ns - one_by_one.sum_ns) <= len(values)  # one ns rounding per add vs one per batch
