"""The master's live view: merged statistics plus the sliding window that ``/metrics`` reads.

Prometheus exporter (``--prometheus-port``, not 0): the master (or the single
process) serves ``/metrics`` from ``init`` until the end of the grace period
after ``quit``. Each worker also sends its delta every 0.5 s as
``llmload_live`` (a ``WorkerReport``, the same as its regular report), so the
master's counters and live window lag by at most half a second instead of
Locust's 3 s report interval; every record still travels in exactly one delta.
The master merges those reports in ``llmload.edge.master`` and hands each delta to
``feed``; a single process ticks its own recent records into the window.

Time series (``llmload.exporters.timeseries``): the master (or the single
process) holds the run's ``IntervalSeries`` (``RunState.series``, merged from
the workers' reports) and ticks every half second: it samples the gauges
(in-flight requests, users, workers) and, once an interval is complete,
appends its rows to ``--timeseries``, logs one progress line and checks the
``--abort-on`` thresholds on them (``llmload.settings.thresholds``). The
server-metrics scraper (``llmload.net.scrape``, its own greenlet)
reads the server at each interval's end and hands the interval's server
columns to the timeline; a row waits for them at most the read's bound
(plus a quarter second) past its grace. An interval
is complete ``grace_s`` after its end: at once in a single process (requests
are counted as they finish); on a master, after the workers' report interval
plus a second (0.5 s live reports with the Prometheus exporter, else
Locust's 3 s reports). At the stop, ``finish_timeline`` gives every row for
the results' ``timeseries``.
"""

from __future__ import annotations

from locust.env import Environment
from locust.exception import RPCError, RPCSendError
from locust.runners import WORKER_REPORT_INTERVAL, MasterRunner, WorkerRunner

import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock

from llmload.aggregate.series import interval_index
from llmload.aggregate.stats import LLMStats
from llmload.edge.runtime import ExportState, Runtime, TimelineState, runtime_of
from llmload.edge.stop import finish_run
from llmload.edge.worker import take_report
from llmload.errors import ConfigError
from llmload.exporters.drift import RSS_GAUGE, drift_section
from llmload.exporters.progress import progress_line
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.sections import client_saturated
from llmload.exporters.timeline import Timeline
from llmload.exporters.timeseries import Row
from llmload.exporters.timeseries_files import TimeseriesLog
from llmload.exporters.window import RunView, SlidingWindow, live_send_delay_s, saturation_read_lag
from llmload.run.wire import report_to_wire
from llmload.servermetrics import SERVER_COLUMNS
from llmload.settings.credentials import public_url
from llmload.settings.options import default
from llmload.settings.thresholds import ThresholdWatch
from llmload.version import __version__

__all__ = [
    "exporter_url_host",
    "feed",
    "finish_timeline",
    "on_quit",
    "on_test_start",
    "on_test_stop",
    "run_elapsed_s",
    "start_exporter",
    "start_timeline",
]

log = logging.getLogger("llmload")


_LIVE_REPORT_INTERVAL_S = 0.5

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
    lags = saturation_read_lag(stats, window, ended=export is None or export.final_stats is not None)
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
            max(runtime.run.cpu_saturated_s, runtime.process.cpu.saturated_s if runtime.process.cpu else 0.0), lags
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
        gevent.sleep(live_send_delay_s(time.time(), worker_index, _LIVE_REPORT_INTERVAL_S))
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
        gevent.sleep(_LIVE_REPORT_INTERVAL_S)
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


# ── time series ──────────────────────────────────────────────────────────
_TIMELINE_TICK_S = 0.5
_LOCAL_GRACE_S = 0.1  # a single process counts each request as it finishes
_REPORT_GRACE_EXTRA_S = 1.0  # beyond the workers' report interval
_SCRAPE_WAIT_EXTRA_S = 0.25  # beyond a server read's bound
_SCRAPE_PARSE_HOLD_S = 5.0  # an answered read whose page is still being parsed: its row waits at most this longer


