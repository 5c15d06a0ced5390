"""Mergeable latency histogram with fixed logarithmic buckets (DDSketch mapping).

Values are seconds, ``>= 0``. Bucket ``i`` holds the values ``x`` with
``GAMMA**(i-1) < x <= GAMMA**i``, i.e. ``i = ceil(log(x) / log(GAMMA))``, and
is represented by ``2 * GAMMA**i / (GAMMA + 1)``. With
``GAMMA = (1 + a) / (1 - a)`` every value in a bucket lies within a relative
distance ``a`` of that representative, so any quantile estimate is within
``a = RELATIVE_ACCURACY = 1%`` of the exact value of the same rank (up to
floating-point rounding at bucket edges, ~1e-15 relative). This is the
logarithmic mapping and guarantee of DDSketch: Masson, Rim and Lee, "DDSketch:
A Fast and Fully-Mergeable Quantile Sketch with Relative-Error Guarantees",
PVLDB 12(12), 2019.

Values below ``ZERO_THRESHOLD_S`` (1 ns) share one zero bucket whose estimate
is 0 (absolute error < 1 ns). Count, min and max are exact; the sum is kept
as integer nanoseconds (each ``add``/``add_many`` rounded to 1 ns) so that
merging is exactly associative and commutative (float addition is not).

``GAMMA`` and ``ZERO_THRESHOLD_S`` are fixed: they are part of wire version 1
(see ``llmload.run.wire``). Changing them requires a new wire version. So is
the range of bucket indexes they give, ``MIN_INDEX`` to ``MAX_INDEX``.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import mul
from typing import TYPE_CHECKING

# numpy is imported where bucket arrays are built or summed (``from_arrays``, ``_sum_arrays``: a master decoding
# its workers' reports), never at import: a single process or a worker only adds values and never needs it, and
# importing numpy costs ~10 MiB of resident memory (VmRSS before and after ``import numpy``, Python 3.11).
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    _Ints = npt.NDArray[np.int64]

__all__ = ["GAMMA", "MAX_INDEX", "MIN_INDEX", "RELATIVE_ACCURACY", "ZERO_THRESHOLD_S", "LatencyHistogram"]

RELATIVE_ACCURACY = 0.01
GAMMA = (1.0 + RELATIVE_ACCURACY) / (1.0 - RELATIVE_ACCURACY)
ZERO_THRESHOLD_S = 1e-9

_INV_LOG_GAMMA = 1.0 / math.log(GAMMA)
MIN_INDEX = math.ceil(math.log(ZERO_THRESHOLD_S) * _INV_LOG_GAMMA)
"""The smallest bucket index a histogram holds (-1036): ``ZERO_THRESHOLD_S``'s; smaller values share the zero bucket."""
MAX_INDEX = math.ceil(math.log(sys.float_info.max) * _INV_LOG_GAMMA)
"""The largest bucket index any finite duration maps to (35488); the wire decoder refuses indexes beyond either end."""
_REPRESENTATIVE_FACTOR = 2.0 / (GAMMA + 1.0)
_NS_PER_S = 1e9
_INF = math.inf
# Bucket arrays merged in but not yet summed (``LatencyHistogram._pending``): past this many they are summed
# into one pair in a single vectorised pass, so memory stays bounded and a merge costs one list append.
# The pass costs mostly its fixed numpy calls: at 128 a master's merge costs a fifth less than at 32
# (callgrind, a worker report's bucket arrays), for at most 128 small array views per histogram.
_PENDING_LIMIT = 128
# ``add_many`` walks a sorted batch bucket by bucket (``_count_sorted``): the margin (relative) around a bucket edge
# inside which each value's bucket comes from its own log, and the largest value (s) walked (edges as powers).
_EDGE_MARGIN = 1e-9
_SORTED_MAX_S = 1e6
# Tolerance on q*n when computing the nearest rank, so that 0.07 * 100
# (= 7.000000000000001 in binary floating point) means rank 7, not 8.
_RANK_EPSILON = 1e-9


