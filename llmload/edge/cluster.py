"""Master/worker protocol: the run plan, reports, flush, final reports, lost workers.

Master M, workers W; all messages carry the run id:

1. ``test_start`` on M: validate options, preflight ``GET /v1/models``, split
   the run over the workers (``llmload.run.plan.split_run``) and publish the
   ``RunPlan`` (``llmload.run.wire.plan_to_wire``) as the parsed option
   ``llmload_plan`` (Locust ships custom options to workers with every
   ``spawn`` message). The plan holds no shares: M sends each W its own share
   alone (``llmload_share``) just before Locust's spawn messages, on the same
   ordered connection, so each W knows its share before its users start and
   the bytes sent to each W do not grow with the number of workers.
2. Every report interval W adds ``{"llmload": WorkerReport}`` (a delta,
   ``llmload.run.wire.report_to_wire``) to Locust's report; M merges it.
   With the Prometheus exporter, W sends its deltas every 0.5 s as
   ``llmload_live`` instead (``llmload.edge.live``) and Locust's report carries none.
3. When a W has finished its whole share it sends ``llmload_done``; when all
   planned workers are done, M stops the run.
4. On any stop (``--num-requests`` reached, ``-t``, web UI, SIGTERM) M fires
   ``test_stopping``: it sends ``llmload_flush``; each W stops its users
   (in-flight requests are counted as cancelled) and answers ``llmload_final``
   with its last delta; M waits for all of them (bounded) before Locust tells
   workers to quit. Locust alone stops listening 0.5 s after ``quit`` and
   drops late reports; this step is why final totals are complete.
5. A W that stops sending heartbeats mid-run is a lost worker: what it
   reported stays, the results name it, and a ``--num-requests`` run ends
   without it.

A single process plans for one worker and keeps no protocol.
"""

from __future__ import annotations

from locust.env import Environment
from locust.exception import RPCError, RPCSendError
from locust.runners import STATE_INIT, STATE_MISSING, STATE_STOPPED, MasterRunner, WorkerRunner

import gc
import logging
import math
import time
import uuid
from typing import Any

import gevent
import gevent.event
import gevent.lock

from llmload.aggregate.series import FoldedTotal
from llmload.edge import locust_internals
from llmload.edge.launch import (
    choose_route,
    load_local_parts,
    prepare,
    split,
    start_open_loop,
    start_process_services,
    start_server_metrics,
    start_workload,
)
from llmload.edge.live import feed
from llmload.edge.run_parts import RequestBudget
from llmload.edge.runtime import MasterState, RunState, Runtime, runtime_of
from llmload.errors import ConfigError, LLMLoadError, WireFormatError
from llmload.exporters.load import SendFigures
from llmload.request import preflight
from llmload.run.clock import align_to_master, note_worker_clock
from llmload.run.plan import RunPlan, WorkerShare, users_per_worker, users_short_of_workers
from llmload.run.wire import (
    ShareMessage,
    WorkerReport,
    plan_from_wire,
    plan_to_wire,
    report_from_wire,
    report_run_id,
    report_to_wire,
    share_from_wire,
    share_to_wire,
)
from llmload.settings.config import RunConfig
from llmload.settings.options import OPTIONS

__all__ = [
    "finish_run",
    "merge_report",
    "on_quitting",
    "on_report_to_master",
    "on_test_start",
    "on_test_stopping",
    "on_worker_report",
    "register_messages",
    "take_report",
]

log = logging.getLogger("llmload")

_PLAN = "llmload_plan"
_FINAL_WAIT_EXTRA_S = 30.0
_FINAL_POLL_S = 0.25
_WATCH_INTERVAL_S = 0.5  # README: a lost worker is noticed within about 5 s (Locust: 4 missed 1 s heartbeats)


def option_defaults() -> dict[str, Any]:
    """llmload's options as Locust's parser sets them from no arguments (attribute name -> value)."""
    return {spec.dest: spec.locust_default for spec in OPTIONS}