def start_timeline(environment: Environment, **_kw: Any) -> None:
    """Master or single process, at each run start: a new timeline, ``--timeseries`` file and tick greenlet.

    A ``--timeseries`` file that cannot be opened is logged as an error; the
    run and the results' ``timeseries`` go on without it. An ``--abort-on``
    threshold that fires ends the run the normal way (``llmload.edge.stop.finish_run``).
    """
    runtime = runtime_of(environment)
    if runtime is None:
        return
    runner = environment.runner
    if isinstance(runner, WorkerRunner) or not runtime.run.run_id:
        return
    _stop_timeline(runtime)
    config = runtime.process.config
    if isinstance(runner, MasterRunner):
        report_s = _LIVE_REPORT_INTERVAL_S if config.prometheus_port else WORKER_REPORT_INTERVAL
        grace_s = report_s + _REPORT_GRACE_EXTRA_S
    else:
        grace_s = _LOCAL_GRACE_S
    scraper = runtime.process.server_scraper
    # a row waits for its server read (bounded by the read's timeout, then by the parse of its page),
    # never the other way round
    extra_wait_s = 0.0 if scraper is None else scraper.periodic_timeout_s * 1.5 + _SCRAPE_WAIT_EXTRA_S
    table = Timeline(
        config.timeseries_interval_s,
        grace_s,
        SERVER_COLUMNS,
        extra_wait_s,
        extra_pending=None if scraper is None else scraper.reading,
        extra_hold_s=_SCRAPE_PARSE_HOLD_S,
    )
    if scraper is not None:
        scraper.follow(table.add_extra, runtime.run.run_started_s)
    if runtime.timeline.log is not None:
        runtime.timeline.log.close()
    timeseries_log = None
    if config.timeseries:
        try:
            timeseries_log = TimeseriesLog(config.timeseries)
        except OSError as exc:
            log.error("llmload: --timeseries %s cannot be written (%s); pass a writable path", config.timeseries, exc)
    watch = ThresholdWatch(config.abort_on, config.timeseries_interval_s) if config.abort_on else None
    # a new timeline: every other field (rows, progress, the breach) starts at its default
    runtime.timeline = TimelineState(table=table, log=timeseries_log, watch=watch)
    runtime.timeline.task = gevent.spawn(_tick_timeline_forever, environment, runtime)


def _gauges(environment: Environment, runtime: Runtime) -> dict[str, int | None]:
    """The gauges of one sample; further gauges (e.g. server metrics) join here, named in ``Timeline.extra_columns``.

    ``client_rss_bytes``: this process's resident memory, or on a master the
    largest of its workers' (as of their latest reports; null before one).
    """
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        rss = runtime.master.worker_rss_bytes.values()
        return {
            "in_flight_requests": sum(runtime.master.worker_in_flight.values()),
            "users": int(runner.user_count),
            "workers": int(runner.worker_count),
            RSS_GAUGE: max(rss) if rss else None,
        }
    return {
        "in_flight_requests": runtime.run.in_flight,
        "users": int(runner.user_count) if runner is not None else 0,
        "workers": 0,
        RSS_GAUGE: runtime.process.rss_bytes(),
    }


def _tick_timeline_forever(environment: Environment, runtime: Runtime) -> None:
    """Sample the gauges (at least twice per interval, so each interval has a sample), write and check due rows."""
    timeline = runtime.timeline.table
    tick_s = min(_TIMELINE_TICK_S, timeline.interval_s / 2) if timeline is not None else _TIMELINE_TICK_S
    while timeline is not None:
        now_s = time.perf_counter() - runtime.run.run_started_s
        timeline.sample(now_s, _gauges(environment, runtime))
        rows = timeline.due_rows(runtime.run.series, now_s)
        _write(environment, runtime, rows)
        runtime.timeline.rows.extend(rows)
        _check_thresholds(environment, runtime, rows)
        gevent.sleep(tick_s)


