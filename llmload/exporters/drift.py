"""Drift: the run's first stretch against its last, from the per-interval series (exact histogram merges).

A soak run that degrades (a server that slows, leaks or starts failing, a
client that grows) shows it as a difference between how the run began and
how it ended. ``drift_section`` compares them:

- the run's intervals are those of its time series (``--timeseries-interval``,
  ``llmload.aggregate.series``), 0 through the one holding the stop. The last interval
  is left out when the stop cut it to less than half its length (its rate
  would rest on a few requests);
- with ``n`` intervals left, each stretch is ``max(1, floor(n * STRETCH_SHARE))``
  intervals: the first ones and the last ones. Fewer than ``MIN_INTERVALS``
  intervals are too short to judge (``judged`` false, no metrics);
- each stretch's statistics are its intervals' ``LLMStats`` merged (the
  histograms bucket by bucket, so a stretch's p99 is that of its requests,
  never an average of interval percentiles), over every (endpoint, model);
- metrics: ``ttft_p99_s``, ``itl_p99_s``, ``e2e_p99_s`` (successes; in a run
  that mixes embeddings with generation requests, of the generation requests:
  ``LLMStats.latency_keys``),
  ``output_tokens_per_s`` (completion tokens of successes / the stretch's
  seconds; 0 when nothing succeeded, None when its successes generate nothing:
  embeddings alone), ``error_ratio`` (failed / finished) and ``client_rss_bytes`` (the
  largest sample of the time series' ``client_rss_bytes`` gauge in the
  stretch: the process itself, or on a master the largest worker);
- each metric also gives ``samples``, ``[first, last]``: the stretch's
  successes measured (latencies: histogram counts; output tok/s: successes that generate tokens),
  finished requests (error ratio) or gauge samples (RSS). A latency p99 over
  fewer than ``MIN_SAMPLES`` requests is little more than the stretch's
  slowest request, so it is never flagged (``enough_samples`` false);
- ``change`` is relative (last / first - 1) for every metric but
  ``error_ratio``, whose change is absolute (last - first). A metric is
  ``flagged`` when its change passes its tolerance in the bad direction
  (``TOLERANCES``: the sign of the tolerance gives the direction). A change
  that cannot be computed (a stretch without the figure, or a relative change
  from 0) is null and never flagged.

A ``--num-requests`` run drains at its end (fewer users busy), which lowers
its last stretch's output tok/s; soak runs are timed (``-t``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmload.aggregate.series import IntervalSeries, interval_index
from llmload.aggregate.stats import EndpointStats, LLMStats
from llmload.exporters.timeseries import RSS_COLUMN

__all__ = ["MIN_INTERVALS", "MIN_SAMPLES", "RSS_GAUGE", "STRETCH_SHARE", "TOLERANCES", "Tolerance", "drift_section"]

STRETCH_SHARE = 0.10
"""Share of the run's intervals in each compared stretch (at least one interval each)."""

MIN_INTERVALS = 10
"""Runs with fewer intervals than this are too short to judge."""

MIN_SAMPLES = 100
"""Fewest latency samples in each stretch for its p99 change to be flagged."""

RSS_GAUGE = RSS_COLUMN
"""The time-series gauge column holding the load generator's resident memory (the metric's name too)."""


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far a metric may move from the first stretch to the last before it is flagged.

    Attributes:
        limit: the change that is still fine; positive: flagged above it
            (a rise is bad), negative: flagged below it (a fall is bad).
        relative: the change is last / first - 1; else last - first.
        min_samples: fewest samples each stretch needs for a flag.
    """

    limit: float
    relative: bool = True
    min_samples: int = 1

    def change(self, first: float | None, last: float | None) -> float | None:
        """The change from ``first`` to ``last``; None when either is unknown or a relative change starts at 0."""
        if first is None or last is None:
            return None
        if not self.relative:
            return last - first
        return last / first - 1.0 if first > 0 else None

    def passed_by(self, change: float | None) -> bool:
        """True when ``change`` goes past the limit in the bad direction."""
        if change is None:
            return False
        return change > self.limit if self.limit >= 0 else change < self.limit


TOLERANCES: Mapping[str, Tolerance] = {
    "ttft_p99_s": Tolerance(0.25, min_samples=MIN_SAMPLES),
    "itl_p99_s": Tolerance(0.25, min_samples=MIN_SAMPLES),
    "e2e_p99_s": Tolerance(0.25, min_samples=MIN_SAMPLES),
    "output_tokens_per_s": Tolerance(-0.25),
    "error_ratio": Tolerance(0.05, relative=False),
    RSS_GAUGE: Tolerance(0.50),
}
"""Per metric, in the results' order: +25% latency p99, -25% output tok/s, +0.05 error ratio, +50% client RSS."""

Gauges = Mapping[str, float | int | None]


