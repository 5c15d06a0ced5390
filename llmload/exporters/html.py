"""The self-contained HTML report of one run, or of two runs side by side, from results documents only.

``render_report([doc])`` and ``render_report([a, b])`` return one HTML page
that opens offline: the charting library (Chart.js, vendored in
``llmload/edge/web/static``) and the page's own script are inlined, and every
value from the documents reaches the page escaped (Jinja2 autoescaping for
the markup, ``tojson`` for the chart data). The page shows the verdict and
warnings, the summary table (with deltas B − A when comparing), latency
distributions, the time series (``timeseries`` rows, when the document has
them; the server's gauges and tok/s beside the client's when they were
scraped: ``SERVER_CHARTS``), failures by category, server metrics (``server``, when collected; the TTFT client − server
difference, or why it is n/a: ``llmload.exporters.console.ttft_split_row``) and
the configuration (``run.options``, already free of secrets).

Latency distributions: the results document's ``latency_cdf`` holds, per
latency, one point per histogram bucket (``llmload.exporters.chart_rows.latency_cdf``),
which the report draws as the cumulative distribution. A file written before
that field has only the mean, p50, p90, p99 and max: the report then draws the
CDF points those quantiles give and says so, rather than inventing a shape
between them.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from llmload.errors import ConfigError
from llmload.exporters.chart_rows import RATE_COLUMNS, interval_of, load_charts, mark_partial, with_turn_columns
from llmload.exporters.console import left_out_of_latency, summary_lines, ttft_split_row
from llmload.exporters.web_charts import threshold_lines
from llmload.settings.thresholds import parse_threshold

__all__ = [
    "CHART_LIBRARY",
    "LATENCY_METRICS",
    "SERVER_CHARTS",
    "CompareRow",
    "ReportError",
    "abort_on_lines",
    "cdf_from_histograms",
    "chart_rows",
    "compare_rows",
    "latency_cdf_points",
    "load_results",
    "render_report",
    "server_charts",
    "write_html_report",
    "write_page",
]

CHART_LIBRARY = ("edge", "web", "static", "chart.umd.min.js")
"""Path of the vendored Chart.js bundle inside the ``llmload`` package (shared with the web UI)."""

LATENCY_METRICS = (("ttft_s", "TTFT"), ("ttfc_s", "TTFC"), ("itl_s", "ITL"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
"""Latency keys of ``results["latency"]`` shown by the report, with their labels."""

SERVER_CHARTS: tuple[tuple[str, str, tuple[tuple[str, str], ...], float], ...] = (
    (
        "ts-server-tokens",
        "Output tokens/s: client vs server",
        (
            ("output_tokens_per_s", "client (requests finished)"),
            ("server_generation_tokens_per_s", "server (generated)"),
        ),
        1,
    ),
    (
        "ts-server-requests",
        "Server running / waiting requests",
        (("server_running_requests", "running"), ("server_waiting_requests", "waiting")),
        1,
    ),
    ("ts-server-kv", "Server KV-cache usage (%)", (("server_kv_cache_usage", "KV-cache usage"),), 100),
    ("ts-server-gpu", "GPU utilisation (%)", (("server_gpu_utilization", "GPU utilisation"),), 100),
    ("ts-server-gpu-memory", "GPU memory used (GiB)", (("server_gpu_memory_used_bytes", "memory used"),), 2.0**-30),
    ("ts-server-gpu-power", "GPU power (W)", (("server_gpu_power_w", "power"),), 1),
)
"""Server time-series charts: (canvas id, title, (row field, legend label) pairs, display scale).

