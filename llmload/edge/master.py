"""The master's side of the master/worker protocol (``llmload.edge.cluster``), and a single process's start.

The master plans each run and sends every worker its share
(``start_master_or_local``; a single process plans for itself), watches for
workers lost mid-run, and merges every worker report (regular, live and
final: ``merge_report``) into the run's series, totals and live view.
"""

from __future__ import annotations

from locust.env import Environment
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner

import gc
import logging
import math
import time
import uuid
from typing import Any

import gevent

from llmload.aggregate.series import FoldedTotal
from llmload.edge.launch import (
    prepare,
    split,
    start_open_loop,
    start_process_services,
    start_server_metrics,
    start_workload,
)
from llmload.edge.live import feed
from llmload.edge.messages import PLAN_OPTION, REPORT_KEY, SHARE, DoneMessage
from llmload.edge.run_parts import RequestBudget
from llmload.edge.runtime import MasterState, RunState, Runtime, runtime_of
from llmload.edge.stop import finish_run
from llmload.errors import LLMLoadError, WireFormatError
from llmload.exporters.load import SendFigures
from llmload.run.clock import note_worker_clock
from llmload.run.plan import RunPlan, WorkerShare, users_per_worker, users_short_of_workers
from llmload.run.wire_plans import ShareMessage, plan_to_wire, share_to_wire
from llmload.run.wire_reports import report_from_wire, report_run_id

__all__ = [
    "REPORT_LATENESS_S",
    "merge_report",
    "on_worker_done",
    "on_worker_final",
    "on_worker_live",
    "on_worker_report",
    "start_master_or_local",
]

log = logging.getLogger("llmload")

_WATCH_INTERVAL_S = 0.5  # README: a lost worker is noticed within about 5 s (Locust: 4 missed 1 s heartbeats)


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
        runner.send_message(SHARE, message, client_id=client_id)


def start_master_or_local(environment: Environment) -> None:
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
        setattr(options, PLAN_OPTION, plan_to_wire(plan))
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


def on_worker_report(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    """Master: merge the ``REPORT_KEY`` (``"llmload"``) part of a worker's regular report."""
    payload = data.get(REPORT_KEY)
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


def on_worker_done(environment: Environment, msg: Message, **_kw: Any) -> None:
    """Master, ``DONE``: a worker sent its whole share; once every planned worker has, the run ends."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    done = DoneMessage.from_wire(msg.data)
    if done is None or done.run_id != runtime.run.run_id:
        return  # a malformed message, or one of another run
    runtime.master.done_workers.add(msg.node_id)
    if runtime.master.planned_workers <= runtime.master.done_workers:
        gevent.spawn(finish_run, environment)


def on_worker_final(environment: Environment, msg: Message, **_kw: Any) -> None:
    """Master, ``FINAL``: merge a worker's last report; the stop's wait ends when no final is pending."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    merge_report(runtime, msg.node_id, msg.data)
    if report_run_id(msg.data) == runtime.run.run_id:
        runtime.master.finals_from.add(msg.node_id)
    runtime.master.pending_finals.discard(msg.node_id)
    if not runtime.master.pending_finals:
        runtime.master.finals_in.set()


def on_worker_live(environment: Environment, msg: Message, **_kw: Any) -> None:
    """Master, ``LIVE``: merge a worker's 0.5 s report (``llmload.edge.live``)."""
    runtime = runtime_of(environment)
    if runtime is None:
        return
    merge_report(runtime, msg.node_id, msg.data)
