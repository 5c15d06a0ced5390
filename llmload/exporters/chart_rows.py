"""What the charts of the HTML report and of the web UI draw, shared by both (plain values, no drawing).

- ``RATE_COLUMNS``: the time-series columns that are rates over an interval
  (``requests_per_s``, ``output_tokens_per_s``, ...). A rate over the run's
  last interval, cut at the stop, is over a fraction of an interval (e.g. 3
  requests in 0.076 s = 39.6 req/s beside a steady 17): the row is marked
  ``partial`` and, when it covers less than ``RATE_MIN_SHARE`` of an interval
  and other rows exist, ``rate_left_out`` (``mark_partial``): rate charts leave
  it out, saying so. A longer partial interval is drawn as the rate over its
  real length; counts and latency quantiles of every interval are drawn as they are.
- ``interval_of``: the configured interval of a results document's rows.
- ``client_warnings``: the client-saturation warnings (CPU, read lag) as the
  web UI's LLM tab shows them, by the rule of the results' ``client_saturated``.
- ``latency_cdf``: a latency's cumulative distribution from its histogram's
  buckets (the results' ``latency_cdf``, drawn by the HTML report).
- ``with_turn_columns`` / ``load_charts``: the schedule lag (open loop,
  ``--trace``) and the mean TTFT by turn (sessions) over time: the row's
  ``turn_ttft_mean_s`` map flattened into one column per turn
  (``ttft_turn<N>_mean_s``, turns 1 to ``CHART_TURNS``), and the charts to
  draw when some row has a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llmload.aggregate.histogram import LatencyHistogram
from llmload.exporters.sections import CPU_SATURATION_S, READ_LAG_LIMIT_S, read_lag_saturated

__all__ = [
    "CDF_MAX_POINTS",
    "CDF_METRICS",
    "CHART_TURNS",
    "RATE_COLUMNS",
    "RATE_MIN_SHARE",
    "client_warnings",
    "interval_of",
    "is_partial",
    "latency_cdf",
    "load_charts",
    "mark_partial",
    "results_warnings",
    "turn_column",
    "with_turn_columns",
]

CDF_METRICS: tuple[str, ...] = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
"""The latencies whose distribution the results carry (``latency_cdf``), by their ``latency`` key."""

CDF_MAX_POINTS = 120
"""At most about this many points per distribution (more buckets are thinned by cumulative share)."""

RATE_COLUMNS: tuple[str, ...] = (
    "requests_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "server_generation_tokens_per_s",
    "server_prompt_tokens_per_s",
)
"""Time-series columns that are a count over the interval's length (left out of rate charts when partial)."""

RATE_MIN_SHARE = 0.5
"""Share of an interval a partial row must cover for rate charts to draw it (its rate over its real length)."""

_TOLERANCE = 1e-9

CHART_TURNS = 8
"""Turns drawn one line each in the TTFT-by-turn chart (later turns are in the results' ``sessions`` table)."""


def turn_column(turn: int) -> str:
    """The chart column of turn ``turn``'s mean TTFT (seconds): ``ttft_turn<N>_mean_s``."""
    return f"ttft_turn{turn}_mean_s"


def with_turn_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with ``turn_ttft_mean_s`` flattened into ``turn_column(1 .. CHART_TURNS)`` (None: no such turn)."""
    means = row.get("turn_ttft_mean_s")
    out = dict(row)
    for turn in range(1, CHART_TURNS + 1):
        out[turn_column(turn)] = means.get(str(turn)) if isinstance(means, Mapping) else None
    return out


def load_charts(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The schedule-lag and TTFT-by-turn charts that ``rows`` (``with_turn_columns`` rows) have values for.

    Each is ``{"id", "title", "fields", "labels", "scale"}`` (comma-separated fields and labels, ms scale).
    """
    rows = list(rows)
    charts = []
    if any(row.get("schedule_lag_p99_s") is not None for row in rows):
        charts.append(
            {
                "id": "ts-schedule-lag",
                "title": "Schedule lag p99 (ms): sent - due",
                "fields": "schedule_lag_p99_s",
                "labels": "schedule lag p99 (ms)",
                "scale": "1000",
            }
        )
    turns = [t for t in range(1, CHART_TURNS + 1) if any(row.get(turn_column(t)) is not None for row in rows)]
    if turns:
        charts.append(
            {
                "id": "ts-turn-ttft",
                "title": "Mean TTFT by turn (ms)",
                "fields": ",".join(turn_column(t) for t in turns),
                "labels": ",".join(f"turn {t}" for t in turns),
                "scale": "1000",
            }
        )
    return charts


def is_partial(row: Mapping[str, Any], interval_s: float | None) -> bool:
    """True when the row covers less than the configured ``interval_s`` (the last interval, cut at the stop)."""
    length = row.get("interval_s")
    if interval_s is None or not isinstance(length, int | float):
        return False
    return float(length) < interval_s * (1.0 - _TOLERANCE)


