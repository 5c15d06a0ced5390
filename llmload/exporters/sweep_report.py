"""The self-contained HTML view of a sweep file (``llmload sweep``'s combined results): load against results.

``render_sweep_report(document)`` returns one page that opens offline (Chart.js
and the page's script inlined, every value escaped, as ``llmload.exporters.html``):
output tok/s and req/s, TTFT p50/p99 and ITL p50/p99 against the step's load, the
knee (``llmload.sweep.find_knee``) marked on every chart and in the table, and
one table row per step with its target and achieved rate. The x axis is the
step's users for a users sweep; for a rate sweep, the achieved send rate
(an ``inf`` step has no target to place, and a step the client limited sent
less than asked), the target being in the table. Steps the client limited
(``client_limited``) are drawn apart and were left out of the knee.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmload.exporters.html import CHART_LIBRARY, ReportError, _asset, _environment, _get, _number, write_page

__all__ = [
    "SWEEP_CHARTS",
    "is_sweep_document",
    "load_sweep",
    "render_sweep_report",
    "sweep_points",
    "write_sweep_report",
]

SWEEP_CHARTS: tuple[tuple[str, str, tuple[tuple[str, str], ...], float], ...] = (
    ("sweep-tokens", "Output tok/s", (("throughput.output_tokens_per_s", "output tok/s"),), 1),
    ("sweep-requests", "Requests/s (succeeded)", (("throughput.requests_per_s", "req/s"),), 1),
    (
        "sweep-ttft",
        "TTFT (ms)",
        (("latency.ttft_s.p50", "TTFT p50 (ms)"), ("latency.ttft_s.p99", "TTFT p99 (ms)")),
        1000,
    ),
    ("sweep-itl", "ITL (ms)", (("latency.itl_s.p50", "ITL p50 (ms)"), ("latency.itl_s.p99", "ITL p99 (ms)")), 1000),
)
"""(canvas id, title, (results key path, legend label) pairs, display scale) of the sweep charts."""

_TABLE: tuple[tuple[str, str, float], ...] = (
    ("Target req/s", "load.target_rate_per_s", 1),
    ("Achieved req/s", "load.achieved_rate_per_s", 1),
    ("Succeeded", "requests.succeeded", 1),
    ("Failed", "requests.failed", 1),
    ("Req/s", "throughput.requests_per_s", 1),
    ("Output tok/s", "throughput.output_tokens_per_s", 1),
    ("TTFT p50 (ms)", "latency.ttft_s.p50", 1000),
    ("TTFT p99 (ms)", "latency.ttft_s.p99", 1000),
    ("ITL p50 (ms)", "latency.itl_s.p50", 1000),
    ("ITL p99 (ms)", "latency.itl_s.p99", 1000),
    ("E2E p99 (ms)", "latency.e2e_s.p99", 1000),
)


def is_sweep_document(document: object) -> bool:
    """True for a combined sweep file (``sweep``, ``steps``), not a single run's results."""
    return isinstance(document, Mapping) and "steps" in document and "sweep" in document and "requests" not in document


def _x(kind: str, section: Mapping[str, Any]) -> float | None:
    if kind == "users":
        step = _number(section.get("step"))
        return None if step is None else float(step)
    return _number(_get(section, "load.achieved_rate_per_s"))


def sweep_points(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One point per step: ``{"step", "x", "client_limited", "knee", "values": {path: value}}``.

    ``x`` is the users (users sweep) or the achieved req/s (rate sweep); None when unknown. ``values``
    hold every ``SWEEP_CHARTS`` path as stored (seconds for latencies); None = unknown.
    """
    kind = str(document.get("sweep"))
    knee = document.get("knee") or {}
    paths = [path for _, _, fields, _ in SWEEP_CHARTS for path, _ in fields]
    points = []
    for section in document.get("steps") or []:
        points.append(
            {
                "step": section.get("step"),
                "x": _x(kind, section),
                "client_limited": bool(section.get("client_limited")),
                "knee": bool(knee) and section.get("step") == knee.get("step"),
                "values": {path: _number(_get(section, path)) for path in paths},
            }
        )
    return points


def _step_text(step: Any) -> str:
    if isinstance(step, int | float) and not isinstance(step, bool) and not math.isinf(step):
        return f"{step:g}"
    return str(step)


def render_sweep_report(document: Mapping[str, Any]) -> str:
    """The HTML page of a sweep file.

    Raises:
        ReportError: the document is not a sweep file, or has no step.
    """
    if not is_sweep_document(document) or not document.get("steps"):
        raise ReportError("not an llmload sweep file with steps (keys sweep, steps); pass the file llmload sweep wrote")
    kind = str(document["sweep"])
    steps = list(document["steps"])
    rows = [
        {
            "step": _step_text(section.get("step")),
            "client_limited": bool(section.get("client_limited")),
            "knee": point["knee"],
            "cells": [(_number(_get(section, path)), scale) for _, path, scale in _TABLE],
            "verdict": section.get("verdict") or "",
        }
        for section, point in zip(steps, sweep_points(document), strict=True)
    ]
    charts = [
        {
            "id": chart_id,
            "title": title,
            "fields": [p for p, _ in fields],
            "labels": [lab for _, lab in fields],
            "scale": scale,
        }
        for chart_id, title, fields, scale in SWEEP_CHARTS
    ]
    x_title = "users (closed loop)" if kind == "users" else "achieved req/s (sent; the target is in the table)"
    chart_data = {"points": sweep_points(document), "charts": charts, "x_title": x_title, "log_x": kind == "users"}
    return (
        _environment()
        .get_template("sweep.html.j2")
        .render(
            kind=kind,
            knee=document.get("knee"),
            rows=rows,
            columns=[label for label, _, _ in _TABLE],
            charts=charts,
            chart_data=chart_data,
            chart_js=_asset(*CHART_LIBRARY),
            sweep_js=_asset("exporters", "templates", "sweep.js"),
        )
    )


def load_sweep(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The sweep file at ``path``, or None when it is not one (unreadable, not JSON: ``load_results`` says why)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if is_sweep_document(document) else None


def write_sweep_report(path: str | os.PathLike[str], document: Mapping[str, Any]) -> int:
    """Write ``render_sweep_report(document)`` to ``path`` atomically; returns its size in bytes.

    Raises:
        OSError: the directory cannot be created or written.
        ReportError: as ``render_sweep_report``.
    """
    return write_page(path, render_sweep_report(document))