def register_messages(runner: Any) -> None:
    """Register llmload's runner messages: the flush on a worker; done, final and live reports on the master."""
    if isinstance(runner, WorkerRunner):
        runner.register_message("llmload_flush", _on_flush, concurrent=True)
        runner.register_message("llmload_share", _on_share)
    elif isinstance(runner, MasterRunner):
        locust_internals.compact_spawn_messages(runner, option_defaults())
        runner.register_message("llmload_live", _on_worker_live)
        runner.register_message("llmload_done", _on_worker_done)
        runner.register_message("llmload_final", _on_worker_final)


def on_test_start(environment: Environment, **_kw: Any) -> None:
    """Start a run: a worker applies the master's plan; the master plans; a single process plans for itself."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        _start_worker(environment, runner)
    else:
        _start_master_or_local(environment)


def _start_worker(environment: Environment, runner: WorkerRunner) -> None:
    """Worker: read the master's plan and start this worker's share of the run.

    The worker's clocks are set from the plan, as it arrives: its run start
    on its monotonic clock and on the master's wall clock, and its estimated
    wall-clock offset (``llmload.run.clock.align_to_master``).
    """
    runtime = runtime_of(environment)
    if runtime is None:
        return
    arrived_s, arrived_unix = time.perf_counter(), time.time()
    options = environment.parsed_options
    locust_internals.expand_sent_options(options, option_defaults())
    raw_plan = getattr(options, _PLAN, None)
    plan_error = None
    try:
        plan = RunPlan() if raw_plan is None else plan_from_wire(raw_plan)
    except WireFormatError as exc:
        plan, plan_error = RunPlan(run_id=str(report_run_id(raw_plan) or "")), str(exc)
        log.error("llmload: %s; this worker sends no load", exc)
    if plan.run_id and plan.run_id == runtime.process.ended_run_id:
        return  # a spawn message after this run ended here: its users stop without sending
    start = align_to_master(plan.started_at_unix, plan.planned_after_s, now_s=arrived_s, now_unix=arrived_unix)
    try:
        runtime.process.config = RunConfig.from_options(options)
    except ConfigError as exc:  # the master checks options first; a worker never raises out of test_start
        plan_error = plan_error or str(exc)
        log.error("llmload: %s; this worker sends no load", exc)
    share = _own_share(runtime, plan, str(runner.worker_index))
    run_id = plan.run_id
    runtime.run = RunState(  # a new run: every other field of the run starts at its default
        run_id=run_id,
        run_started_s=start.started_s,
        started_at_unix=start.started_at_unix,
        clock_offset_s=start.clock_offset_s,
        blocked=plan.blocked or plan_error,
        local_total=None,  # a worker's totals are its master's: it reports deltas
        budget=RequestBudget(
            share.quota_requests, on_done=lambda: runner.send_message("llmload_done", {"run_id": run_id})
        ),
    )
    runtime.process.model = plan.model
    runtime.process.url_authorization = plan.url_authorization or runtime.process.url_authorization
    try:
        load_local_parts(runtime)
        choose_route(runtime, environment.host or "", master_note=plan.proxy_note)
    except LLMLoadError as exc:
        runtime.run.blocked = runtime.run.blocked or str(exc)
        log.error("llmload: %s; this worker sends no load", exc)
    start_workload(runtime, share, plan.workers)
    start_open_loop(runtime, share)
    users_here = plan.users_per_worker
    try:
        raised = preflight.check_open_files(users_here)
        if raised:
            log.info("llmload: %s", raised)
    except ConfigError as exc:
        runtime.run.blocked = str(exc)
        log.error("llmload: %s; this worker sends no load", exc)
    start_process_services(runtime, runner.worker_index)


def _on_share(environment: Environment, msg: Any, **_kw: Any) -> None:
    """Worker: keep the share the master sent this worker alone (it arrives before the spawn message)."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    try:
        runtime.process.share_from_master = share_from_wire(msg.data)
    except WireFormatError as exc:
        log.error("llmload: %s; this worker sends no load of a limited run", exc)
        runtime.process.share_from_master = None


