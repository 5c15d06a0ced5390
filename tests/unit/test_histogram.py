"""LatencyHistogram: DDSketch-style log buckets, nearest-rank quantiles, exact count/sum/min/max."""

import math
import random
import subprocess
import sys
from typing import Any

import pytest

from llmload.aggregate.histogram import GAMMA, RELATIVE_ACCURACY, ZERO_THRESHOLD_S, LatencyHistogram, _count_sorted

# Relative slack for floating-point rounding at bucket edges (documented in histogram.py).
_TOLERANCE = RELATIVE_ACCURACY * (1 + 1e-9)


def _exact_quantile(sorted_values: list[float], q: float) -> float:
    """Nearest rank: the value of 1-based rank ceil(q*n), rank 1 for q=0."""
    n = len(sorted_values)
    rank = min(n, max(1, math.ceil(round(q * n, 9))))
    return sorted_values[rank - 1]


def _filled(values: list[float]) -> LatencyHistogram:
    hist = LatencyHistogram.empty()
    hist.add_many(values)
    return hist


def test_gamma_gives_one_percent_relative_accuracy() -> None:
    assert RELATIVE_ACCURACY == 0.01
    assert pytest.approx(1.01 / 0.99) == GAMMA


def test_histogram_empty_reports_none() -> None:
    hist = LatencyHistogram.empty()
    assert hist.count == 0
    assert hist.quantile(0.5) is None
    assert hist.mean is None
    assert hist.min is None
    assert hist.max is None
    assert hist.quantiles([0.5, 0.99]) == [None, None]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_histogram_quantiles_within_one_percent_of_exact_on_random_data(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(-3.0, 2.0) for _ in range(5_000)]
    hist = _filled(values)
    ordered = sorted(values)
    for q in (0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0):
        exact = _exact_quantile(ordered, q)
        estimate = hist.quantile(q)
        assert estimate is not None
        assert abs(estimate - exact) <= _TOLERANCE * exact, (q, estimate, exact)


def test_histogram_quantile_single_value_is_exact_thanks_to_clamping() -> None:
    hist = _filled([0.123])
    assert hist.quantile(0.0) == 0.123
    assert hist.quantile(0.5) == 0.123
    assert hist.quantile(0.99) == 0.123


def test_histogram_p99_never_above_max() -> None:
    # The p99 value sits just above its bucket's lower edge, so the bucket's
    # representative is ~1% above it; clamping keeps p99 at the max.
    big = GAMMA**100 * 1.0001
    hist = _filled([0.001] * 98 + [big, big])
    assert hist.quantile(0.99) == big  # rank 99 of 100, an interior rank
    assert hist.quantile(0.98) == pytest.approx(0.001, rel=RELATIVE_ACCURACY)


def test_histogram_quantile_never_below_min() -> None:
    small = GAMMA**-100 * 0.9999  # just below a bucket's upper edge: representative ~1% below it
    hist = _filled([small, small, 5.0])
    assert hist.quantile(0.5) == small  # rank 2 of 3, an interior rank


def test_histogram_extreme_ranks_are_exact_min_and_max() -> None:
    hist = _filled([0.1234, 0.5, 0.7777])
    assert hist.quantile(0.0) == 0.1234
    assert hist.quantile(0.99) == 0.7777
    assert hist.quantile(1.0) == 0.7777


def test_histogram_nearest_rank_uses_ceil_q_n() -> None:
    # 10 values far apart (each in its own bucket): p50 is rank 5, p90 rank 9, p91 rank 10.
    values = [float(10**k) * 1e-6 for k in range(10)]
    hist = _filled(values)
    assert hist.quantile(0.5) == pytest.approx(values[4], rel=RELATIVE_ACCURACY)
    assert hist.quantile(0.9) == pytest.approx(values[8], rel=RELATIVE_ACCURACY)
    assert hist.quantile(0.91) == pytest.approx(values[9], rel=RELATIVE_ACCURACY)


def test_histogram_rank_is_robust_to_binary_float_products() -> None:
    # 0.07 * 100 == 7.000000000000001 in binary floating point; the rank must be 7, not 8.
    values = [float(10 ** (k / 10)) for k in range(100)]  # distinct buckets
    hist = _filled(values)
    assert hist.quantile(0.07) == pytest.approx(values[6], rel=RELATIVE_ACCURACY)


