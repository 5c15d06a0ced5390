"""The per-interval time series: the row schema and the rows of an ``IntervalSeries``.

Every ``interval_s`` seconds of the run gives one *total* row (``endpoint``
and ``model`` null) and one row per (endpoint, model) that had a request
finish in the interval. Requests belong to the interval in which they
finished, on the measuring process's monotonic clock relative to its run
start (``llmload.aggregate.series`` says how workers' clocks are aligned). A row holds:

- ``t``: start of the interval, seconds since the run's start; the row covers
  ``[t, t + interval_s)``. ``interval_s`` is the configured length, except for
  the run's last interval, which ends at the stop.
- counts: ``succeeded``, ``failed`` (every failure outcome) and one column per
  other ``Outcome`` by its value (``cancelled``, ``http_error``,
  ``timeout``, ...), so a new outcome becomes a column by itself.
- ``prompt_tokens``, ``output_tokens``: sums over the interval's successes
  whose count is known (as in the results' ``tokens``); ``output_tokens`` and
  ``output_tokens_per_s`` are None in a row whose successes generate nothing
  (embeddings alone).
- ``reasoning_tokens``, ``answer_tokens``, ``cached_prompt_tokens``: usage's
  reasoning tokens, the output tokens that are not reasoning (never negative,
  ``EndpointStats.answer_tokens``: the rule of the results' ``tokens.answer``)
  and prompt tokens served from the prefix cache, over the interval's
  successes whose server said; None when unknown.
- rates over ``interval_s``: ``requests_per_s`` (successes),
  ``output_tokens_per_s``, ``total_tokens_per_s``.
- ``<metric>_<p>_s`` for TTFT, ITL, TPOT, E2E and p50/p90/p99: quantiles of
  the interval's successes, from the interval's merged histograms (the same
  buckets and rule as the results; never averages of percentiles).
- ``read_lag_p99_s``: the client's read lag over the interval's reads.
- ``schedule_lag_p99_s``: open loop or ``--trace``: p99 of the interval's
  dispatch delays (sent − due); None in a closed loop.
- ``turn_ttft_mean_s``: sessions (``--turns``, ``--sessions``): the mean TTFT
  of the interval's successes by turn number, ``{"1": s, "2": s, ...}`` (in
  the CSV as its JSON text); None when no request of a turn finished.
- gauges, total row only (null in per-key rows): ``in_flight_requests``,
  ``users``, ``workers``, ``client_rss_bytes`` (the load generator's resident
  memory: the process's own, or on a master the largest worker's), as of the
  interval's last sample (the master samples every half second; a worker's
  in-flight count and memory are as of its latest report). Further columns
  are added by passing their names as ``extra_columns`` and their values in
  the samples or, for values read elsewhere per interval,
  ``Timeline.add_extra``: this is the one place for extra columns. The run's
  server metrics come that way (``llmload.servermetrics.SERVER_COLUMNS``,
  read at each interval's end).

When an interval is complete, live, is ``llmload.exporters.timeline``'s
(``Timeline``); the line logged per total row is ``llmload.exporters.progress``'s.

Null means unknown (no request to measure), never 0. Summing ``succeeded``,
``failed``, ``cancelled``, ``prompt_tokens`` or ``output_tokens`` over the
total rows gives the run's totals exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.series import IntervalSeries, interval_index
from llmload.aggregate.stats import NO_OUTPUT_ENDPOINTS, EndpointStats, LLMStats
from llmload.exporters.sections import PERCENTILES
from llmload.request.record import Outcome

__all__ = [
    "DEFAULT_INTERVAL_S",
    "GAUGE_COLUMNS",
    "QUANTILE_METRICS",
    "RSS_COLUMN",
    "Gauges",
    "Row",
    "columns",
    "generates",
    "interval_rows",
    "outcome_columns",
    "series_rows",
    "turn_ttft_means",
]

DEFAULT_INTERVAL_S = 10.0
"""Default ``--timeseries-interval`` in seconds."""

QUANTILE_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft", "ttft_s"),
    ("itl", "itl_s"),
    ("tpot", "tpot_s"),
    ("e2e", "e2e_s"),
)
"""(column prefix, ``EndpointStats`` histogram) of the latency quantile columns."""

RSS_COLUMN = "client_rss_bytes"
"""The gauge of the load generator's resident memory (bytes)."""

