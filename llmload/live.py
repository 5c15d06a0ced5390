"""The master's live view: merged statistics plus the sliding window that ``/metrics`` reads.

Prometheus exporter (``--prometheus-port``, not 0): the master (or the single
process) serves ``/metrics`` from ``init`` until the end of the grace period
after ``quit``. Each worker also sends its delta every 0.5 s as
``llmload_live`` (a ``WorkerReport``, the same as its regular report), so the
master's counters and live window lag by at most half a second instead of
Locust's 3 s report interval; every record still travels in exactly one delta.
The master merges those reports in ``llmload.cluster`` and hands each delta to
``feed``; a single process ticks its own recent records into the window.
"""

from __future__ import annotations

from locust.env import Environment
from locust.exception import RPCError, RPCSendError
from locust.runners import MasterRunner, WorkerRunner

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock

from llmload.credentials import public_url
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.sections import client_saturated
from llmload.exporters.window import RunView, SlidingWindow
from llmload.runtime import ExportState, Runtime
from llmload.stats import LLMStats
from llmload.version import __version__
from llmload.wire import WorkerReport, report_to_wire

__all__ = ["feed", "on_quit", "on_test_start", "on_test_stop", "start_exporter"]

log = logging.getLogger("llmload")


_LIVE_REPORT_INTERVAL_S = 0.5

_STOP_LIVE_TIMEOUT_S = 5.0


def start_exporter(environment: Environment, runtime: Runtime) -> None:
    """Master or single process: serve /metrics now, before any load (no-op with --prometheus-port 0).

    Raises:
        ConfigError: the port cannot be bound (the caller stops the run).
    """
    config = runtime.config
    if config.prometheus_port == 0:
        return
    exporter = PrometheusExporter(functools.partial(_run_view, environment))
    port = exporter.start(config.prometheus_port, config.prometheus_host)
    url = f"http://{config.prometheus_host or '0.0.0.0'}:{port}/metrics"
    runtime.export = ExportState(exporter=exporter, window=SlidingWindow(), grace_s=config.prometheus_grace_s, url=url)
    log.info("llmload: Prometheus metrics at %s", url)


def _run_view(environment: Environment) -> RunView:
    """What one scrape reports (called by the exporter at scrape time; does not yield)."""
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    export = runtime.export
    stats = runtime.stats
    in_flight = runtime.in_flight
    workers = 0
    if isinstance(runner, MasterRunner):
        workers = runner.worker_count
        if export is not None:
            in_flight = sum(export.worker_in_flight.values())
    if export is not None and export.final_stats is not None:
        stats = export.final_stats
    return RunView(
        stats=stats,
        window=export.window.view() if export is not None else None,
        users=int(runner.user_count) if runner is not None else 0,
        in_flight_requests=in_flight,
        workers=workers,
        run_id=runtime.run_id,
        host=public_url(environment.host or ""),
        model=runtime.model or "",
        version=__version__,
        started_at_unix=runtime.started_at_unix or None,
        client_saturated=client_saturated(
            max(runtime.cpu_saturated_s, runtime.cpu.saturated_s if runtime.cpu else 0.0), stats.total().read_lag_s
        ),
        lost_workers=len(runtime.lost_workers),
    )


def feed(export: ExportState, client_id: str, delta: LLMStats, in_flight: int) -> None:
    """Master: add one worker's merged delta to the live window and note its in-flight requests."""
    export.window.add(delta, client_id)
    export.worker_in_flight[client_id] = in_flight


def on_test_start(environment: Environment, *, take_report: Callable[[Runtime], WorkerReport], **_kw: Any) -> None:
    """Start the live feed: a worker's 0.5 s reports (``take_report`` builds each), or the local window ticks."""
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    _stop_live(runtime)
    if isinstance(runner, WorkerRunner):
        if runtime.config.prometheus_port and runtime.run_id:
            runtime.live_task = gevent.spawn(_send_live_reports, runner, runtime, take_report)
        return
    export = runtime.export
    if export is None:
        return
    export.window.reset()
    export.worker_in_flight.clear()
    export.final_stats = None
    export.exporter.mark_running()
    if not isinstance(runner, MasterRunner):
        runtime.window_delta = LLMStats.empty()
        runtime.live_task = gevent.spawn(_tick_window_forever, runtime, export)


def _send_live_reports(runner: WorkerRunner, runtime: Runtime, take_report: Callable[[Runtime], WorkerReport]) -> None:
    """Worker: ship the delta every 0.5 s (see the module docstring).

    Sends are aligned to the wall clock (every whole and half second), so every
    worker's counters reach the master at the same offset in each second and a
    scrape sees a constant lag, which ``rate()`` cancels out.
    """
    while True:
        gevent.sleep(_LIVE_REPORT_INTERVAL_S - time.time() % _LIVE_REPORT_INTERVAL_S)
        report = take_report(runtime)
        try:
            # Non-blocking send: nothing runs between taking the delta and handing it to zmq.
            runner.send_message("llmload_live", report_to_wire(report))
        except (RPCError, RPCSendError) as exc:
            runtime.stats.merge_in(report.stats)  # keep it for the next report
            log.warning("llmload: live report to the master failed (%s); it will be sent later", exc)


def _tick_window_forever(runtime: Runtime, export: ExportState) -> None:
    """Single process: hand the recent records to the live window every 0.5 s."""
    while True:
        gevent.sleep(_LIVE_REPORT_INTERVAL_S)
        _tick_window(runtime, export)


def _tick_window(runtime: Runtime, export: ExportState) -> None:
    delta = runtime.window_delta
    if delta is not None:
        runtime.window_delta = LLMStats.empty()
        export.window.add(delta, "local")


def _stop_live(runtime: Runtime) -> None:
    task, runtime.live_task = runtime.live_task, None
    if task is not None:
        task.kill(block=True, timeout=_STOP_LIVE_TIMEOUT_S)


def on_test_stop(environment: Environment, **_kw: Any) -> None:
    """Freeze what scrapes report to the statistics the results were just built from."""
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if runtime is None:
        return
    _stop_live(runtime)
    export = runtime.export
    if export is None or isinstance(environment.runner, WorkerRunner):
        return
    _tick_window(runtime, export)
    runtime.window_delta = None
    export.worker_in_flight.clear()
    if export.final_stats is None:
        export.final_stats = LLMStats.empty().merge(runtime.stats)
    export.exporter.mark_final()


def on_quit(environment: Environment, **_kw: Any) -> None:
    """Keep /metrics up until one scrape has read the final totals (at most the grace period).

    Runs in ``quit``, the last event before Locust's ``sys.exit``.
    """
    runtime: Runtime | None = getattr(environment, "llmload", None)
    export = runtime.export if runtime is not None else None
    if export is None:
        return
    exporter = export.exporter
    if exporter.scrapes and export.grace_s > 0:
        log.info("llmload: waiting up to %g s for a Prometheus scrape of the final totals", export.grace_s)
        if not exporter.wait_for_final_scrape(export.grace_s):
            log.warning("llmload: no scrape of the final totals within --prometheus-grace %g s", export.grace_s)
    exporter.stop()
