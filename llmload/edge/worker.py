"""The worker's side of the master/worker protocol (``llmload.edge.cluster``).

A worker starts its share of the run from the master's plan (``start_worker``),
keeps the share the master sent it alone (``on_share``), puts its delta in
each of Locust's reports (``on_report_to_master``, built by ``take_report``),
and sends its final report when the master flushes (``on_flush``) or when it
shuts down on its own (``finish_worker``).
"""

from __future__ import annotations

from locust.env import Environment
from locust.exception import RPCError, RPCSendError
from locust.rpc import Message
from locust.runners import STATE_INIT, STATE_STOPPED, WorkerRunner

import logging
import time
from typing import Any

from llmload.edge import locust_internals
from llmload.edge.launch import (
    choose_route,
    load_local_parts,
    start_open_loop,
    start_process_services,
    start_workload,
)
from llmload.edge.messages import DONE, FINAL, PLAN_OPTION, REPORT_KEY, DoneMessage, option_defaults
from llmload.edge.run_parts import RequestBudget
from llmload.edge.runtime import RunState, Runtime, runtime_of
from llmload.errors import ConfigError, LLMLoadError, WireFormatError
from llmload.request import preflight
from llmload.run.clock import align_to_master
from llmload.run.plan import RunPlan, WorkerShare
from llmload.run.wire_plans import plan_from_wire, share_from_wire
from llmload.run.wire_reports import WorkerReport, report_run_id, report_to_wire
from llmload.settings.config import RunConfig

__all__ = ["finish_worker", "on_flush", "on_report_to_master", "on_share", "start_worker", "take_report"]

log = logging.getLogger("llmload")


def start_worker(environment: Environment, runner: WorkerRunner) -> None:
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
    raw_plan = getattr(options, PLAN_OPTION, None)
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
            share.quota_requests, on_done=lambda: runner.send_message(DONE, DoneMessage(run_id=run_id).to_wire())
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


def on_share(environment: Environment, msg: Message, **_kw: Any) -> None:
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


def on_report_to_master(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    """Worker: put the delta since the last report under Locust's report key ``REPORT_KEY`` (``"llmload"``)."""
    runtime = runtime_of(environment)
    if runtime is None or not runtime.run.run_id or not isinstance(environment.runner, WorkerRunner):
        return
    live = runtime.process.live_task
    if live is not None and not live.dead:
        # The live reports (every 0.5 s, ``llmload.edge.live``) carry every delta: a delta here as well
        # would be one more report for the master to decode and merge per worker (a seventh more).
        return
    data[REPORT_KEY] = _payload(runtime)


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


def on_flush(environment: Environment, msg: Message, **_kw: Any) -> None:
    """Worker, ``FLUSH``: stop the users, then send what is not reported yet as ``FINAL`` (run id not read)."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    runner = environment.runner
    if runner is not None:
        runtime.end_run()
        runner.stop()
        runner.send_message(FINAL, _payload(runtime))


def finish_worker(runtime: Runtime, runner: WorkerRunner) -> None:
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
        runner.send_message(FINAL, _payload(runtime))
    except (RPCError, RPCSendError) as exc:
        log.warning("llmload: final report to the master failed (%s); this worker's last requests are missing", exc)
