"""The run's time series as it is written: the timeline's ticks, ``--timeseries``, progress and ``--abort-on``.

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
the results' ``timeseries``. The table itself is ``llmload.exporters.timeline.Timeline``.
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import WORKER_REPORT_INTERVAL, MasterRunner, WorkerRunner

import logging
import time
from typing import Any

import gevent

from llmload.aggregate.series import interval_index
from llmload.edge.live import LIVE_REPORT_INTERVAL_S
from llmload.edge.runtime import Runtime, TimelineState, runtime_of
from llmload.edge.stop import finish_run
from llmload.exporters.drift import RSS_GAUGE, drift_section
from llmload.exporters.progress import progress_line
from llmload.exporters.timeline import Timeline
from llmload.exporters.timeseries import Row
from llmload.exporters.timeseries_files import TimeseriesLog
from llmload.servermetrics import SERVER_COLUMNS
from llmload.settings.thresholds import ThresholdWatch

__all__ = ["end_timeline", "finish_timeline", "run_elapsed_s", "start_timeline"]

log = logging.getLogger("llmload")

_TIMELINE_TICK_S = 0.5
_LOCAL_GRACE_S = 0.1  # a single process counts each request as it finishes
_REPORT_GRACE_EXTRA_S = 1.0  # beyond the workers' report interval
_SCRAPE_WAIT_EXTRA_S = 0.25  # beyond a server read's bound
_SCRAPE_PARSE_HOLD_S = 5.0  # an answered read whose page is still being parsed: its row waits at most this longer
_STOP_TIMELINE_TIMEOUT_S = 5.0


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
        report_s = LIVE_REPORT_INTERVAL_S if config.prometheus_port else WORKER_REPORT_INTERVAL
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
        end_s = runtime.timeline.end_s
        if end_s is None:
            timeline.sample(now_s, _gauges(environment, runtime))
        rows = timeline.due_rows(runtime.run.series, now_s, end_s=end_s)
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


def end_timeline(runtime: Runtime, end_s: float) -> None:
    """The run ended at ``end_s`` (time-series clock): ticks from now on write only intervals that ended before it.

    Called at the stop before anything that yields (the last server read, up
    to its timeout): a tick meanwhile would write the end's interval as a whole
    one; ``finish_timeline`` writes it, cut at ``end_s``.
    """
    runtime.timeline.end_s = end_s


def _stop_timeline(runtime: Runtime) -> None:
    task, runtime.timeline.task = runtime.timeline.task, None
    if task is not None:
        task.kill(block=True, timeout=_STOP_TIMELINE_TIMEOUT_S)


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