def _representative_s(index: int) -> float:
    """Return the value reported for bucket ``index``: within 1% of all its members."""
    return _REPRESENTATIVE_FACTOR * GAMMA**index


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be within [0, 1], got {q!r}; pass e.g. 0.99 for p99")


class LatencyHistogram:
    """Sparse log-bucket histogram of durations in seconds.

    Mutable through ``add``/``add_many``/``merge_in``; ``merge`` is pure.
    ``merge`` is associative and commutative with ``empty()`` as identity,
    and equality compares the full state (buckets, count, sum, min, max).
    """

    # Buckets live in two places: ``_bins`` (index -> count) takes ``add``/``add_many``; bucket arrays merged in
    # (a worker's decoded report, another histogram's arrays) are kept as immutable ``(indexes, counts)`` int64
    # pairs in ``_pending`` and summed together in bulk (``_settled``). A bucket's count is the sum over both.
    __slots__ = ("_bins", "_count", "_max_s", "_min_s", "_pending", "_sum_ns", "_zero_count")

    def __init__(self) -> None:
        """Create an empty histogram; prefer ``LatencyHistogram.empty()``."""
        self._bins: dict[int, int] = {}
        self._pending: list[tuple[_Ints, _Ints]] = []
        self._zero_count = 0
        self._count = 0
        self._sum_ns = 0
        self._min_s = _INF
        self._max_s = -_INF

    # ── construction ────────────────────────────────────────────────────
    @classmethod
    def empty(cls) -> LatencyHistogram:
        """Return a histogram without samples (the identity of ``merge``)."""
        return cls()

    @classmethod
    def from_buckets(
        cls,
        *,
        buckets: Iterable[tuple[int, int]],
        zero_count: int,
        sum_ns: int,
        min_s: float | None,
        max_s: float | None,
    ) -> LatencyHistogram:
        """Rebuild a histogram from its parts, as produced by ``buckets()`` and the accessors.

        Args:
            buckets: ``(index, count)`` pairs; indexes unique, counts > 0.
            zero_count: number of values below ``ZERO_THRESHOLD_S``.
            sum_ns: exact sum of all values in integer nanoseconds.
            min_s: smallest value; None exactly when there are no values.
            max_s: largest value; None exactly when there are no values.

        Raises:
            ValueError: the parts are inconsistent (the message names the part).
        """
        hist = cls()
        bins = hist._bins
        total = 0
        for index, count in buckets:
            if index in bins:
                raise ValueError(f"histogram bucket index {index} appears twice; indexes must be unique")
            if count <= 0:
                raise ValueError(f"histogram bucket {index} has count {count}; counts must be positive")
            bins[index] = count
            total += count
        if zero_count < 0:
            raise ValueError(f"histogram zero_count must be >= 0, got {zero_count}")
        if sum_ns < 0:
            raise ValueError(f"histogram sum_ns must be >= 0, got {sum_ns}")
        total += zero_count
        if total == 0:
            if min_s is not None or max_s is not None or sum_ns != 0:
                raise ValueError(f"empty histogram must have min/max None and sum 0, got {min_s!r}/{max_s!r}/{sum_ns}")
            return hist
        if min_s is None or max_s is None or not 0.0 <= min_s <= max_s < _INF:
            raise ValueError(
                f"histogram with {total} values needs finite 0 <= min <= max, got min={min_s!r} max={max_s!r}"
            )
        hist._zero_count = zero_count
        hist._count = total
        hist._sum_ns = sum_ns
        hist._min_s = float(min_s)
        hist._max_s = float(max_s)
        return hist

    @classmethod
    def from_arrays(
        cls,
        *,
        indexes: Sequence[int],
        counts: Sequence[int],
        zero_count: int,
        sum_ns: int,
        min_s: float | None,
        max_s: float | None,
    ) -> LatencyHistogram:
        """Rebuild a histogram from parallel bucket arrays, checked as whole arrays (the master's hot path).

        Same parts and rules as ``from_buckets``, but the checks are whole-array
        ones (lengths, smallest count, distinct indexes) run in C by the
        builtins, and a message is built only when one fails.

        Raises:
            ValueError: the parts are inconsistent (the message names the part).
        """
        if len(indexes) != len(counts):
            raise ValueError(f"histogram has {len(indexes)} bucket indexes but {len(counts)} counts")
        if counts and min(counts) <= 0:
            raise ValueError(f"histogram bucket counts must be positive, got {min(counts)}")
        if len(set(indexes)) != len(indexes):
            raise ValueError("histogram bucket indexes must be unique; one appears twice")
        if zero_count < 0 or sum_ns < 0:
            raise ValueError(f"histogram zero_count and sum_ns must be >= 0, got {zero_count} and {sum_ns}")
        bucketed = sum(counts)
        total = bucketed + zero_count
        if total == 0:
            if min_s is not None or max_s is not None or sum_ns != 0:
                raise ValueError(f"empty histogram must have min/max None and sum 0, got {min_s!r}/{max_s!r}/{sum_ns}")
            return cls()
        if min_s is None or max_s is None or not 0.0 <= min_s <= max_s < _INF:
            raise ValueError(
                f"histogram with {total} values needs finite 0 <= min <= max, got min={min_s!r} max={max_s!r}"
            )
        if bucketed >= 1 << 63:
            raise ValueError(f"histogram holds {bucketed} bucketed values; at most 2**63 - 1 are supported")
        hist = cls()
        if indexes:
            import numpy as np  # lazy: see the note at the imports

            hist._pending.append((np.array(indexes, dtype=np.int64), np.array(counts, dtype=np.int64)))
        hist._zero_count = zero_count
        hist._count = total
        hist._sum_ns = sum_ns
        hist._min_s = float(min_s)
        hist._max_s = float(max_s)
        return hist

    @classmethod
    def from_checked_arrays(
        cls, indexes: _Ints, counts: _Ints, *, zero_count: int, count: int, sum_ns: int, min_s: float, max_s: float
    ) -> LatencyHistogram:
        """Adopt bucket arrays the caller has already checked (the wire decoder checks a report's arrays at once).

        The caller guarantees ``from_arrays``' rules: int64 arrays of equal
        length that are never changed afterwards (they are shared, not copied),
        distinct indexes, counts > 0, ``count`` = their sum + ``zero_count`` > 0,
        ``sum_ns`` >= 0 and finite ``0 <= min_s <= max_s``. Nothing is checked here.
        """
        hist = cls()
        if len(indexes):
            hist._pending.append((indexes, counts))
        hist._zero_count = zero_count
        hist._count = count
        hist._sum_ns = sum_ns
        hist._min_s = min_s
        hist._max_s = max_s
        return hist

    def _settled(self) -> dict[int, int]:
        """Every non-empty bucket as ``{index: count}`` (Python ints), with the pending arrays summed in first."""
        pending = self._settle()
        if pending is None:
            return self._bins
        indexes, counts = pending
        bins = dict(zip(indexes.tolist(), counts.tolist(), strict=True))
        if self._bins:
            get = bins.get
            for index, count in self._bins.items():
                bins[index] = get(index, 0) + count
        return bins

    def _settle(self) -> tuple[_Ints, _Ints] | None:
        """Sum the pending bucket arrays into one sorted ``(indexes, counts)`` pair (kept as the only pending one)."""
        pending = self._pending
        if not pending:
            return None
        if len(pending) > 1:
            pending[:] = [_sum_arrays(pending)]
        return pending[0]

    def compact(self) -> None:
        """Sum the bucket arrays merged in so far into one pair now (the value does not change).

        For a histogram that is done taking merges and will be merged or read
        again: its readers then meet one pair, not up to ``_PENDING_LIMIT``.
        """
        self._settle()

    def arrays(self) -> tuple[list[int], list[int]]:
        """Return the non-empty buckets as parallel ``(indexes, counts)`` lists, sorted by index (no zero bucket)."""
        items = sorted(self._settled().items())
        return [i for i, _ in items], [c for _, c in items]

    def copy(self) -> LatencyHistogram:
        """Return an independent copy."""
        other = LatencyHistogram()
        other._bins = self._bins.copy()
        other._pending = list(self._pending)  # the arrays are never changed in place: shared
        other._zero_count = self._zero_count
        other._count = self._count
        other._sum_ns = self._sum_ns
        other._min_s = self._min_s
        other._max_s = self._max_s
        return other

    # ── recording ───────────────────────────────────────────────────────
    def add(self, value_s: float) -> None:
        """Record one duration in seconds.

        Raises:
            ValueError: ``value_s`` is negative, NaN or infinite.
        """
        if ZERO_THRESHOLD_S <= value_s < _INF:
            index = math.ceil(math.log(value_s) * _INV_LOG_GAMMA)
            bins = self._bins
            bins[index] = bins.get(index, 0) + 1
        elif 0.0 <= value_s < ZERO_THRESHOLD_S:
            self._zero_count += 1
        else:
            raise ValueError(
                f"latency must be a finite number of seconds >= 0, got {value_s!r}; "
                "check the clock used to time the request (use time.perf_counter)"
            )
        self._count += 1
        self._sum_ns += round(value_s * _NS_PER_S)
        # Plain comparisons: about twice as fast as calling min()/max() on this hot path.
        if value_s < self._min_s:  # noqa: PLR1730
            self._min_s = value_s
        if value_s > self._max_s:  # noqa: PLR1730
            self._max_s = value_s

    def add_many(self, values_s: Iterable[float]) -> None:
        """Record every duration of ``values_s`` (seconds).

        Like calling ``add`` for each value, but faster (every request's ITL
        samples go through here); the sum of the batch is rounded to 1 ns once.

        Raises:
            ValueError: a value is negative, NaN or infinite; the values before
                it are recorded, the rest are not.
        """
        values = values_s if isinstance(values_s, list | tuple) else list(values_s)
        if not values:
            return
        try:
            total_s = math.fsum(values)
        except (ValueError, OverflowError, TypeError):
            total_s = math.nan  # the loop below says which value is wrong
        if total_s < _INF:  # every value finite (a NaN makes the sum NaN)
            # Whole-batch path, in C but for one step per bucket: sorted once (cheaper than min() and max()),
            # the values below the zero threshold are a prefix, and each run of one bucket is found by bisection.
            ordered = sorted(values)
            low_s = ordered[0]  # the first smallest in ``values`` (a stable sort), as min() gives
            if low_s >= 0.0:
                high_s = ordered[-1]
                high_s = ordered[bisect_left(ordered, high_s)]  # the first largest, as max() gives
                zero = bisect_left(ordered, ZERO_THRESHOLD_S)
                _count_sorted(self._bins, ordered, zero)
                self._count += len(values)
                self._zero_count += zero
                self._sum_ns += round(total_s * _NS_PER_S)
                self._min_s = min(self._min_s, low_s)
                self._max_s = max(self._max_s, high_s)
                return
        bins = self._bins
        get = bins.get
        log = math.log
        ceil = math.ceil
        inv_log_gamma = _INV_LOG_GAMMA
        n = zero = 0
        lo = self._min_s
        hi = self._max_s
        try:
            for value_s in values:
                if ZERO_THRESHOLD_S <= value_s < _INF:
                    index = ceil(log(value_s) * inv_log_gamma)
                    bins[index] = get(index, 0) + 1
                elif 0.0 <= value_s < ZERO_THRESHOLD_S:
                    zero += 1
                else:
                    self.add(value_s)  # raises the same error as add()
                n += 1
                if value_s < lo:  # noqa: PLR1730
                    lo = value_s
                if value_s > hi:  # noqa: PLR1730
                    hi = value_s
        finally:
            self._count += n
            self._zero_count += zero
            self._sum_ns += round(math.fsum(values[:n] if n < len(values) else values) * _NS_PER_S)
            self._min_s = lo
            self._max_s = hi

    def merge_in(self, other: LatencyHistogram) -> None:
        """Add all of ``other``'s values to this histogram, in place."""
        if other._count == 0:
            return
        if other._bins:
            bins = self._bins
            if bins:
                get = bins.get
                for index, count in other._bins.items():
                    bins[index] = get(index, 0) + count
            else:
                bins.update(other._bins)
        if other._pending:  # bucket arrays: appended now, summed in bulk later (one vectorised pass)
            pending = self._pending
            pending.extend(other._pending)
            if len(pending) > _PENDING_LIMIT:
                pending[:] = [_sum_arrays(pending)]
        self._zero_count += other._zero_count
        self._count += other._count
        self._sum_ns += other._sum_ns
        # Plain comparisons, as in ``add``: a master merges a dozen histograms per worker report.
        if other._min_s < self._min_s:  # noqa: PLR1730
            self._min_s = other._min_s
        if other._max_s > self._max_s:  # noqa: PLR1730
            self._max_s = other._max_s

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """Return a new histogram holding the values of both; neither input changes."""
        merged = self.copy()
        merged.merge_in(other)
        return merged

    # ── reading ─────────────────────────────────────────────────────────
    @property
    def count(self) -> int:
        """Number of recorded values."""
        return self._count

    @property
    def zero_count(self) -> int:
        """Number of values below ``ZERO_THRESHOLD_S``."""
        return self._zero_count

    @property
    def sum_ns(self) -> int:
        """Sum of the values in integer nanoseconds (rounded once per ``add``/``add_many`` call)."""
        return self._sum_ns

    @property
    def sum_s(self) -> float:
        """Sum of the values in seconds."""
        return self._sum_ns / _NS_PER_S

    @property
    def mean(self) -> float | None:
        """Arithmetic mean in seconds (exact to 1 ns); None when empty."""
        return self._sum_ns / _NS_PER_S / self._count if self._count else None

    @property
    def min(self) -> float | None:
        """Smallest value in seconds (exact); None when empty."""
        return self._min_s if self._count else None

    @property
    def max(self) -> float | None:
        """Largest value in seconds (exact); None when empty."""
        return self._max_s if self._count else None

    def buckets(self) -> list[tuple[int, int]]:
        """Return the non-empty ``(index, count)`` pairs sorted by index (zero bucket excluded)."""
        return sorted(self._settled().items())

    def quantile(self, q: float) -> float | None:
        """Estimate the ``q``-quantile in seconds; None when empty.

        Nearest-rank definition: the value of 1-based rank ``ceil(q * n)``
        (rank 1 for ``q = 0``). The estimate is the representative of the
        bucket holding that rank, clamped to ``[min, max]``, so it is within
        1% of the exact value and p99 never exceeds the maximum (unlike
        Locust's rounded response-time buckets). Ranks 1 and ``n`` return the
        exact min and max.

        Raises:
            ValueError: ``q`` is outside ``[0, 1]``.
        """
        return self.quantiles((q,))[0]

    def quantiles(self, qs: Sequence[float]) -> list[float | None]:
        """Estimate several quantiles in one pass; see ``quantile``.

        Raises:
            ValueError: a ``q`` is outside ``[0, 1]``.
        """
        for q in qs:
            _check_q(q)
        n = self._count
        if n == 0:
            return [None] * len(qs)
        ranks = [min(n, max(1, math.ceil(q * n - _RANK_EPSILON))) for q in qs]
        order = sorted(range(len(qs)), key=ranks.__getitem__)
        out: list[float | None] = [None] * len(qs)
        sorted_bins = iter(sorted(self._settled().items()))
        cumulative = self._zero_count
        estimate = 0.0
        for position in order:
            rank = ranks[position]
            if rank == n:  # the largest value is known exactly
                out[position] = self._max_s
                continue
            if rank == 1:  # and so is the smallest
                out[position] = self._min_s
                continue
            while cumulative < rank:
                index, count = next(sorted_bins)
                cumulative += count
                estimate = _representative_s(index)
            out[position] = min(max(estimate, self._min_s), self._max_s)
        return out

    # ── value semantics ─────────────────────────────────────────────────
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        return (
            self._count == other._count
            and self._zero_count == other._zero_count
            and self._sum_ns == other._sum_ns
            and self.min == other.min
            and self.max == other.max
            and self._settled() == other._settled()
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"LatencyHistogram(count={self._count}, min_s={self.min!r}, max_s={self.max!r}, "
            f"buckets={len(self._settled())}, zero_count={self._zero_count})"
        )


