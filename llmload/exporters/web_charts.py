"""Plain values behind the web UI's live charts and form labels (``llmload.edge.web.charts`` serves them).

- ``series_payload``: the answer of ``/llmload/timeseries.json``, the run's
  per-interval total rows (``CHART_COLUMNS``): complete intervals only while
  the run goes; the results' rows, last partial interval included, once it ended.
- ``form_fields``: label, help and default of each form field, from ``llmload.settings.options``.
- ``script_tags``: what is added to Locust's index page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from llmload.aggregate.series import IntervalSeries
from llmload.errors import InvalidOptionsError
from llmload.exporters.chart_rows import CHART_TURNS, interval_of, mark_partial, turn_column, with_turn_columns
from llmload.exporters.timeline import Timeline
from llmload.exporters.timeseries import Row, generates, interval_rows
from llmload.request.record import Outcome
from llmload.settings.options import OPTIONS, OptionSpec
from llmload.settings.thresholds import Threshold

__all__ = [
    "CHART_COLUMNS",
    "FAILURE_COLUMNS",
    "RowCache",
    "field_messages",
    "form_fields",
    "script_tags",
    "series_payload",
    "threshold_lines",
]


FAILURE_COLUMNS: tuple[str, ...] = tuple(o.value for o in Outcome if o.is_failure)
"""Failure outcomes, one count column each (the failures chart)."""

CHART_COLUMNS: tuple[str, ...] = (
    "t",
    "interval_s",
    "succeeded",
    "failed",
    *FAILURE_COLUMNS,
    "requests_per_s",
    "output_tokens_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "in_flight_requests",
    "users",
    "server_generation_tokens_per_s",
    "server_running_requests",
    "server_waiting_requests",
    "server_kv_cache_usage",
    "schedule_lag_p99_s",
    *(turn_column(turn) for turn in range(1, CHART_TURNS + 1)),
)
"""The columns of the route's rows: a subset of the time series' total row (server columns null when not read),
and its ``turn_ttft_mean_s`` as one column per turn (``llmload.exporters.chart_rows.with_turn_columns``).

Each row also has ``partial`` and ``rate_left_out`` (``llmload.exporters.chart_rows.mark_partial``):
the run's last interval when the stop cut it short, and whether rate charts leave it out."""


def _chart_row(row: Row) -> dict[str, Any]:
    flat = with_turn_columns(row)
    chart = {name: flat.get(name) for name in CHART_COLUMNS}
    chart["partial"] = bool(row.get("partial", False))
    chart["rate_left_out"] = bool(row.get("rate_left_out", False))
    return chart


class RowCache:
    """The chart rows of the complete intervals, each computed once (a poll then costs no histogram merge).

    Valid for one run's timeline and series: given others (a new run, or
    RESET's new series) it starts over. An interval that a late worker report
    changes after it was computed keeps its first figures here until the
    run's results replace every row.
    """

    __slots__ = ("_rows", "_series", "_timeline")

    def __init__(self) -> None:
        """An empty cache."""
        self._timeline: Timeline | None = None
        self._series: IntervalSeries | None = None
        self._rows: list[dict[str, Any]] = []

    def rows(self, timeline: Timeline, series: IntervalSeries) -> list[dict[str, Any]]:
        """The chart rows of intervals ``0 .. timeline.written_intervals - 1``, ``t`` increasing."""
        if timeline is not self._timeline or series is not self._series:
            self._timeline, self._series, self._rows = timeline, series, []
        generation_only = generates(series)
        for index in range(len(self._rows), timeline.written_intervals):
            total = interval_rows(
                index,
                series.get(index),
                timeline.interval_s,
                gauges=timeline.columns_of(index),
                extra_columns=timeline.extra_columns,
                generation_only=generation_only,
            )
            self._rows.append(_chart_row(total[0]))
        return self._rows


