"""The live timeline: which time-series intervals are complete, and the rows to write as the run goes.

The rows themselves (their columns and how they are computed from an
``IntervalSeries``) are ``llmload.exporters.timeseries``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from llmload.aggregate.series import IntervalSeries, interval_index
from llmload.exporters.timeseries import Gauges, Row, columns, generates, interval_rows, series_rows

__all__ = ["Timeline"]


class Timeline:
    """Which intervals are complete, live: the rows to write as the run goes (pure; times are passed in).

    An interval is *due* ``grace_s`` after it ends, when every process's
    report covering it should have arrived (a worker reports at least every
    few seconds). A report that still arrives later for an interval already
    written makes that interval *late*: its rows are written again at the end
    (the later line replaces the earlier one) and ``late_intervals`` counts it.

    Values read elsewhere for an interval (the server's metrics, read at its
    end) come through ``add_extra``; with ``extra_wait_s`` > 0 an interval
    whose extra values have not come yet waits up to that much longer. An
    interval whose extra values are being read when that wait ends
    (``extra_pending(index)`` is true: its read, or an earlier interval's that
    ran long, is under way) waits until they come, at most ``extra_hold_s`` longer still. Extra
    values that come after their interval was written make it late too
    (``late_extra_intervals``).
    """

    __slots__ = (
        "_extra",
        "_extra_pending",
        "_gauges",
        "_late",
        "_late_extra",
        "_next",
        "extra_columns",
        "extra_hold_s",
        "extra_wait_s",
        "grace_s",
        "interval_s",
    )

    def __init__(
        self,
        interval_s: float,
        grace_s: float = 0.0,
        extra_columns: Sequence[str] = (),
        extra_wait_s: float = 0.0,
        *,
        extra_pending: Callable[[int], bool] | None = None,
        extra_hold_s: float = 0.0,
    ) -> None:
        """Create a timeline with nothing written.

        Raises:
            ValueError: ``interval_s`` is not a positive finite number, or ``grace_s``,
                ``extra_wait_s`` or ``extra_hold_s`` is negative or infinite.
        """
        if not 0.0 < interval_s < math.inf:
            raise ValueError(f"--timeseries-interval must be a positive number of seconds, got {interval_s!r}")
        if not 0.0 <= grace_s < math.inf:
            raise ValueError(f"grace must be a finite number of seconds >= 0, got {grace_s!r}")
        if not 0.0 <= extra_wait_s < math.inf:
            raise ValueError(f"extra_wait_s must be a finite number of seconds >= 0, got {extra_wait_s!r}")
        if not 0.0 <= extra_hold_s < math.inf:
            raise ValueError(f"extra_hold_s must be a finite number of seconds >= 0, got {extra_hold_s!r}")
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.extra_wait_s = extra_wait_s
        self.extra_hold_s = extra_hold_s
        self._extra_pending = extra_pending
        self.extra_columns = tuple(extra_columns)
        columns(self.extra_columns)
        self._next = 0
        self._gauges: dict[int, Gauges] = {}
        self._extra: dict[int, Gauges] = {}
        self._late: set[int] = set()
        self._late_extra: set[int] = set()

    @property
    def gauges(self) -> Mapping[int, Gauges]:
        """The samples per interval index (the latest sample of each interval)."""
        return self._gauges

    def columns_of(self, index: int) -> Gauges:
        """Interval ``index``'s gauge samples and extra columns together (what its total row shows)."""
        return {**self._gauges.get(index, {}), **self._extra.get(index, {})}

    @property
    def written_intervals(self) -> int:
        """Intervals whose rows were given by ``due_rows`` or ``final_rows`` (0 .. this - 1)."""
        return self._next

    @property
    def late_intervals(self) -> int:
        """Intervals written before all their requests arrived (rewritten at the end)."""
        return len(self._late)

    @property
    def late_extra_intervals(self) -> int:
        """Intervals written before their extra values came (rewritten at the end)."""
        return len(self._late_extra - self._late)

    def sample(self, now_s: float, gauges: Gauges) -> None:
        """Keep ``gauges`` (sampled ``now_s`` seconds after the start) as the latest of its interval."""
        self._gauges[interval_index(now_s, self.interval_s)] = dict(gauges)

    def add_extra(self, index: int, values: Gauges) -> None:
        """Set the extra columns of interval ``index`` (replacing earlier ones); a written interval becomes late."""
        self._extra[index] = dict(values)
        if index < self._next:
            self._late_extra.add(index)

    def clear_extra(self) -> None:
        """Forget every extra value so far (RESET: the server's columns restart with the client's)."""
        self._extra.clear()
        self._late_extra.clear()

    def note_merged(self, indices: Iterable[int]) -> None:
        """A report added requests to ``indices``; those already written become late."""
        self._late.update(i for i in indices if i < self._next)

    def _all_gauges(self) -> dict[int, Gauges]:
        return {i: {**self._gauges.get(i, {}), **self._extra.get(i, {})} for i in self._gauges.keys() | self._extra}

    def due_rows(self, series: IntervalSeries, now_s: float, *, end_s: float | None = None) -> list[Row]:
        """Rows of the intervals that became due by ``now_s``, each interval once, in order.

        ``end_s``: the run's end, once known: only intervals that ended by then
        (the one holding it is written, cut, by ``final_rows``).
        """
        due = int((now_s - self.grace_s) // self.interval_s)  # intervals [0, due) ended grace_s ago
        if self.extra_wait_s > 0:
            waited = int((now_s - self.grace_s - self.extra_wait_s) // self.interval_s)
            first_missing = next((i for i in range(max(self._next, waited), due) if i not in self._extra), due)
            due = max(waited, first_missing)
            if self._extra_pending is not None and due > self._next:
                held = int((now_s - self.grace_s - self.extra_wait_s - self.extra_hold_s) // self.interval_s)
                first_pending = next(
                    (i for i in range(max(self._next, held), due) if i not in self._extra and self._extra_pending(i)),
                    due,
                )
                due = max(held, first_pending)
        if end_s is not None:
            due = min(due, int(end_s // self.interval_s))  # intervals [0, due) ended by end_s
        if due <= self._next:
            return []
        gauges = self._all_gauges()
        rows = []
        generation_only = generates(series)
        for index in range(self._next, due):
            rows.extend(
                interval_rows(
                    index,
                    series.get(index),
                    self.interval_s,
                    gauges=gauges.get(index),
                    extra_columns=self.extra_columns,
                    generation_only=generation_only,
                )
            )
        self._next = due
        return rows

    def final_rows(self, series: IntervalSeries, end_s: float) -> list[Row]:
        """At the stop: rows of late intervals again, then of every interval not written yet."""
        first_new = self._next
        late_t = {i * self.interval_s for i in sorted(self._late | self._late_extra)}
        rows = [r for r in self.rows(series, end_s) if r["t"] in late_t]
        new = series_rows(
            series,
            self.interval_s,
            end_s=end_s,
            gauges=self._all_gauges(),
            extra_columns=self.extra_columns,
            first_index=first_new,
        )
        self._next = max(self._next, interval_index(end_s, self.interval_s) + 1)
        return rows + new

    def rows(self, series: IntervalSeries, end_s: float) -> list[Row]:
        """Every row of the run (the results' ``timeseries``): intervals 0 through the one holding ``end_s``."""
        return series_rows(
            series, self.interval_s, end_s=end_s, gauges=self._all_gauges(), extra_columns=self.extra_columns
        )