def test_histogram_quantiles_matches_quantile_in_any_order() -> None:
    rng = random.Random(7)
    hist = _filled([rng.random() for _ in range(1000)])
    qs = [0.99, 0.5, 0.9, 0.0]
    assert hist.quantiles(qs) == [hist.quantile(q) for q in qs]


def test_histogram_count_sum_min_max_mean_are_exact() -> None:
    hist = _filled([0.1, 0.2, 0.3, 0.4])
    hist.add(1.0)
    assert hist.count == 5
    assert hist.sum_ns == 2_000_000_000
    assert hist.sum_s == 2.0
    assert hist.mean == 0.4
    assert hist.min == 0.1
    assert hist.max == 1.0


def test_histogram_values_below_one_nanosecond_go_to_zero_bucket() -> None:
    hist = _filled([0.0, ZERO_THRESHOLD_S / 2, 0.5])
    assert hist.zero_count == 2
    assert hist.count == 3
    assert hist.buckets() == [(math.ceil(math.log(0.5) / math.log(GAMMA)), 1)]
    assert hist.quantile(0.5) == 0.0
    assert hist.quantile(1.0) == 0.5


@pytest.mark.parametrize("bad", [-0.001, float("nan"), float("inf")])
def test_histogram_add_rejects_negative_nan_and_infinite(bad: float) -> None:
    hist = LatencyHistogram.empty()
    with pytest.raises(ValueError, match="finite number of seconds >= 0"):
        hist.add(bad)
    assert hist == LatencyHistogram.empty()


def test_histogram_add_many_keeps_values_before_a_bad_one() -> None:
    hist = LatencyHistogram.empty()
    with pytest.raises(ValueError, match="-1"):
        hist.add_many([0.1, 0.2, -1.0, 0.3])
    assert hist == _filled([0.1, 0.2])


def test_histogram_add_many_equals_repeated_add() -> None:
    rng = random.Random(3)
    values = [rng.expovariate(20.0) for _ in range(500)] + [0.0]
    one_by_one = LatencyHistogram.empty()
    for value in values:
        one_by_one.add(value)
    batch = _filled(values)
    assert batch.buckets() == one_by_one.buckets()
    assert batch.count == one_by_one.count
    assert batch.min == one_by_one.min
    assert batch.max == one_by_one.max
    assert abs(batch.sum_ns - one_by_one.sum_ns) <= len(values)  # per-add vs per-batch ns rounding


@pytest.mark.parametrize(
    "values",
    [
        [0.0, 0.001, 0.0, 0.0, 0.002],  # ITL gaps of events that came in one read
        [0.0, -0.0, 0.003, 5e-10, 0.0],  # a sub-ns gap and a negative zero: the zero bucket too
        [0.0, 0.0, 0.0],
        [5e-10, 0.004],
    ],
)
def test_histogram_add_many_equals_repeated_add_around_zero(values: list[float]) -> None:
    one_by_one = LatencyHistogram.empty()
    for value in values:
        one_by_one.add(value)
    batch = _filled(values)
    assert batch.buckets() == one_by_one.buckets()
    assert (batch.count, batch.min, batch.max) == (one_by_one.count, one_by_one.min, one_by_one.max)
    assert abs(batch.sum_ns - one_by_one.sum_ns) <= 1  # per-add vs per-batch ns rounding
    assert [batch.quantile(q) for q in (0.0, 0.5, 1.0)] == [one_by_one.quantile(q) for q in (0.0, 0.5, 1.0)]


def test_histogram_quantile_rejects_q_outside_unit_interval() -> None:
    hist = _filled([0.1])
    with pytest.raises(ValueError, match=r"within \[0, 1\], got 99"):
        hist.quantile(99)


def test_histogram_merge_is_pure_and_equals_adding_everything() -> None:
    a = _filled([0.01, 0.02, 0.5])
    b = _filled([0.0, 0.03, 7.0])
    merged = a.merge(b)
    assert merged == _filled([0.01, 0.02, 0.5, 0.0, 0.03, 7.0])
    assert a == _filled([0.01, 0.02, 0.5])
    assert b == _filled([0.0, 0.03, 7.0])