def _count_sorted(bins: dict[int, int], ordered: list[float], start: int) -> None:
    """Count ``ordered[start:]`` (ascending, each in ``[ZERO_THRESHOLD_S, inf)``) into ``bins``, as ``add`` would.

    A batch that spans fewer buckets than it has values (a reply's ITL samples,
    ~one token interval apart; read lags of a few tens of µs) is walked bucket
    by bucket: each run of values inside one bucket is found by bisection, and
    costs one power (its edge) instead of one ``log`` per value; the next
    bucket up is tried before any ``log``. Every value still gets the bucket
    ``add`` gives it, without assuming that ``math.log`` is monotonic: a run
    holds only values more than ``_EDGE_MARGIN`` (relative) inside their
    bucket's edges, where the float error of ``log(x) * _INV_LOG_GAMMA``
    (< 1e-10 of an index) cannot reach the next index (the margin is ~5e-8 of
    one); a value nearer an edge is counted on its own, from its ``log``.
    Other batches are counted value by value.
    """
    n = len(ordered)
    if start >= n:
        return
    log, ceil, inv_log_gamma, gamma = math.log, math.ceil, _INV_LOG_GAMMA, GAMMA
    get = bins.get
    index = ceil(log(ordered[start]) * inv_log_gamma)
    high_s = ordered[-1]
    if high_s > _SORTED_MAX_S or ceil(log(high_s) * inv_log_gamma) - index >= n - start:
        for index, count in Counter(map(ceil, map(mul, map(log, ordered[start:]), repeat(inv_log_gamma)))).items():
            bins[index] = get(index, 0) + count
        return
    low_factor = (1.0 + _EDGE_MARGIN) / gamma
    high_factor = 1.0 - _EDGE_MARGIN
    i = start
    while i < n:
        value_s = ordered[i]
        upper_s = gamma**index
        inner_high_s = upper_s * high_factor
        if not upper_s * low_factor < value_s <= inner_high_s:  # not inside the bucket tried: its own log
            index = ceil(log(value_s) * inv_log_gamma)
            upper_s = gamma**index
            inner_high_s = upper_s * high_factor
        end = i + 1
        if end < n and ordered[end] <= inner_high_s and upper_s * low_factor < value_s:  # a run (value_s is inside)
            end = bisect_right(ordered, inner_high_s, end + 1)
        bins[index] = get(index, 0) + end - i
        i = end
        index += 1  # the bucket tried next


def _sum_arrays(parts: list[tuple[_Ints, _Ints]]) -> tuple[_Ints, _Ints]:
    """Sum ``(indexes, counts)`` bucket arrays into one pair sorted by index, without a Python loop per bucket.

    Exact: int64 counts (a histogram holds fewer than 2**63 values, checked on the way in).
    """
    import numpy as np  # lazy: see the note at the imports

    indexes = np.concatenate([i for i, _ in parts])
    counts = np.concatenate([c for _, c in parts])
    low = int(indexes.min())
    dense = np.zeros(int(indexes.max()) - low + 1, dtype=np.int64)
    np.add.at(dense, indexes - low, counts)
    present = np.flatnonzero(dense)
    return present + low, dense[present]