A chart is drawn when some run has a value in one of its ``server_`` fields."""

_CDF_METRICS = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
_CDF_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))


class ReportError(ValueError):
    """A file given to the report is not a results document; the message names the file and the fix."""


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One figure of the summary table for each run, and B − A when there are two runs.

    Attributes:
        group: the table section (``Requests``, ``Throughput``, ``Latency (ms)``, ...).
        label: what the figure is, with its unit.
        path: the figure's key path in the results document, e.g. ``latency.ttft_s.p99``.
        values: the figure in each document as stored (seconds for times); None = unknown.
        scale: display factor (1000 for seconds shown in ms, 100 for ratios shown in %).
        delta: ``values[1] - values[0]`` when comparing and both are known, else None.
    """

    group: str
    label: str
    path: str
    values: tuple[float | None, ...]
    scale: float
    delta: float | None


_ROWS: tuple[tuple[str, str, str, float], ...] = (
    ("Requests", "Finished requests", "requests.total", 1),
    ("Requests", "Succeeded", "requests.succeeded", 1),
    ("Requests", "Failed", "requests.failed", 1),
    ("Requests", "Cancelled at stop (not counted)", "requests.cancelled", 1),
    ("Requests", "Skipped (client fault)", "requests.skipped", 1),
    ("Requests", "Failure ratio (%)", "requests.failure_ratio", 100),
    ("Throughput", "Duration (s)", "duration_s", 1),
    ("Throughput", "Requests/s", "throughput.requests_per_s", 1),
    ("Throughput", "Output tokens/s", "throughput.output_tokens_per_s", 1),
    ("Throughput", "Total tokens/s", "throughput.total_tokens_per_s", 1),
    ("Throughput", "Goodput requests/s", "goodput.requests_per_s", 1),
    ("Tokens", "Prompt tokens", "tokens.prompt", 1),
    ("Tokens", "Completion tokens", "tokens.completion", 1),
    ("Tokens", "Avg completion tokens/request", "tokens.avg_completion_per_request", 1),
    *(
        ("Latency (ms)", f"{label} {stat}", f"latency.{key}.{stat}", 1000)
        for key, label in LATENCY_METRICS
        for stat in ("mean", "p50", "p90", "p99", "max")
    ),
    ("Client", "Read lag p99 (ms)", "client.read_lag_s.p99", 1000),
)