GAUGE_COLUMNS = ("in_flight_requests", "users", "workers", RSS_COLUMN)
"""Gauges the master samples for every interval (total row only)."""

Row = dict[str, Any]
"""One time-series row: column name -> int, float, str or None (JSON- and CSV-ready)."""

Gauges = Mapping[str, float | int | None]
"""One interval's gauge samples and extra columns: column name -> value (None: unknown)."""


def outcome_columns() -> tuple[str, ...]:
    """One count column per ``Outcome`` other than ``OK``, by its value, in declaration order."""
    return tuple(o.value for o in Outcome if o is not Outcome.OK)


def _quantile_columns() -> tuple[str, ...]:
    return tuple(f"{prefix}_{name}_s" for prefix, _ in QUANTILE_METRICS for name, _ in PERCENTILES)


def columns(extra_columns: Sequence[str] = ()) -> tuple[str, ...]:
    """Every column of a row, in order (the CSV header); ``extra_columns`` come last.

    Raises:
        ValueError: an extra column repeats a built-in one.
    """
    base = (
        "t",
        "interval_s",
        "endpoint",
        "model",
        "succeeded",
        "failed",
        *outcome_columns(),
        "prompt_tokens",
        "output_tokens",
        "requests_per_s",
        "output_tokens_per_s",
        "total_tokens_per_s",
        "reasoning_tokens",
        "answer_tokens",
        "cached_prompt_tokens",
        *_quantile_columns(),
        "read_lag_p99_s",
        "schedule_lag_p99_s",
        "turn_ttft_mean_s",
        *GAUGE_COLUMNS,
    )
    clash = sorted(set(base) & set(extra_columns))
    if clash:
        raise ValueError(f"extra time-series columns {clash} repeat built-in ones; rename them")
    return base + tuple(extra_columns)


def _per_s(n: int, interval_s: float) -> float | None:
    return n / interval_s if interval_s > 0 else None


def _stats_row(s: EndpointStats, interval_s: float, timed: EndpointStats | None = None) -> Row:
    """One row's figures of ``s``; the latency quantiles of ``timed`` when given (``LLMStats.latency_total``)."""
    row: Row = {"succeeded": s.succeeded, "failed": s.failed}
    for outcome in Outcome:
        if outcome is not Outcome.OK:
            row[outcome.value] = s.requests_by_outcome.get(outcome, 0)
    prompt, output = s.prompt_tokens_sum, s.completion_tokens_sum
    generated = not s.no_output_requests or s.completion_tokens_known_requests > 0  # embeddings alone: nothing
    row["prompt_tokens"] = prompt
    row["output_tokens"] = output if generated else None
    row["requests_per_s"] = _per_s(s.succeeded, interval_s)
    row["output_tokens_per_s"] = _per_s(output, interval_s) if generated else None
    row["total_tokens_per_s"] = _per_s(prompt + output, interval_s)
    row.update(_usage_detail_columns(s))
    for prefix, name in QUANTILE_METRICS:
        hist: LatencyHistogram = getattr(s if timed is None else timed, name)
        values = hist.quantiles([q for _, q in PERCENTILES])
        for (label, _), value in zip(PERCENTILES, values, strict=True):
            row[f"{prefix}_{label}_s"] = value
    row["read_lag_p99_s"] = s.read_lag_s.quantile(0.99)
    row["schedule_lag_p99_s"] = s.dispatch_delay_s.quantile(0.99)
    row["turn_ttft_mean_s"] = turn_ttft_means(s)
    return row


def turn_ttft_means(s: EndpointStats) -> dict[str, float] | None:
    """Mean TTFT (seconds) of ``s``'s successes by turn number (as str, in turn order); None when none had one."""
    means = {
        turn: s.turn_ttft_us_sum.get(turn, 0) / 1e6 / known
        for turn, known in sorted(s.turn_ttft_known.items(), key=lambda item: _turn_key(item[0]))
        if known
    }
    return means or None