def mark_partial(rows: Iterable[Mapping[str, Any]], interval_s: float | None) -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``partial`` (``is_partial``) and ``rate_left_out`` set; other fields unchanged.

    ``rate_left_out``: partial, shorter than ``RATE_MIN_SHARE`` of ``interval_s``, and not the only kind of
    row (a run shorter than one interval keeps its one rate, over its real length).
    """
    marked = [{**row, "partial": is_partial(row, interval_s)} for row in rows]
    complete = any(not row["partial"] for row in marked)
    for row in marked:
        short = interval_s is not None and is_partial(row, interval_s * RATE_MIN_SHARE)
        row["rate_left_out"] = bool(row["partial"] and complete and short)
    return marked


def interval_of(document: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> float | None:
    """The configured interval (s) of a results document: its ``run.options``, else the longest row's length."""
    run = document.get("run")
    options = run.get("options") if isinstance(run, Mapping) else None
    configured = options.get("timeseries_interval_s") if isinstance(options, Mapping) else None
    if isinstance(configured, int | float) and not isinstance(configured, bool) and configured > 0:
        return float(configured)
    lengths = [float(r["interval_s"]) for r in rows if isinstance(r.get("interval_s"), int | float)]
    return max(lengths) if lengths else None


def latency_cdf(hist: LatencyHistogram, max_points: int = CDF_MAX_POINTS) -> list[list[float]]:
    """The cumulative distribution of ``hist``: ``[[latency_s, share], ...]``, latency increasing, share to 1.0.

    One point per non-empty bucket: its value is the quantile at the bucket's
    cumulative share (``LatencyHistogram.quantiles``: the bucket's
    representative, within 1%, clamped to the exact min and max, the rule of
    the results' p50/p99), its share the requests at or below it. Values below
    the histogram's zero threshold make a first point at 0. With more buckets
    than ``max_points``, a point is kept when its share passes the next
    ``1 / max_points`` step (first and last always kept). [] when empty.
    """
    n = hist.count
    if n == 0:
        return []
    cumulative = hist.zero_count
    shares: list[float] = []
    for _index, count in hist.buckets():
        cumulative += count
        shares.append(cumulative / n)
    values = hist.quantiles(shares) if shares else []
    points = [[0.0, hist.zero_count / n]] if hist.zero_count else []
    points += [[value, share] for value, share in zip(values, shares, strict=True) if value is not None]
    if len(points) <= max_points:
        return points
    kept, step = [points[0]], -1
    for point in points[1:-1]:
        reached = int(point[1] * max_points)
        if reached > step:
            kept.append(point)
            step = reached
    kept.append(points[-1])
    return kept


def _cpu_line(cpu_saturated_s: float) -> str:
    return (
        f"Client saturated: the load generator's CPU was above 90% for {cpu_saturated_s:.0f} s; latencies are "
        "unreliable. Add worker processes (--processes N) or machines"
    )


def _lag_line(p99_s: float, max_s: float) -> str:
    return (
        f"Client saturated: events piled up behind late reads, so latencies may be late by up to "
        f"{p99_s * 1e3:.1f} ms (read lag P99; max {max_s * 1e3:.1f} ms, limit {READ_LAG_LIMIT_S * 1e3:g} ms). "
        "Give the client more CPU: --processes N, more machines or fewer users per process"
    )


def client_warnings(cpu_saturated_s: float, read_lag: LatencyHistogram) -> list[str]:
    """One line per way the client was saturated so far (CPU streak, read lag P99); [] when it was not.

    Args:
        cpu_saturated_s: longest CPU-above-90% streak of any load-generating process (s).
        read_lag: the client's read lag over the run so far (``EndpointStats.read_lag_s`` of the total).
    """
    lines = []
    if cpu_saturated_s >= CPU_SATURATION_S:
        lines.append(_cpu_line(cpu_saturated_s))
    if read_lag_saturated(read_lag):
        lines.append(_lag_line(read_lag.quantile(0.99) or 0.0, read_lag.max or 0.0))
    return lines


def results_warnings(results: Mapping[str, Any]) -> list[str]:
    """``client_warnings`` of a finished run, from its results document (``client`` and CPU figures)."""
    client = results.get("client") or {}
    lines = []
    cpu_s = results.get("client_cpu_saturated_s") or 0.0
    if results.get("client_saturated") and cpu_s >= CPU_SATURATION_S:
        lines.append(_cpu_line(cpu_s))
    lag = client.get("read_lag_s") or {}
    if client.get("read_lag_saturated") and lag.get("p99") is not None:
        lines.append(_lag_line(lag["p99"], lag.get("max") or 0.0))
    return lines
