"""Server metrics per time-series interval: gauges, token-counter deltas and rates, from successive scrapes.

The master scrapes every endpoint at each interval's end (``llmload.net.scrape``);
``ServerIntervals.add`` turns one such round of reads into the interval's
server columns (``SERVER_COLUMNS``), all null when nothing was read:

- ``server_<gauge>`` for every common gauge (``names.GAUGES``): its value in
  this round, from the first endpoint (target first, then the extra URLs)
  that has it;
- ``server_prompt_tokens``, ``server_generation_tokens``: the counter's
  increase since the previous successful read of the same endpoint (a
  decrease is a reset: the new value counts), as ``ServerRun`` adds them up
  for the run, so the intervals' deltas add up to the run's ``server``
  deltas exactly when the same endpoint answered every round;
- ``server_prompt_tokens_per_s``, ``server_generation_tokens_per_s``: that
  increase over the time between the two reads (each read's time is the
  midpoint of its request), not over ``interval_s``;
- ``server_scrape_s``: the round's longest read (failed ones included);
  ``server_scrape_failures``: endpoints whose read failed in the round.

Two rounds for one interval (the stop's read after a periodic one) add up:
deltas and spans sum, rates are recomputed, gauges are the later ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmload.servermetrics.names import GAUGES
from llmload.servermetrics.run import counter_increase
from llmload.servermetrics.snapshot import ServerSnapshot

__all__ = ["SERVER_COLUMNS", "SERVER_TOKEN_COUNTERS", "Reading", "ServerIntervals"]

SERVER_TOKEN_COUNTERS = ("prompt_tokens", "generation_tokens")
"""Common counters given per interval (delta and rate)."""

SERVER_COLUMNS: tuple[str, ...] = (
    *(f"server_{name}" for name in GAUGES),
    *(f"server_{name}" for name in SERVER_TOKEN_COUNTERS),
    *(f"server_{name}_per_s" for name in SERVER_TOKEN_COUNTERS),
    "server_scrape_s",
    "server_scrape_failures",
)
"""The time-series columns of the server metrics, in order (null when not scraped)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One read of one endpoint in a round.

    Attributes:
        url: the endpoint (the order of a round's readings is the endpoints' order).
        snapshot: what it answered, None when the read failed.
        at_s: midpoint of the read, seconds since the run's start.
        duration_s: how long the read took (until it failed or timed out, for a failure).
        error: why the read failed, None when it did not.
    """

    url: str
    snapshot: ServerSnapshot | None
    at_s: float
    duration_s: float
    error: str | None = None


@dataclass(slots=True)
class _Interval:
    values: dict[str, float | int | None]
    spans_s: dict[str, float]


class ServerIntervals:
    """The server columns of each interval, from rounds of reads (pure: times come with the readings)."""

    __slots__ = ("_intervals", "_last")

    def __init__(self) -> None:
        self._last: dict[str, Reading] = {}
        self._intervals: dict[int, _Interval] = {}

    def baseline(self, readings: Sequence[Reading]) -> None:
        """Remember a round that belongs to no interval (the read before the load) as the deltas' start."""
        for reading in readings:
            if reading.snapshot is not None:
                self._last[reading.url] = reading

    def add(self, index: int, readings: Sequence[Reading]) -> dict[str, float | int | None]:
        """Fold one round into interval ``index``; returns that interval's columns (``SERVER_COLUMNS``)."""
        gauges: dict[str, float] = {}
        deltas: dict[str, float] = {}
        spans: dict[str, float] = {}
        for reading in readings:
            snap = reading.snapshot
            if snap is None:
                continue
            for name in GAUGES:
                if name in snap.values and name not in gauges:
                    gauges[name] = snap.values[name]
            before = self._last.get(reading.url)
            if before is not None and before.snapshot is not None:
                for name in SERVER_TOKEN_COUNTERS:
                    if name in snap.values and name not in deltas:
                        deltas[name] = counter_increase(before.snapshot.values.get(name), snap.values[name])
                        spans[name] = reading.at_s - before.at_s
            self._last[reading.url] = reading
        interval = self._intervals.get(index)
        if interval is None:
            interval = self._intervals[index] = _Interval(values=dict.fromkeys(SERVER_COLUMNS), spans_s={})
        values = interval.values
        for name, value in gauges.items():
            values[f"server_{name}"] = value
        for name, delta in deltas.items():
            total = _number(values[f"server_{name}"]) + delta
            values[f"server_{name}"] = int(total) if float(total).is_integer() else total
            span = interval.spans_s[name] = interval.spans_s.get(name, 0.0) + spans[name]
            values[f"server_{name}_per_s"] = total / span if span > 0 else None
        if readings:
            longest = max(r.duration_s for r in readings)
            values["server_scrape_s"] = max(longest, _number(values["server_scrape_s"]))
            failures = sum(1 for r in readings if r.snapshot is None)
            values["server_scrape_failures"] = int(_number(values["server_scrape_failures"])) + failures
        return dict(values)

    def columns(self, index: int) -> dict[str, float | int | None] | None:
        """Interval ``index``'s columns, None when no round was added for it."""
        interval = self._intervals.get(index)
        return None if interval is None else dict(interval.values)


def _number(value: float | int | None) -> float:
    return 0.0 if value is None else float(value)