def _turn_key(turn: str) -> tuple[int, str]:
    return (int(turn), "") if turn.isdigit() else (1 << 30, turn)  # the overflow label last


def _usage_detail_columns(s: EndpointStats) -> Row:
    """Usage's reasoning, answer (``EndpointStats.answer_tokens``) and cached prompt tokens; None: unknown."""
    return {
        "reasoning_tokens": s.reasoning_tokens_sum if s.reasoning_known_requests else None,
        "answer_tokens": s.answer_tokens,
        "cached_prompt_tokens": s.cached_prompt_tokens_sum if s.cached_prompt_tokens_known_requests else None,
    }


def interval_rows(
    index: int,
    stats: LLMStats,
    interval_s: float,
    *,
    covered_s: float | None = None,
    gauges: Gauges | None = None,
    extra_columns: Sequence[str] = (),
    generation_only: bool = False,
) -> list[Row]:
    """The rows of interval ``index``: the total row, then one per (endpoint, model) key, sorted.

    The total row's latency quantiles are over ``LLMStats.latency_keys``: in a
    run that mixes embeddings with generation requests, the generation ones
    (``generation_only``: the run generates, so an interval where only
    embeddings finished has no latency, not theirs; ``generates``).

    Args:
        index: interval number (0 = the first ``interval_s`` seconds of the run).
        stats: the requests that finished in the interval.
        interval_s: configured interval length in seconds.
        covered_s: how much of the interval the run covered (the last one
            ends at the stop); None = all of it. Rates divide by it.
        gauges: the master's samples for the interval (``GAUGE_COLUMNS`` and
            ``extra_columns``); absent names are null.
        extra_columns: names of extra gauge columns (``columns``).
    """
    length_s = interval_s if covered_s is None else max(0.0, min(covered_s, interval_s))
    head = {"t": index * interval_s, "interval_s": length_s}
    gauge_values = {name: (gauges or {}).get(name) for name in GAUGE_COLUMNS + tuple(extra_columns)}
    timed = stats.latency_total(generation_only=generation_only)
    total = {**head, "endpoint": None, "model": None, **_stats_row(stats.total(), length_s, timed), **gauge_values}
    rows = [total]
    for (endpoint, model), s in stats.items():
        row = {**head, "endpoint": endpoint, "model": model, **_stats_row(s, length_s)}
        row.update(dict.fromkeys(gauge_values))
        rows.append(row)
    return rows


def series_rows(
    series: IntervalSeries,
    interval_s: float,
    *,
    end_s: float | None = None,
    gauges: Mapping[int, Gauges] | None = None,
    extra_columns: Sequence[str] = (),
    first_index: int = 0,
) -> list[Row]:
    """Rows of every interval from ``first_index`` to the last one, empty intervals included.

    Args:
        series: the run's requests per interval.
        interval_s: interval length in seconds.
        end_s: the run's end, seconds since its start; the interval holding it
            is the last one and is cut there. None: the last interval with a
            request, uncut.
        gauges: the master's samples per interval index.
        extra_columns: names of extra gauge columns.
        first_index: the first interval to give rows for.
    """
    last = series.last_index()
    if end_s is not None:
        end_index = interval_index(end_s, interval_s)
        last = end_index if last is None else max(last, end_index)
    if last is None:
        return []
    rows: list[Row] = []
    generation_only = generates(series)
    for index in range(first_index, last + 1):
        covered_s = None
        if end_s is not None and index == last:
            covered_s = end_s - index * interval_s
        rows.extend(
            interval_rows(
                index,
                series.get(index),
                interval_s,
                covered_s=covered_s,
                gauges=(gauges or {}).get(index),
                extra_columns=extra_columns,
                generation_only=generation_only,
            )
        )
    return rows


def generates(series: IntervalSeries) -> bool:
    """Whether the run generates: some interval counted an endpoint other than embeddings (``interval_rows``)."""
    return any(endpoint not in NO_OUTPUT_ENDPOINTS for endpoint in series.endpoints())