def _check_thresholds(environment: Environment, runtime: Runtime, rows: list[Row]) -> None:
    """Feed completed rows to the ``--abort-on`` watch; the first breach stops the run (once)."""
    if runtime.timeline.watch is None or runtime.timeline.aborted is not None or not rows:
        return
    breach = runtime.timeline.watch.observe(rows)
    if breach is None:
        return
    runtime.timeline.aborted = breach
    log.warning(
        "llmload: --abort-on %r held from %.0f s to %.0f s of the run (values %s); stopping the run",
        breach.threshold,
        breach.from_s,
        breach.at_s,
        ", ".join(f"{v:.4g}" for v in breach.values[-5:]),
    )
    gevent.spawn(finish_run, environment)


def _write(environment: Environment, runtime: Runtime, rows: list[Row], *, progress_from_t: float = 0.0) -> None:
    """Append ``rows`` to ``--timeseries`` and log a progress line per new total row."""
    if runtime.timeline.log is not None:
        try:
            runtime.timeline.log.write(rows)
        except OSError as exc:
            log.error(
                "llmload: --timeseries %s: %s; no further rows are written there",
                runtime.process.config.timeseries,
                exc,
            )
            runtime.timeline.log.close()
            runtime.timeline.log = None
    run_time = getattr(environment.parsed_options, "run_time", None)
    for row in rows:
        if row["endpoint"] is not None or row["t"] < progress_from_t:
            continue
        runtime.timeline.progress_finished += row["succeeded"] + row["failed"]
        log.info(
            "%s",
            progress_line(
                row,
                elapsed_s=row["t"] + row["interval_s"],
                run_time_s=float(run_time) if isinstance(run_time, int | float) and run_time else None,
                finished=runtime.timeline.progress_finished,
                num_requests=runtime.process.config.num_requests,
                with_workers=isinstance(environment.runner, MasterRunner),
            ),
        )


def _stop_timeline(runtime: Runtime) -> None:
    task, runtime.timeline.task = runtime.timeline.task, None
    if task is not None:
        task.kill(block=True, timeout=_STOP_LIVE_TIMEOUT_S)


def run_elapsed_s(runtime: Runtime) -> float:
    """Seconds since this process's run start (the time series' clock)."""
    return time.perf_counter() - runtime.run.run_started_s


def finish_timeline(
    environment: Environment, runtime: Runtime, end_s: float | None = None
) -> tuple[list[Row], dict[str, Any] | None]:
    """At the stop (master or single process): write the last rows; return every row of the run and its drift.

    Intervals written before all their requests (or their server read) arrived
    are written again (the later line replaces the earlier one) and the log
    says how many. ``end_s``: the run's end on the time series' clock (default:
    now). The drift section (``llmload.exporters.drift``) is None when no timeline ran.
    """
    _stop_timeline(runtime)
    timeline = runtime.timeline.table
    if timeline is None:
        return [], None
    if end_s is None:
        end_s = run_elapsed_s(runtime)
    if interval_index(end_s, timeline.interval_s) not in timeline.gauges:  # the stop began a new interval
        timeline.sample(end_s, _gauges(environment, runtime))
    new_from_t = timeline.written_intervals * timeline.interval_s
    _write(environment, runtime, timeline.final_rows(runtime.run.series, end_s), progress_from_t=new_from_t)
    if timeline.late_intervals:
        log.warning(
            "llmload: %d time-series interval(s) received requests after their rows were written "
            "(a worker reported late); --timeseries has them again with the complete figures",
            timeline.late_intervals,
        )
    if timeline.late_extra_intervals:
        log.info(
            "llmload: %d time-series interval(s) got their server metrics after their rows were written; "
            "--timeseries has them again with the server columns",
            timeline.late_extra_intervals,
        )
    if runtime.timeline.log is not None:
        runtime.timeline.log.close()
        runtime.timeline.log = None
    drift = drift_section(runtime.run.series, timeline.interval_s, end_s, timeline.gauges)
    return timeline.rows(runtime.run.series, end_s), drift