def series_payload(
    run_id: str,
    state: str,
    *,
    timeline: Timeline | None,
    series: IntervalSeries,
    results: Mapping[str, Any] | None,
    since_t: float = -math.inf,
    cache: RowCache | None = None,
    warnings: Sequence[str] = (),
    started_at_unix: float | None = None,
    thresholds: Sequence[Threshold] = (),
) -> dict[str, Any]:
    """The route's answer: ``{"run_id", "state", "interval_s", "ended", "in_progress_included", "rows",
    "warnings", "started_at_unix", "thresholds"}``.

    Args:
        run_id: the run's id; "" before the first run (no rows then).
        state: Locust's runner state, passed through.
        timeline: the run's live timeline (which intervals are complete), or None.
        series: the run's requests by finish interval (master: merged from the workers).
        results: the run's results document once it ended, else None.
        since_t: give only rows with ``t`` greater than this (a poller's last ``t``).
        cache: the rows computed by earlier calls (the route keeps one); None computes them all.
        warnings: what the LLM tab shows above its table (``chart_rows.client_warnings``).
        started_at_unix: the run's start on the master's wall clock (the charts' time axis: start + ``t``).
        thresholds: the run's ``--abort-on`` conditions, drawn as lines (``threshold_lines``).

    ``rows`` are total rows (``CHART_COLUMNS``, ``partial``, ``rate_left_out``), ``t`` increasing; durations in
    seconds, null where unknown. ``ended`` is true once the rows are the
    results' (final; the last interval, cut at the stop, included and marked ``partial``).
    """
    answer: dict[str, Any] = {"run_id": "", "state": state, "interval_s": None, "ended": False}
    answer["in_progress_included"] = False
    answer["rows"] = []
    answer["warnings"] = []
    answer["started_at_unix"] = None
    answer["thresholds"] = []
    if not run_id:
        return answer
    answer["run_id"] = run_id
    answer["warnings"] = list(warnings)
    answer["started_at_unix"] = started_at_unix
    answer["thresholds"] = threshold_lines(thresholds)
    if results is not None and results.get("timeseries") is not None:
        total = [r for r in results["timeseries"] if r.get("endpoint") is None]
        interval_s = timeline.interval_s if timeline is not None else interval_of(results, total)
        rows = [_chart_row(r) for r in mark_partial(total, interval_s) if r["t"] > since_t]
        answer["ended"] = True
        answer["interval_s"] = interval_s
    elif timeline is not None:
        answer["interval_s"] = timeline.interval_s
        rows = [r for r in (cache or RowCache()).rows(timeline, series) if r["t"] > since_t]
    else:
        rows = []
    answer["rows"] = rows
    return answer


def threshold_lines(thresholds: Sequence[Threshold]) -> list[dict[str, Any]]:
    """The ``--abort-on`` limits the live charts draw as lines: ``{"text", "column", "value"}`` per threshold.

    ``column`` is the time-series column the metric reads (``Threshold.column``), ``value`` the limit in
    that column's unit (seconds, per second). Ratios (``error_ratio``, ``throttled_ratio``) have no chart
    of their own and are left out.
    """
    lines = []
    for threshold in thresholds:
        if threshold.column is not None:
            lines.append({"text": threshold.text, "column": threshold.column, "value": threshold.value})
    return lines


def form_fields(options: tuple[OptionSpec, ...] = OPTIONS) -> dict[str, dict[str, str]]:
    """Per form field (``dest``): ``{"label", "help", "default", "group"}`` for the web UI's "Custom parameters".

    ``group`` is the option's heading (``llmload.settings.options.GROUPS``, the order of ``llmload options``
    and of the README's option tables); the page puts a heading before each group's first field.

    ``default`` is the default in words, as ``llmload options`` and the README
    say it (``OptionSpec.default_text``: e.g. "not set: closed loop", "off: streaming").
    """
    fields = {}
    for spec in options:
        if spec.launch_only:
            continue
        shown = spec.default_text
        fields[spec.dest] = {"label": spec.label, "help": spec.help, "default": shown, "group": spec.group}
    return fields


def field_messages(error: InvalidOptionsError, options: tuple[OptionSpec, ...] = OPTIONS) -> dict[str, str]:
    """Each refused value's message by its form field (the option's ``dest``), for the page to show at the field.

    The start form's answer carries it as ``llmload_fields``; every value refused at once
    (``InvalidOptionsError.problems``), so the page marks them all.
    """
    dest = {spec.flag: spec.dest for spec in options} | {"-H": "host"}  # Locust's own host field
    return {dest.get(flag, flag): message for flag, message in error.problems}


def script_tags(config: dict[str, Any]) -> str:
    """The tags added before ``</body>``: the config as JSON (``<`` escaped), Chart.js and ``llmtab.js``."""
    data = json.dumps(config).replace("<", "\\u003c")  # cannot close the script element
    base = config["base"]
    return (
        f'<script id="llmload-config" type="application/json">{data}</script>'
        f'<script src="{base}/llmload/static/chart.umd.min.js"></script>'
        f'<script src="{base}/llmload/static/llmtab.js"></script>'
    )
