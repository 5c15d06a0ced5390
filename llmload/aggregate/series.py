"""Run statistics split into fixed-length intervals by the time each request finished.

An ``IntervalSeries`` maps an interval index ``i`` to the ``LLMStats`` of the
requests that finished in ``[i * interval_s, (i + 1) * interval_s)`` seconds
after the run started. The process that measured a request assigns it, on its
own monotonic clock (``time.perf_counter``) relative to its own run start, so
the series never depends on wall clocks agreeing between machines:

- a single process measures from its ``test_start``;
- a worker measures from the master's zero as its plan tells it
  (``llmload.run.clock.align_to_master``): the plan's arrival, set back by how
  long after its run start the master built the plan. A worker's zero is
  therefore the master's zero plus the plan's delivery time (milliseconds on
  a LAN, never the offset between the machines' wall clocks), so a request
  lands at most that much early in the master's timeline.

Every value is an ``LLMStats`` delta, so merging two series is merging their
statistics interval by interval: associative and commutative with the empty
series as identity, exact (histograms are merged bucket by bucket, never by
averaging percentiles), and the merge of all intervals equals the statistics
of every request counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from llmload.aggregate.stats import LLMStats
from llmload.request.record import RequestRecord

__all__ = ["FoldedTotal", "IntervalSeries", "interval_index"]


def interval_index(at_s: float, interval_s: float) -> int:
    """The interval that holds ``at_s`` seconds after the run start (0 for times before the start).

    Raises:
        ValueError: ``interval_s`` is not a positive finite number, or ``at_s`` is not finite.
    """
    if not 0.0 < interval_s < math.inf:
        raise ValueError(f"interval must be a positive number of seconds, got {interval_s!r}; e.g. 10")
    if not math.isfinite(at_s):
        raise ValueError(f"time since the run start must be finite, got {at_s!r}")
    return max(0, int(at_s // interval_s))


class IntervalSeries:
    """``LLMStats`` per interval index; only intervals where something was counted are stored.

    Mutable through ``add``/``add_cancelled``/``merge_in``/``take``. Not
    thread-safe (gevent: callers never yield inside).
    """

    __slots__ = ("_by_index",)

    def __init__(self) -> None:
        """Create an empty series; prefer ``IntervalSeries.empty()``."""
        self._by_index: dict[int, LLMStats] = {}

    @classmethod
    def empty(cls) -> IntervalSeries:
        """Return a series with nothing counted (the identity of ``merge_in``)."""
        return cls()

    def slot(self, index: int) -> LLMStats:
        """The statistics of interval ``index`` (created empty on first use; not a copy).

        Raises:
            ValueError: ``index`` is negative.
        """
        stats = self._by_index.get(index)
        if stats is None:
            if index < 0:
                raise ValueError(f"interval index must be >= 0, got {index}")
            stats = self._by_index[index] = LLMStats.empty()
        return stats

    def adopt(self, index: int, stats: LLMStats) -> None:
        """Add ``stats`` to interval ``index``, keeping the object itself when the interval is new.

        The caller hands ``stats`` over and must not change it again (the wire
        decoder does, to save a copy per report).

        Raises:
            ValueError: ``index`` is negative.
        """
        if index in self._by_index:
            self._by_index[index].merge_in(stats)
        elif index < 0:
            raise ValueError(f"interval index must be >= 0, got {index}")
        else:
            self._by_index[index] = stats

    def add(self, index: int, record: RequestRecord, *, met_slo: bool = False) -> None:
        """Count one request that finished in interval ``index`` (``LLMStats.add`` rules)."""
        self.slot(index).add(record, met_slo=met_slo)

    def add_cancelled(self, index: int, endpoint: str, model: str, n: int = 1) -> None:
        """Count ``n`` requests cancelled at the stop, in interval ``index``."""
        if n:
            self.slot(index).add_cancelled(endpoint, model, n)

    def merge_in(self, other: IntervalSeries) -> set[int]:
        """Add everything in ``other`` to this series, in place; return the indices that changed."""
        for index, stats in other._by_index.items():
            self.slot(index).merge_in(stats)
        return set(other._by_index)

    def take(self) -> IntervalSeries:
        """Return what was counted since the last call and start afresh (a worker's delta)."""
        taken = IntervalSeries()
        taken._by_index, self._by_index = self._by_index, {}
        return taken

    def is_empty(self) -> bool:
        """True when nothing was counted."""
        return not self._by_index

    def indices(self) -> list[int]:
        """The indices where something was counted, ascending."""
        return sorted(self._by_index)

    def last_index(self) -> int | None:
        """The highest index where something was counted; None when empty."""
        return max(self._by_index) if self._by_index else None

    def get(self, index: int) -> LLMStats:
        """The statistics of interval ``index`` (not a copy; an empty one when nothing was counted there)."""
        return self._by_index.get(index) or LLMStats.empty()

    def items(self) -> Iterator[tuple[int, LLMStats]]:
        """Iterate over ``(index, LLMStats)`` ascending (not copies)."""
        for index in sorted(self._by_index):
            yield index, self._by_index[index]

    def endpoints(self) -> set[str]:
        """The endpoints counted in any interval (without merging them)."""
        return {endpoint for stats in self._by_index.values() for (endpoint, _model), _key_stats in stats.items()}

    def total(self) -> LLMStats:
        """Every interval merged into one new ``LLMStats``."""
        merged = LLMStats.empty()
        for stats in self._by_index.values():
            merged.merge_in(stats)
        return merged

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalSeries):
            return NotImplemented
        mine = {i: s for i, s in self._by_index.items() if not s.is_empty()}
        theirs = {i: s for i, s in other._by_index.items() if not s.is_empty()}
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"IntervalSeries({len(self._by_index)} intervals)"