def drift_section(
    series: IntervalSeries,
    interval_s: float,
    end_s: float,
    gauges: Mapping[int, Gauges] | None = None,
) -> dict[str, Any]:
    """The results' ``drift`` section (README "Drift").

    Args:
        series: the run's requests per interval.
        interval_s: the interval length (s).
        end_s: the run's end, seconds since its start (on the same clock as the series).
        gauges: the time series' gauge samples per interval index (``RSS_GAUGE`` is read).

    Returns:
        ``judged``, ``note`` (why not judged, else null), ``intervals`` (judged
        intervals), ``stretch_intervals``, ``first``/``last`` (``{from_s, to_s}``
        of each stretch, null when not judged), ``metrics`` (per metric:
        ``first``, ``last``, ``change``, ``relative``, ``tolerance``,
        ``samples``, ``enough_samples``, ``flagged``; empty when not judged) and ``flagged`` (names of the
        flagged metrics).

    Raises:
        ValueError: ``interval_s`` is not a positive finite number or ``end_s`` is not finite.
    """
    last_index = interval_index(end_s, interval_s)
    count = last_index + 1
    if end_s - last_index * interval_s < interval_s / 2 and count > 1:
        count -= 1  # the stop cut the last interval short
    stretch = max(1, math.floor(count * STRETCH_SHARE))
    section: dict[str, Any] = {
        "judged": False,
        "note": None,
        "intervals": count,
        "stretch_intervals": stretch,
        "stretch_share": STRETCH_SHARE,
        "min_intervals": MIN_INTERVALS,
        "first": None,
        "last": None,
        "metrics": {},
        "flagged": [],
    }
    if count < MIN_INTERVALS:
        section["note"] = (
            f"too short to judge: {count} interval(s) of {interval_s:g} s, drift needs {MIN_INTERVALS}; "
            "run longer or pass a shorter --timeseries-interval"
        )
        return section
    first_range = range(stretch)
    last_range = range(count - stretch, count)
    first = _figures(series, first_range, interval_s, end_s, gauges or {})
    last = _figures(series, last_range, interval_s, end_s, gauges or {})
    metrics = {}
    for name, tolerance in TOLERANCES.items():
        (first_value, first_n), (last_value, last_n) = first[name], last[name]
        change = tolerance.change(first_value, last_value)
        enough = min(first_n, last_n) >= tolerance.min_samples
        metrics[name] = {
            "first": first_value,
            "last": last_value,
            "change": change,
            "relative": tolerance.relative,
            "tolerance": tolerance.limit,
            "samples": [first_n, last_n],
            "enough_samples": enough,
            "flagged": enough and tolerance.passed_by(change),
        }
    section.update(
        judged=True,
        first=_span(first_range, interval_s, end_s),
        last=_span(last_range, interval_s, end_s),
        metrics=metrics,
        flagged=[name for name, m in metrics.items() if m["flagged"]],
    )
    return section


def _span(indices: range, interval_s: float, end_s: float) -> dict[str, float]:
    """The stretch in seconds since the start; it ends at the run's end when the stop cut its last interval."""
    return {"from_s": indices.start * interval_s, "to_s": min(indices.stop * interval_s, end_s)}


def _figures(
    series: IntervalSeries, indices: range, interval_s: float, end_s: float, gauges: Mapping[int, Gauges]
) -> dict[str, tuple[float | None, int]]:
    """Each metric's value over the stretch ``indices`` and how many samples it rests on."""
    merged = LLMStats.empty()
    for index in indices:
        merged.merge_in(series.get(index))
    total: EndpointStats = merged.total()
    timed = merged.latency_total()  # a mixed run's embeddings are not timed with its generation requests
    finished = total.finished
    span = _span(indices, interval_s, end_s)
    seconds = span["to_s"] - span["from_s"]  # a last interval the stop cut short counts its own length
    rss = [v for i in indices if (v := (gauges.get(i) or {}).get(RSS_GAUGE)) is not None]
    return {
        "ttft_p99_s": (timed.ttft_s.quantile(0.99), timed.ttft_s.count),
        "itl_p99_s": (timed.itl_s.quantile(0.99), timed.itl_s.count),
        "e2e_p99_s": (timed.e2e_s.quantile(0.99), timed.e2e_s.count),
        "output_tokens_per_s": _output_rate(total, seconds),
        "error_ratio": (total.failed / finished if finished else None, finished),
        RSS_GAUGE: (float(max(rss)) if rss else None, len(rss)),
    }


def _output_rate(total: EndpointStats, seconds: float) -> tuple[float | None, int]:
    """Output tok/s of a stretch and the successes it rests on; None (not 0) when they generate nothing (embeddings)."""
    generating = total.succeeded - total.no_output_requests
    if total.no_output_requests and not total.completion_tokens_known_requests:
        return None, 0
    return total.completion_tokens_sum / seconds, generating