def _get(document: Mapping[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def compare_rows(documents: Sequence[Mapping[str, Any]]) -> list[CompareRow]:
    """The summary table's rows for one or two results documents (delta = second − first)."""
    rows = []
    for group, label, path, scale in _ROWS:
        values = tuple(_number(_get(doc, path)) for doc in documents)
        delta = None
        if len(values) == 2 and values[0] is not None and values[1] is not None:
            delta = values[1] - values[0]
        rows.append(CompareRow(group, label, path, values, scale, delta))
    return rows


def latency_cdf_points(document: Mapping[str, Any]) -> dict[str, list[list[float]]]:
    """CDF points ``[latency_ms, cumulative share]`` per latency key.

    From the document's ``latency_cdf`` (one point per histogram bucket) when it has one for the key;
    a file written before it gives the quantiles it holds (p50, p90, p99 and the max as 1.0) instead
    (``cdf_from_histograms`` says which). A latency with no sample gives an empty list.
    """
    latency = document.get("latency") or {}
    histograms = document.get("latency_cdf") or {}
    points: dict[str, list[list[float]]] = {}
    for key in _CDF_METRICS:
        if isinstance(histograms.get(key), list):
            points[key] = [[value * 1000.0, share] for value, share in histograms[key]]
            continue
        stats = latency.get(key) or {}
        found = [(_number(stats.get(name)), share) for name, share in _CDF_QUANTILES]
        points[key] = [[value * 1000.0, share] for value, share in found if value is not None and stats.get("count")]
    return points


def cdf_from_histograms(document: Mapping[str, Any]) -> bool:
    """True when the document's distributions come from its histograms (``latency_cdf``), not four quantiles."""
    return isinstance(document.get("latency_cdf"), Mapping)


def _total_rows(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The run-total time-series rows (endpoint and model null), in time order."""
    rows = document.get("timeseries") or []
    total = [row for row in rows if isinstance(row, Mapping) and row.get("endpoint") is None]
    return sorted(total, key=lambda row: _number(row.get("t")) or 0.0)


def chart_rows(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The total rows the time-series charts draw, each marked ``partial`` (``llmload.exporters.chart_rows``).

    A partial row (the last interval, cut at the stop) marked ``rate_left_out`` is left out of the rate
    charts (``RATE_COLUMNS``).
    """
    rows = _total_rows(document)
    return [with_turn_columns(row) for row in mark_partial(rows, interval_of(document, rows))]


def abort_on_lines(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's ``--abort-on`` limits on charted columns (``web_charts.threshold_lines``), from ``run.options``.

    An expression this llmload cannot read (a file from another release) is left out.
    """
    thresholds = []
    for text in _get(document, "run.options.abort_on") or []:
        try:
            thresholds.append(parse_threshold(str(text)))
        except ConfigError:
            continue
    return threshold_lines(thresholds)


def server_charts(documents: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``SERVER_CHARTS`` that some document's total rows have server values for, ready for the template."""
    rows = [row for doc in documents for row in _total_rows(doc)]
    shown = []
    for chart_id, title, fields, scale in SERVER_CHARTS:
        server_fields = [name for name, _ in fields if name.startswith("server_")]
        if any(_number(row.get(name)) is not None for row in rows for name in server_fields):
            shown.append(
                {
                    "id": chart_id,
                    "title": title,
                    "fields": ",".join(name for name, _ in fields),
                    "labels": ",".join(label for _, label in fields),
                    "scale": repr(scale),
                }
            )
    return shown


def _run_label(document: Mapping[str, Any], index: int, count: int, names: Sequence[str] | None) -> str:
    if names:
        return names[index]
    run_id = _get(document, "run.run_id") or "run"
    return f"{'AB'[index]}: {run_id}" if count == 2 else str(run_id)


def _started(document: Mapping[str, Any]) -> str:
    started = _number(_get(document, "run.started_at_unix"))
    if not started:
        return "n/a"
    return datetime.datetime.fromtimestamp(started, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _warnings(document: Mapping[str, Any]) -> list[str]:
    """The console summary's warnings and notes (lost workers, saturation, open-loop shortfall, tokens)."""
    lines = [line for line in summary_lines(dict(document)) if line.startswith(("WARNING", "NOTE"))]
    if left := left_out_of_latency(document):
        lines.append(
            f"NOTE: latency (table and distributions) is over the generation requests "
            f"({', '.join(document['latency_endpoints'])}); {', '.join(left)}: see the per-endpoint table"
        )
    if document.get("lost_workers"):
        lines.append("Lost workers: " + ", ".join(map(str, document["lost_workers"])))
    for note in _get(document, "server.notes") or []:
        lines.append(f"Server metrics: {note}")
    return lines


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Key paths and JSON texts of the leaves of ``value`` (the configuration table)."""
    if isinstance(value, Mapping) and value:
        return [pair for key, item in value.items() for pair in _flatten(item, f"{prefix}.{key}" if prefix else key)]
    return [(prefix, json.dumps(value))]


def _config_rows(documents: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str], bool]]:
    """Configuration table: each ``run`` key (options flattened) with its value per run and whether they differ."""
    per_run = []
    for doc in documents:
        run = dict(doc.get("run") or {})
        options = run.pop("options", {}) or {}
        per_run.append(dict(_flatten(run) + _flatten(options, "options")))
    keys = list(dict.fromkeys(key for flat in per_run for key in flat))
    rows = []
    for key in keys:
        values = [flat.get(key, "(absent)") for flat in per_run]
        rows.append((key, values, len(set(values)) > 1))
    return rows


def _format(value: float | None, scale: float = 1.0, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, int) and scale == 1:
        return f"{value:+,d}" if signed else f"{value:,d}"
    shown = value * scale
    digits = 2 if abs(shown) < 1000 else 0
    return f"{shown:+,.{digits}f}" if signed else f"{shown:,.{digits}f}"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("llmload.exporters", "templates"),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _format
    env.filters["repr"] = repr
    return env


def _asset(*parts: str) -> str:
    """A script shipped in the package, to inline in a ``<script>`` element."""
    text = resources.files("llmload").joinpath(*parts).read_text(encoding="utf-8")
    if "</script" in text.lower():
        raise ReportError(f"{'/'.join(parts)} contains '</script' and cannot be inlined; reinstall llmload")
    return text


def render_report(documents: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None) -> str:
    """The HTML report of one results document, or of two side by side (``names`` label the runs).

    Raises:
        ReportError: not one or two documents, or not one name per document.
    """
    if len(documents) not in (1, 2):
        raise ReportError(f"the report shows one run or compares two; got {len(documents)} results documents")
    if names is not None and len(names) != len(documents):
        raise ReportError(f"{len(names)} names for {len(documents)} results documents; give one name per document")
    runs: list[dict[str, Any]] = []
    for index, doc in enumerate(documents):
        runs.append(
            {
                "label": _run_label(doc, index, len(documents), names),
                "doc": doc,
                "started": _started(doc),
                "warnings": _warnings(doc),
                "ttft_split": ttft_split_row(doc["server"]) if doc.get("server") else None,
            }
        )
    chart_data: dict[str, Any] = {
        "runs": [
            {
                "label": run["label"],
                "cdf": latency_cdf_points(run["doc"]),
                "timeseries": chart_rows(run["doc"]),
                "thresholds": abort_on_lines(run["doc"]),
            }
            for run in runs
        ],
        "rate_columns": list(RATE_COLUMNS),
    }
    template = _environment().get_template("report.html.j2")
    return template.render(
        runs=runs,
        compare=len(runs) == 2,
        rows=compare_rows(documents),
        config_rows=_config_rows(documents),
        latency_metrics=LATENCY_METRICS,
        chart_data=chart_data,
        has_timeseries=any(run["timeseries"] for run in chart_data["runs"]),
        cdf_from_histograms=all(cdf_from_histograms(doc) for doc in documents),
        server_charts=server_charts(documents),
        load_charts=load_charts(row for run in chart_data["runs"] for row in run["timeseries"]),
        chart_js=_asset(*CHART_LIBRARY),
        report_js=_asset("exporters", "templates", "report.js"),
    )


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a results JSON file (``--results-json``) for the report.

    Raises:
        ReportError: the file cannot be read, is not JSON, or is not a results document.
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"cannot read {str(path)!r}: {exc.strerror}; pass a file written by --results-json") from exc
    except ValueError as exc:
        raise ReportError(f"{str(path)!r} is not JSON ({exc}); pass a file written by --results-json") from exc
    if isinstance(document, dict) and "steps" in document and "requests" not in document:
        raise ReportError(
            f"{str(path)!r} is an llmload sweep file; pass it alone for the sweep view "
            "(llmload report SWEEP.json -o sweep.html), or one of its step files "
            "(STEM.users-N.json or STEM.rate-R.json beside it) to compare"
        )
    if not isinstance(document, dict) or not {"schema_version", "requests", "latency"} <= document.keys():
        raise ReportError(
            f"{str(path)!r} is not an llmload results document (no schema_version/requests/latency keys); "
            "pass a file written by --results-json"
        )
    return document


def write_html_report(
    path: str | os.PathLike[str], documents: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None
) -> int:
    """Write ``render_report(documents, names)`` to ``path`` atomically; returns its size in bytes.

    Raises:
        OSError: the directory cannot be created or written.
        ReportError: as ``render_report``.
    """
    return write_page(path, render_report(documents, names))


def write_page(path: str | os.PathLike[str], page: str) -> int:
    """Write an HTML page to ``path`` atomically (readable by all); returns its size in bytes.

    Raises:
        OSError: the directory cannot be created or written.
    """
    text = page.encode("utf-8")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(text)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return len(text)
