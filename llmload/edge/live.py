"""The master's live view: merged statistics plus the sliding window that ``/metrics`` reads.

Prometheus exporter (``--prometheus-port``, not 0): the master (or the single
process) serves ``/metrics`` from ``init`` until the end of the grace period
after ``quit``. Each worker also sends its delta every 0.5 s as
``llmload_live`` (a ``WorkerReport``, the same as its regular report), so the
master's counters and live window lag by at most half a second instead of
Locust's 3 s report interval; every record still travels in exactly one delta.
The master merges those reports in ``llmload.edge.master`` and hands each delta to
``feed``; a single process ticks its own recent records into the window.
The run's time series is ``llmload.edge.timeline``'s.
"""

from __future__ import annotations

from locust.env import Environment
from locust.exception import RPCError, RPCSendError
from locust.runners import MasterRunner, WorkerRunner

import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock

from llmload.aggregate.stats import LLMStats
from llmload.edge.runtime import ExportState, Runtime, runtime_of
from llmload.edge.worker import take_report
from llmload.errors import ConfigError
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.sections import client_saturated
from llmload.exporters.window import RunView, SlidingWindow, live_send_delay_s, saturation_read_lag
from llmload.run.wire_reports import report_to_wire
from llmload.settings.credentials import public_url
from llmload.settings.options import default
from llmload.version import __version__

__all__ = [
    "LIVE_REPORT_INTERVAL_S",
    "exporter_url_host",
    "feed",
    "on_quit",
    "on_test_start",
    "on_test_stop",
    "start_exporter",
]

log = logging.getLogger("llmload")


LIVE_REPORT_INTERVAL_S = 0.5
"""A worker's live reports and a single process's window ticks: one per this many seconds."""

_STOP_LIVE_TIMEOUT_S = 5.0


def start_exporter(environment: Environment, runtime: Runtime) -> None:
    """Master or single process: serve /metrics now, before any load (no-op with --prometheus-port 0).

    Raises:
        ConfigError: the port cannot be bound (the caller stops the run).
    """
    config = runtime.process.config
    if config.prometheus_port == 0:
        return
    # A scrape yields to the event loop between its large families (and between the run's totals and
    # the live window): heartbeat replies and reports never wait behind a whole scrape (about 10 ms of
    # formatting), only behind one part of it.
    pause = functools.partial(gevent.sleep, 0)
    exporter = PrometheusExporter(functools.partial(_run_view, environment, runtime, pause), pause=pause)
    try:
        port = exporter.start(config.prometheus_port, config.prometheus_host)
    except ConfigError as exc:
        if config.prometheus_port != default("--prometheus-port"):
            raise  # a port asked for: the run stops, naming it
        log.warning("llmload: %s This run serves no /metrics.", exc)  # the default port: another run has it
        return
    url = f"http://{exporter_url_host(config.prometheus_host)}:{port}/metrics"
    runtime.process.export = ExportState(
        exporter=exporter, window=SlidingWindow(), grace_s=config.prometheus_grace_s, url=url
    )
    log.info("llmload: Prometheus metrics at %s", url)


def exporter_url_host(host: str) -> str:
    """The host to show in the exporter's URL: the listen address, or this machine's name for all interfaces."""
    return socket.gethostname() if host in ("", "0.0.0.0") else host


def _run_view(environment: Environment, runtime: Runtime, pause: Callable[[], None] | None = None) -> RunView:
    """What one scrape reports (called by the exporter at scrape time); ``pause`` runs between totals and window."""
    runner = environment.runner
    export = runtime.process.export
    stats = runtime.run.totals()
    if pause is not None:
        pause()
    in_flight = runtime.run.in_flight
    workers = 0
    if isinstance(runner, MasterRunner):
        workers = runner.worker_count
        if export is not None:
            in_flight = runtime.workers_in_flight()
    if export is not None and export.final_stats is not None:
        stats = export.final_stats
    window = export.window.view() if export is not None else None
    ended = export is None or export.final_stats is not None
    lags = saturation_read_lag(stats, window, ended=ended)
    request_lags = saturation_read_lag(stats, window, ended=ended, name="request_lag_s")
    return RunView(
        stats=stats,
        window=window,
        users=int(runner.user_count) if runner is not None else 0,
        in_flight_requests=in_flight,
        workers=workers,
        run_id=runtime.run.run_id,
        host=public_url(environment.host or ""),
        model=runtime.process.model or "",
        version=__version__,
        started_at_unix=runtime.run.started_at_unix or None,
        client_saturated=client_saturated(
            max(runtime.run.cpu_saturated_s, runtime.process.cpu.saturated_s if runtime.process.cpu else 0.0),
            lags,
            request_lags,
        ),
        lost_workers=len(runtime.master.lost_workers),
    )


