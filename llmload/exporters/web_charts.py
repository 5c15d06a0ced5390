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
from collections.abc import Mapping
from typing import Any

from llmload.aggregate.series import IntervalSeries
from llmload.exporters.timeseries import Row, Timeline, interval_rows
from llmload.request.record import Outcome
from llmload.settings.options import OPTIONS, OptionSpec

__all__ = ["CHART_COLUMNS", "FAILURE_COLUMNS", "RowCache", "form_fields", "script_tags", "series_payload"]


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
    "itl_p99_s",
    "in_flight_requests",
    "users",
    "server_generation_tokens_per_s",
    "server_running_requests",
    "server_waiting_requests",
    "server_kv_cache_usage",
)
"""The columns of the route's rows: a subset of the time series' total row (server columns null when not read)."""


def _chart_row(row: Row) -> dict[str, Any]:
    return {name: row.get(name) for name in CHART_COLUMNS}


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
        for index in range(len(self._rows), timeline.written_intervals):
            total = interval_rows(
                index,
                series.get(index),
                timeline.interval_s,
                gauges=timeline.columns_of(index),
                extra_columns=timeline.extra_columns,
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
) -> dict[str, Any]:
    """The route's answer: ``{"run_id", "state", "interval_s", "ended", "in_progress_included", "rows"}``.

    Args:
        run_id: the run's id; "" before the first run (no rows then).
        state: Locust's runner state, passed through.
        timeline: the run's live timeline (which intervals are complete), or None.
        series: the run's requests by finish interval (master: merged from the workers).
        results: the run's results document once it ended, else None.
        since_t: give only rows with ``t`` greater than this (a poller's last ``t``).
        cache: the rows computed by earlier calls (the route keeps one); None computes them all.

    ``rows`` are total rows (``CHART_COLUMNS``), ``t`` increasing; durations in
    seconds, null where unknown. ``ended`` is true once the rows are the
    results' (final; the last interval, cut at the stop, included).
    """
    answer: dict[str, Any] = {"run_id": "", "state": state, "interval_s": None, "ended": False}
    answer["in_progress_included"] = False
    answer["rows"] = []
    if not run_id:
        return answer
    answer["run_id"] = run_id
    if results is not None and results.get("timeseries") is not None:
        rows = [_chart_row(r) for r in results["timeseries"] if r.get("endpoint") is None and r["t"] > since_t]
        answer["ended"] = True
        answer["interval_s"] = timeline.interval_s if timeline is not None else None
    elif timeline is not None:
        answer["interval_s"] = timeline.interval_s
        rows = [r for r in (cache or RowCache()).rows(timeline, series) if r["t"] > since_t]
    else:
        rows = []
    answer["rows"] = rows
    return answer


def form_fields(options: tuple[OptionSpec, ...] = OPTIONS) -> dict[str, dict[str, str]]:
    """Per form field (``dest``): ``{"label", "help", "default"}`` for the web UI's "Custom parameters".

    ``default`` is the default in words, as ``llmload options`` and the README
    say it (``OptionSpec.default_text``: e.g. "not set: closed loop", "off: streaming").
    """
    fields = {}
    for spec in options:
        if spec.launch_only:
            continue
        shown = spec.default_text
        fields[spec.dest] = {"label": spec.label, "help": spec.help, "default": shown}
    return fields


def script_tags(config: dict[str, Any]) -> str:
    """The tags added before ``</body>``: the config as JSON (``<`` escaped), Chart.js and ``llmtab.js``."""
    data = json.dumps(config).replace("<", "\\u003c")  # cannot close the script element
    base = config["base"]
    return (
        f'<script id="llmload-config" type="application/json">{data}</script>'
        f'<script src="{base}/llmload/static/chart.umd.min.js"></script>'
        f'<script src="{base}/llmload/static/llmtab.js"></script>'
    )
