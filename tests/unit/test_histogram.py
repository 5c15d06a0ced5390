"""LatencyHistogram: DDSketch-style log buckets, nearest-rank quantiles, exact count/sum/min/max."""

import math
import random
from typing import Any

import pytest

from llmload.aggregate.histogram import GAMMA, RELATIVE_ACCURACY, ZERO_THRESHOLD_S, LatencyHistogram

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