def test_histogram_merge_in_updates_in_place() -> None:
    a = _filled([0.01])
    a.merge_in(_filled([2.0]))
    assert a.count == 2
    assert a.min == 0.01
    assert a.max == 2.0
    a.merge_in(LatencyHistogram.empty())
    assert a == _filled([0.01, 2.0])


def test_histogram_equality_sees_differences() -> None:
    assert _filled([0.1]) != _filled([0.2])
    assert _filled([0.1]) != _filled([0.1, 0.1])
    assert _filled([0.1]) == _filled([0.1])


def test_histogram_from_buckets_round_trips() -> None:
    hist = _filled([0.0, 0.1, 0.1, 3.0])
    rebuilt = LatencyHistogram.from_buckets(
        buckets=hist.buckets(),
        zero_count=hist.zero_count,
        sum_ns=hist.sum_ns,
        min_s=hist.min,
        max_s=hist.max,
    )
    assert rebuilt == hist


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"buckets": [(1, 0)], "zero_count": 0, "sum_ns": 0, "min_s": 1.0, "max_s": 1.0}, "positive"),
        ({"buckets": [(1, 1), (1, 1)], "zero_count": 0, "sum_ns": 0, "min_s": 1.0, "max_s": 1.0}, "twice"),
        ({"buckets": [], "zero_count": 0, "sum_ns": 0, "min_s": 1.0, "max_s": None}, "empty histogram"),
        ({"buckets": [(1, 1)], "zero_count": 0, "sum_ns": 0, "min_s": 2.0, "max_s": 1.0}, "min <= max"),
        ({"buckets": [], "zero_count": -1, "sum_ns": 0, "min_s": None, "max_s": None}, "zero_count"),
    ],
)
def test_histogram_from_buckets_rejects_inconsistent_parts(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LatencyHistogram.from_buckets(**kwargs)


_WORKER_PATH_WITHOUT_NUMPY = """
import sys
from llmload.aggregate.series import IntervalSeries
from llmload.run.wire import from_wire, to_wire
from llmload.testing.records import ok_record
series = IntervalSeries.empty()
series.add(0, ok_record(read_lags_s=[1e-4, 2e-4]))
payload = to_wire(series.total())
print("numpy" in sys.modules)
assert from_wire(payload) == series.total()
print("numpy" in sys.modules)
"""


def test_histogram_needs_numpy_only_to_decode_bucket_arrays() -> None:
    # A single process or a worker adds and encodes without numpy (~10 MiB resident); a master's decode imports it.
    done = subprocess.run(
        [sys.executable, "-c", _WORKER_PATH_WITHOUT_NUMPY], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def _near_edges(rng: random.Random, index: int) -> list[float]:
    """Values around bucket ``index``'s edges: a few ulps either side, the counting margin's bounds, and between."""
    values = []
    for edge in (GAMMA ** (index - 1), GAMMA**index):
        values.append(edge)
        for direction in (0.0, math.inf):
            value = edge
            for _ in range(4):
                value = math.nextafter(value, direction)
                values.append(value)
        values += [edge * (1 - 1e-9), edge * (1 + 1e-9), edge * (1 - 2e-9), edge * (1 + 2e-9)]
    values += [rng.uniform(GAMMA ** (index - 1), GAMMA**index) for _ in range(24)]
    rng.shuffle(values)
    return values


def _one_by_one(values: list[float]) -> LatencyHistogram:
    hist = LatencyHistogram.empty()
    for value in values:
        hist.add(value)
    return hist


@pytest.mark.parametrize("index", [-1035, -345, -230, -229, -115, 0, 1, 115, 460])  # ~1 ns, 1 ms, 10 ms, 1 s, 10 ks
def test_histogram_add_many_walks_a_clustered_batch_into_the_buckets_add_gives(index: int) -> None:
    # A batch spanning few buckets is walked bucket by bucket (_count_sorted); values a few ulps from an edge too.
    rng = random.Random(index)
    values = [v for v in _near_edges(rng, index) if v >= ZERO_THRESHOLD_S]
    bins: dict[int, int] = {}
    _count_sorted(bins, sorted(values), 0)
    expected = _one_by_one(values)
    assert sorted(bins.items()) == expected.buckets()
    assert _filled(values).buckets() == expected.buckets()


def _assert_same_counts(batch: LatencyHistogram, expected: LatencyHistogram) -> None:
    """The buckets, count, zero count and extremes of ``batch`` (``add_many``) equal ``expected``'s (``add``)."""
    assert batch.buckets() == expected.buckets()
    assert (batch.count, batch.zero_count, batch.min, batch.max) == (
        expected.count,
        expected.zero_count,
        expected.min,
        expected.max,
    )


def test_histogram_add_many_counts_itl_like_batches_as_add_would() -> None:
    rng = random.Random(19)
    for _ in range(200):
        gap_s = rng.choice([1e-3, 1e-2, 5e-2])
        values = [gap_s * (1 + rng.uniform(-0.05, 0.05)) for _ in range(rng.randrange(1, 200))]
        values += [0.0] * rng.randrange(3) + [gap_s * rng.uniform(1.5, 3.0) for _ in range(rng.randrange(3))]
        rng.shuffle(values)
        expected = _one_by_one(values)
        batch = _filled(values)
        _assert_same_counts(batch, expected)


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: [2e-5 + rng.random() * 6e-5 for _ in range(130)],  # read lags of a few tens of µs
        lambda rng: [rng.expovariate(20.0) for _ in range(100)],  # spread: counted value by value
        lambda rng: [rng.uniform(1e-9, 1e-8) for _ in range(50)] + [4e-10, 0.0],  # near the zero threshold
        lambda rng: [2e6 * (1 + rng.random() * 1e-3) for _ in range(40)],  # beyond the walked range
        lambda rng: [1e-3 * (1 + rng.random() * 1e-3) for _ in range(3)],  # a small batch
    ],
)
def test_histogram_add_many_counts_other_batches_as_add_would(make: Any) -> None:
    rng = random.Random(7)
    for _ in range(20):
        values = make(rng)
        expected = _one_by_one(values)
        batch = _filled(values)
        _assert_same_counts(batch, expected)