def _own_share(runtime: Runtime, plan: RunPlan, worker_index: str) -> WorkerShare:
    """This worker's share: the one the master sent it for this run, else the plan's (a master that sent them all)."""
    received = runtime.process.share_from_master
    if received is not None and received.run_id == plan.run_id and not plan.shares:
        return received.share
    return plan.share_for(worker_index)


REPORT_LATENESS_S = 15.0
"""How long after a time-series interval ends the master still expects worker reports for it (Locust reports
every 3 s; plus heartbeat delays and the plan's delivery): the intervals kept open by the master's ``FoldedTotal``."""


def _open_intervals(runtime: Runtime) -> int:
    """Intervals the master's totals keep open: later reports for older ones are merged twice (still exact)."""
    return math.ceil(REPORT_LATENESS_S / runtime.process.config.timeseries_interval_s) + 1


def _send_shares(runner: MasterRunner, run_id: str, shares: dict[str, tuple[str, WorkerShare]]) -> None:
    """Master: send each planned worker its own share, before Locust's spawn messages (one ordered connection each)."""
    for client_id, share in shares.values():
        message = share_to_wire(ShareMessage(run_id=run_id, share=share))
        runner.send_message("llmload_share", message, client_id=client_id)


def _start_master_or_local(environment: Environment) -> None:
    """Master: prepare, plan and publish the plan; single process: prepare and start its whole run."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    runner = environment.runner
    options = environment.parsed_options
    # a new run: every field of the run and of what the master learns of its workers starts at its default
    # (Locust clears its statistics at a new run too)
    runtime.run = RunState(
        run_id=uuid.uuid4().hex[:12],
        run_started_s=time.perf_counter(),
        started_at_unix=time.time(),
        local_total=(
            FoldedTotal(open_intervals=_open_intervals(runtime)) if isinstance(runner, MasterRunner) else FoldedTotal()
        ),
    )
    runtime.master = MasterState()
    try:
        prepare(environment, runtime)
    except LLMLoadError as exc:
        runtime.run.blocked = str(exc)
        log.error("llmload: %s; not sending load", exc)
        gevent.spawn(finish_run, environment)
    else:
        start_server_metrics(environment, runtime)
    # Everything alive now (modules, Locust, the plan) lives as long as the process: out of the cyclic
    # collector's sight, a full collection no longer walks it (100-190 ms holding the loop on a master).
    # What an earlier run (web UI) froze is thawed and collected first, so its cycles do not leak.
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    # the time series counts from here: preflight and the server's first read (up to its timeout) came before
    runtime.run.run_started_s = time.perf_counter()
    runtime.run.started_at_unix = time.time()
    limit = runtime.process.config.num_requests
    if isinstance(runner, MasterRunner):
        workers = sorted(
            runner.clients.ready + runner.clients.spawning + runner.clients.running,
            key=lambda c: runner.get_worker_index(c.id),
        )
        runtime.master.planned_workers = {c.id for c in workers}
        users = int(getattr(options, "num_users", 0) or 0)
        short = users_short_of_workers(users, len(workers), runtime.process.config.shared_totals)
        if short is not None and runtime.run.blocked is None:
            runtime.run.blocked = short
            log.error("llmload: %s; not sending load", short)
            gevent.spawn(finish_run, environment)
        plan = RunPlan(
            run_id=runtime.run.run_id,
            model=runtime.process.model,
            url_authorization=runtime.process.url_authorization,
            proxy_note=runtime.process.proxy_note,
            blocked=runtime.run.blocked,
            users_per_worker=users_per_worker(users, len(workers)),
            workers=len(workers),
            limited=limit is not None,
            shares={},  # each worker gets its own share alone (``_send_shares``): the plan stays O(1) per worker
            started_at_unix=runtime.run.started_at_unix,
            planned_after_s=time.perf_counter() - runtime.run.run_started_s,
        )
        setattr(options, _PLAN, plan_to_wire(plan))
        shares = {
            str(runner.get_worker_index(c.id)): (c.id, share)
            for c, share in zip(
                workers, split(runtime.process.config, len(workers), runtime.process.trace_of_run), strict=True
            )
        }
        _send_shares(runner, runtime.run.run_id, shares)
        gevent.spawn(_watch_workers, environment, runtime.run.run_id)
    else:
        (share,) = split(runtime.process.config, 1, runtime.process.trace_of_run)
        runtime.run.budget = RequestBudget(share.quota_requests, on_done=lambda: gevent.spawn(finish_run, environment))
        start_workload(runtime, share, 1)
        start_open_loop(runtime, share)
        start_process_services(runtime, None)


def _watch_workers(environment: Environment, run_id: str) -> None:
    """Master: notice workers lost mid-run and end a --num-requests run without them.

    A worker that stops sending heartbeats is marked missing by Locust; what it
    had reported stays in the totals, its unfinished share is lost, and the
    results name it under ``lost_workers``.
    """
    runtime = runtime_of(environment)
    if runtime is None:
        return
    runner = environment.runner
    assert isinstance(runner, MasterRunner)
    while True:
        gevent.sleep(_WATCH_INTERVAL_S)
        if runtime.run.run_id != run_id or runtime.run.results is not None or runtime.master.flushed:
            return  # the run is stopping: workers leaving now are not lost
        alive = {c.id for c in runner.clients.all if c.state != STATE_MISSING}
        for client_id in sorted(runtime.master.planned_workers - alive - runtime.master.finals_from):
            if client_id not in runtime.master.lost_workers:
                runtime.master.lost_workers.append(client_id)
                log.warning("llmload: worker %s lost mid-run; its unreported requests are missing", client_id)
        for client_id in [c for c in runtime.master.lost_workers if c in alive]:
            # Its heartbeats resumed (a worker whose loop was busy for seconds, e.g. loading a
            # tokenizer on a loaded machine): it kept its share and its reports, so it is not lost.
            runtime.master.lost_workers.remove(client_id)
            log.warning("llmload: worker %s is back (its heartbeats resumed); not lost", client_id)
        remaining = runtime.master.planned_workers - set(runtime.master.lost_workers)
        if (
            runtime.process.config.num_requests is not None
            and remaining <= runtime.master.done_workers
            and not runtime.master.flushed
        ):
            if runtime.master.lost_workers:
                gevent.spawn(finish_run, environment)
            return


def finish_run(environment: Environment) -> None:
    """Stop the run (headless: quit Locust, web UI: stop the test)."""
    runner = environment.runner
    if runner is None:
        return
    options = environment.parsed_options
    if options is not None and getattr(options, "headless", False):
        runner.quit()
    else:
        runner.stop()


def on_report_to_master(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    """Worker: put the delta since the last report under Locust's report key ``"llmload"``."""
    runtime = runtime_of(environment)
    if runtime is None or not runtime.run.run_id or not isinstance(environment.runner, WorkerRunner):
        return
    live = runtime.process.live_task
    if live is not None and not live.dead:
        # The live reports (every 0.5 s, ``llmload.edge.live``) carry every delta: a delta here as well
        # would be one more report for the master to decode and merge per worker (a seventh more).
        return
    data["llmload"] = _payload(runtime)