def feed(export: ExportState, client_id: str, delta: LLMStats) -> None:
    """Master: add one worker's merged delta to the live window."""
    export.window.add(delta, client_id)


def on_test_start(environment: Environment, **_kw: Any) -> None:
    """Start the live feed: a worker's 0.5 s reports (``llmload.edge.worker.take_report``) or local window ticks."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    runner = environment.runner
    _stop_live(runtime)
    if isinstance(runner, WorkerRunner):
        if runtime.process.config.prometheus_port and runtime.run.run_id:
            runtime.process.live_task = gevent.spawn(_send_live_reports, runner, runtime)
        return
    export = runtime.process.export
    if export is None:
        return
    export.window.reset()
    export.final_stats = None
    export.exporter.mark_running()
    if not isinstance(runner, MasterRunner):
        runtime.run.window_delta = LLMStats.empty()
        runtime.process.live_task = gevent.spawn(_tick_window_forever, runtime, export)


def _send_live_reports(runner: WorkerRunner, runtime: Runtime) -> None:
    """Worker: ship the delta every 0.5 s (see the module docstring).

    Sends keep a fixed offset in each half second of the wall clock, its own
    per worker index (``live_send_offset_s``): a scrape sees a constant lag,
    which ``rate()`` cancels out, and the master gets its workers' reports spread
    over the half second, not all at once.
    """
    worker_index = int(runner.worker_index)
    while True:
        gevent.sleep(live_send_delay_s(time.time(), worker_index, LIVE_REPORT_INTERVAL_S))
        report = take_report(runtime)
        try:
            # Non-blocking send: nothing runs between taking the delta and handing it to zmq.
            runner.send_message("llmload_live", report_to_wire(report))
        except (RPCError, RPCSendError) as exc:
            runtime.run.series.merge_in(report.series)  # keep it for the next report (its stats come from it)
            log.warning("llmload: live report to the master failed (%s); it will be sent later", exc)


def _tick_window_forever(runtime: Runtime, export: ExportState) -> None:
    """Single process: hand the recent records to the live window every 0.5 s."""
    while True:
        gevent.sleep(LIVE_REPORT_INTERVAL_S)
        _tick_window(runtime, export)


def _tick_window(runtime: Runtime, export: ExportState) -> None:
    delta = runtime.run.window_delta
    if delta is not None:
        runtime.run.window_delta = LLMStats.empty()
        export.window.add(delta, "local")


def _stop_live(runtime: Runtime) -> None:
    task, runtime.process.live_task = runtime.process.live_task, None
    if task is not None:
        task.kill(block=True, timeout=_STOP_LIVE_TIMEOUT_S)


def on_test_stop(environment: Environment, **_kw: Any) -> None:
    """Freeze what scrapes report to the statistics the results were just built from."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    _stop_live(runtime)
    export = runtime.process.export
    if export is None or isinstance(environment.runner, WorkerRunner):
        return
    _tick_window(runtime, export)
    runtime.run.window_delta = None
    if export.final_stats is None:
        export.final_stats = LLMStats.empty().merge(runtime.run.totals())
    export.exporter.mark_final()


def on_quit(environment: Environment, **_kw: Any) -> None:
    """Keep /metrics up until one scrape has read the final totals (at most the grace period).

    Runs in ``quit``, the last event before Locust's ``sys.exit``.
    """
    runtime = runtime_of(environment)
    export = runtime.process.export if runtime is not None else None
    if export is None:
        return
    exporter = export.exporter
    wait_s = exporter.final_scrape_wait_s(export.grace_s)
    if wait_s > 0:
        log.info("llmload: waiting up to %.3g s for a Prometheus scrape of the final totals", wait_s)
        if not exporter.wait_for_final_scrape(wait_s):
            log.warning(
                "llmload: no scrape of the final totals within %.3g s (--prometheus-grace %g s)", wait_s, export.grace_s
            )
    elif exporter.scrapes and export.grace_s > 0:
        log.info(
            "llmload: /metrics was scraped %d time(s), but no scraper is scraping regularly now: not waiting for it",
            exporter.scrapes,
        )
    exporter.stop()