def test_histogram_add_many_keeps_the_first_of_equal_extremes_as_add_does() -> None:
    hist = _filled([0.0, -0.0, 0.002, 0.002])
    assert hist.min is not None
    assert math.copysign(1.0, hist.min) == 1.0  # min() and add keep 0.0, the first of the two zeros


def test_histogram_merging_hundreds_of_bucket_arrays_equals_adding_every_value():
    """A master's slot merges hundreds of reports' bucket arrays: summed in bulk as they pile up, exactly."""
    rng = random.Random(7)
    direct = LatencyHistogram.empty()
    merged = LatencyHistogram.empty()
    for _ in range(300):
        part = LatencyHistogram.empty()
        for _ in range(rng.randrange(1, 30)):
            value = rng.lognormvariate(-3.0, 1.5)
            part.add(value)
            direct.add(value)
        indexes, counts = part.arrays()
        merged.merge_in(
            LatencyHistogram.from_arrays(
                indexes=indexes,
                counts=counts,
                zero_count=part.zero_count,
                sum_ns=part.sum_ns,
                min_s=part.min,
                max_s=part.max,
            )
        )
    assert merged == direct
    assert merged.quantiles((0.5, 0.9, 0.99)) == direct.quantiles((0.5, 0.9, 0.99))


def test_histogram_compact_keeps_its_value_and_merges_on():
    parts = [LatencyHistogram.empty() for _ in range(3)]
    for k, part in enumerate(parts):
        part.add_many([0.01 * (k + 1), 0.02, 0.5])
    merged = LatencyHistogram.empty()
    for part in parts:
        indexes, counts = part.arrays()
        merged.merge_in(
            LatencyHistogram.from_arrays(
                indexes=indexes, counts=counts, zero_count=0, sum_ns=part.sum_ns, min_s=part.min, max_s=part.max
            )
        )
    before = merged.copy()
    merged.compact()
    assert merged == before
    merged.merge_in(parts[0])
    before.merge_in(parts[0])
    assert merged == before
    assert merged.quantiles((0.5, 0.99)) == before.quantiles((0.5, 0.99))