def take_report(runtime: Runtime) -> WorkerReport:
    """A worker's delta since its last report, with its CPU saturation so far."""
    cpu_s = max(runtime.run.cpu_saturated_s, runtime.process.cpu.saturated_s if runtime.process.cpu else 0.0)
    stats, series = runtime.take_delta()
    return WorkerReport(
        run_id=runtime.run.run_id,
        stats=stats,
        cpu_saturated_s=cpu_s,
        in_flight=runtime.run.in_flight,
        sends=runtime.run.send_figures().as_wire(),
        series=series,
        clock_offset_s=runtime.run.clock_offset_s,
        rss_bytes=runtime.process.rss_bytes(),
        taken_at_unix=time.time(),
    )


def _payload(runtime: Runtime) -> dict[str, Any]:
    """The wire form of ``take_report``."""
    return report_to_wire(take_report(runtime))


def on_worker_report(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    """Master: merge the ``"llmload"`` part of a worker's regular report."""
    payload = data.get("llmload")
    runtime = runtime_of(environment)
    if payload is None or runtime is None:
        return
    merge_report(runtime, client_id, payload)


def merge_report(runtime: Runtime, client_id: str, payload: object) -> None:
    """Master: merge one worker report of this run into the totals and the live view (others are dropped)."""
    if report_run_id(payload) != runtime.run.run_id:
        return  # a late report from a previous run
    try:
        report = report_from_wire(payload)
    except WireFormatError as exc:
        log.error("llmload: dropped a report from worker %s: %s", client_id, exc)
        return
    runtime.run.cpu_saturated_s = max(runtime.run.cpu_saturated_s, report.cpu_saturated_s)
    if report.sends:
        runtime.master.send_figures_by_process[client_id] = SendFigures.from_wire(report.sends)
    total = runtime.run.local_total
    if total is None:  # not a master of this run (a stray call): the old way, totals apart
        runtime.run.stats.merge_in(report.stats)
        changed = runtime.run.series.merge_in(report.series)
    else:  # each request merged once: into the series, which the totals are folded from
        changed = total.merge_in(runtime.run.series, report.series)
        if report.series.is_empty() and not report.stats.is_empty():
            total.add_untimed(report.stats)  # an older worker's report without a series
    if runtime.timeline.table is not None:
        runtime.timeline.table.note_merged(changed)
    runtime.master.worker_in_flight[client_id] = report.in_flight
    if report.rss_bytes is not None:
        runtime.master.worker_rss_bytes[client_id] = report.rss_bytes
    warning = note_worker_clock(
        runtime.master.worker_clocks,
        client_id,
        upper_s=report.clock_offset_s,
        taken_at_unix=report.taken_at_unix,
        received_at_unix=time.time(),
    )
    if warning is not None:
        log.warning("llmload: %s", warning)
    if runtime.process.export is not None:
        feed(runtime.process.export, client_id, report.stats)


def _on_worker_done(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime = runtime_of(environment)
    if runtime is None:
        return
    if report_run_id(msg.data) != runtime.run.run_id:
        return
    runtime.master.done_workers.add(msg.node_id)
    if runtime.master.planned_workers <= runtime.master.done_workers:
        gevent.spawn(finish_run, environment)


def _on_worker_final(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime = runtime_of(environment)
    if runtime is None:
        return
    merge_report(runtime, msg.node_id, msg.data)
    if report_run_id(msg.data) == runtime.run.run_id:
        runtime.master.finals_from.add(msg.node_id)
    runtime.master.pending_finals.discard(msg.node_id)
    if not runtime.master.pending_finals:
        runtime.master.finals_in.set()


def _on_worker_live(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime = runtime_of(environment)
    if runtime is None:
        return
    merge_report(runtime, msg.node_id, msg.data)


def _on_flush(environment: Environment, msg: Any, **_kw: Any) -> None:
    """Worker: stop users, then send everything not yet reported."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    runner = environment.runner
    if runner is not None:
        runtime.end_run()
        runner.stop()
        runner.send_message("llmload_final", _payload(runtime))


def _finish_worker(runtime: Runtime, runner: WorkerRunner) -> None:
    """Worker shutting down on its own (Ctrl-C, SIGTERM, lost master): stop the users, send what is left.

    Ctrl-C in a terminal reaches every process of the group, so workers stop
    before the master's flush arrives; their in-flight requests are counted as
    cancelled and the final delta goes to the master before Locust's own
    ``quit`` message (``quitting`` runs listeners in reverse order of
    registration, so this runs before Locust's). Nothing is sent when the run
    was already stopped and flushed.
    """
    if not runtime.run.run_id:
        return
    runtime.end_run()
    running = runner.state not in (STATE_INIT, STATE_STOPPED)
    if running:
        runner.stop()
    if not running and not runtime.run.has_unreported():
        return
    try:
        runner.send_message("llmload_final", _payload(runtime))
    except (RPCError, RPCSendError) as exc:
        log.warning("llmload: final report to the master failed (%s); this worker's last requests are missing", exc)


def on_test_stopping(environment: Environment, **_kw: Any) -> None:
    """Mark the stop; the master flushes every connected worker and waits (bounded) for their final reports."""
    runner = environment.runner
    runtime = runtime_of(environment)
    if runtime is not None:
        runtime.run.stopping = True
        if not isinstance(runner, MasterRunner):
            runtime.end_run()
        if runtime.run.stopped_at_s is None:
            runtime.run.stopped_at_s = time.perf_counter()  # the open-loop schedule's lag is read as of now
    if not isinstance(runner, MasterRunner) or runtime is None or not runtime.run.run_id:
        return
    deadline_s = time.monotonic() + environment.stop_timeout + _FINAL_WAIT_EXTRA_S
    if runtime.master.flushed:
        # A second stop while the first one waits (Ctrl-C and "the last worker quit" together):
        # wait for the same final reports, so the results are never built without them.
        _await_finals(runner, runtime, deadline_s)
        return
    runtime.master.flushed = True
    targets = {c.id for c in runner.clients.all if c.state != STATE_MISSING} - runtime.master.finals_from
    runtime.master.pending_finals = set(targets)
    runtime.master.finals_in = gevent.event.Event()
    for client_id in targets:
        runner.send_message("llmload_flush", {"run_id": runtime.run.run_id}, client_id=client_id)
    _await_finals(runner, runtime, deadline_s)
    if runtime.master.pending_finals:
        runtime.master.lost_workers = sorted(set(runtime.master.lost_workers) | runtime.master.pending_finals)
        log.warning(
            "llmload: no final report from %d worker(s) %s; their last unreported requests are missing",
            len(runtime.master.pending_finals),
            ", ".join(runtime.master.lost_workers),
        )


def _await_finals(runner: MasterRunner, runtime: Runtime, deadline_s: float) -> None:
    """Wait (until ``deadline_s``, monotonic) for the final reports still pending.

    A worker that quit on its own has sent its final report before its
    ``quit`` message (one ordered connection), so a pending worker that is no
    longer connected is not waited for.
    """
    while runtime.master.pending_finals:
        connected = {c.id for c in runner.clients.all if c.state != STATE_MISSING}
        runtime.master.pending_finals &= connected
        remaining_s = deadline_s - time.monotonic()
        if not runtime.master.pending_finals or remaining_s <= 0:
            break
        runtime.master.finals_in.wait(timeout=min(remaining_s, _FINAL_POLL_S))
    if not runtime.master.pending_finals:
        runtime.master.finals_in.set()


def on_quitting(environment: Environment, **_kw: Any) -> None:
    """SIGTERM/SIGINT or Ctrl-C mid-run: stop the load and collect results before Locust exits.

    Locust's shutdown fires ``quitting`` and reads the exit code before it stops
    the runner; stopping here first makes the results file, the summary and the
    exit code include everything the workers measured.
    """
    runtime = runtime_of(environment)
    runner = environment.runner
    if runtime is None or runner is None:
        return
    runtime.run.stopping = True  # the process is going away: a further Ctrl-C changes nothing
    if isinstance(runner, WorkerRunner):
        _finish_worker(runtime, runner)
        return
    if runtime.run.run_id and runtime.run.results is None:
        log.info("llmload: stopping the load and collecting final reports before exit")
        if isinstance(runner, MasterRunner):
            # Locust's "stop" makes workers drop out of the master's list, so its "quit" would
            # never reach them; the flush (test_stopping) stops their users, "quit" ends them.
            runner.stop(send_stop_to_client=False)
        else:
            runner.stop()