class FoldedTotal:
    """The run's statistics so far, from the series that counts each request once.

    A single process counts each request once, in the interval it finished in
    (``Runtime.hand_off``), and a master merges each worker's series once
    (``merge_in``); the run totals are that series merged. Intervals more than
    ``open_intervals`` below the newest one are taken as closed: each is merged
    into a running total once, when it closes, so a read costs one copy of
    that total plus the open intervals, whatever the run's length. A delta
    that still lands in a closed interval (a late worker report) is merged
    into the total as well, so the totals stay exact whatever arrives late;
    ``open_intervals`` only decides how rarely that happens.
    """

    __slots__ = ("_closed", "_open_intervals", "_through")

    def __init__(self, *, open_intervals: int = 0) -> None:
        """Start with nothing folded; ``open_intervals`` (>= 0) intervals below the newest are kept open.

        Raises:
            ValueError: ``open_intervals`` is negative.
        """
        if open_intervals < 0:
            raise ValueError(f"open_intervals must be >= 0, got {open_intervals}")
        self._closed = LLMStats.empty()
        self._open_intervals = open_intervals
        self._through = 0  # intervals below this index are in ``_closed``

    def restarted(self) -> FoldedTotal:
        """A new, empty total with the same ``open_intervals`` (a reset of the statistics)."""
        return FoldedTotal(open_intervals=self._open_intervals)

    def merge_in(self, series: IntervalSeries, delta: IntervalSeries) -> set[int]:
        """Merge ``delta`` into ``series`` (the one ``of`` reads); return the indices that changed.

        Each interval of ``delta`` is merged once, into ``series``; one that
        is already closed is merged into the folded total too.
        """
        through = self._through
        for index, stats in delta._by_index.items():
            series.slot(index).merge_in(stats)
            if index < through:
                self._closed.merge_in(stats)
        return set(delta._by_index)

    def add_untimed(self, stats: LLMStats) -> None:
        """Count statistics that have no place in the series (an older worker's report without one)."""
        self._closed.merge_in(stats)

    def of(self, series: IntervalSeries) -> LLMStats:
        """Every interval of ``series`` merged (plus ``add_untimed``'s), as a new ``LLMStats``.

        ``series`` must be the same one on every call, changed only through
        ``merge_in`` or in intervals not yet closed (else the folded part is stale).
        """
        last = series.last_index()
        if last is None:
            return self._closed.merge(LLMStats.empty())
        horizon = last - self._open_intervals
        if horizon > self._through:
            for index, stats in series._by_index.items():
                if self._through <= index < horizon:
                    self._closed.merge_in(stats)
            self._through = horizon
        merged = self._closed.merge(LLMStats.empty())
        for index, stats in series._by_index.items():
            if index >= self._through:
                merged.merge_in(stats)
        return merged
