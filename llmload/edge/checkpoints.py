"""The run's outcome as the results see it, at the end and as checkpoints while the run goes.

``run_outcome`` gathers what ``build_results`` reads from the master (or the
single process): the statistics so far, the run's facts, the time series,
the ``--abort-on`` breach. ``hooks`` builds the final results from it at the
stop; ``start`` (a ``test_start`` listener) rewrites ``--results-json`` as a
partial document (``llmload.exporters.checkpoint``) at the run's start and
then every ``--checkpoint-interval`` seconds, from the rows of the intervals
completed so far (``TimelineState.rows``; the interval in progress is left
out) and without the server section (read at the stop). The first write
replaces a file a previous run left at the same path, so a process killed
early never leaves another run's verdict there.

Each checkpoint's file write (JSON encoding, fsync, rename) runs in a worker
thread so the event loop keeps measuring; ``stop`` lets a write in progress
finish before the final results are written, so a checkpoint never lands
after them.
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gevent
import gevent.event

from llmload.edge.runtime import Runtime, runtime_of
from llmload.exporters.checkpoint import CheckpointWriter
from llmload.exporters.load import SendFigures
from llmload.exporters.results import RunOutcome, build_results
from llmload.settings.credentials import public_url

__all__ = ["checkpoint", "run_outcome", "start", "stop"]

log = logging.getLogger("llmload")

_STOP_WAIT_S = 60.0  # longest wait at the stop for a checkpoint write in progress


def run_outcome(
    environment: Environment,
    runtime: Runtime,
    *,
    timeseries: Sequence[Mapping[str, Any]],
    server: Mapping[str, Any] | None = None,
    server_warnings: Sequence[str] = (),
    checkpoint_at_s: float | None = None,
    drift: Mapping[str, Any] | None = None,
) -> RunOutcome:
    """The ``RunOutcome`` of the current run as of now (master or single process).

    Args:
        environment: Locust's environment of this process.
        runtime: its llmload state.
        timeseries: the time-series rows to include.
        server: the server-metrics section, or None.
        server_warnings: the scraper's warnings (``ServerScraper.warnings``).
        checkpoint_at_s: seconds since the run's start of a checkpoint; None at the run's end.
        drift: the drift section (``llmload.exporters.drift``), or None (checkpoints).
    """
    runner = environment.runner
    options = environment.parsed_options
    sends = dict(runtime.master.send_figures_by_process)
    if not isinstance(runner, MasterRunner):
        sends["local"] = runtime.run.send_figures()
    return RunOutcome(
        stats=runtime.run.totals(),
        config=runtime.process.config,
        run_id=runtime.run.run_id,
        host=public_url(environment.host or ""),
        user_classes=tuple(sorted(u.__name__ for u in environment.user_classes)),
        model=runtime.process.model,
        users=int(getattr(options, "num_users", 0) or 0),
        workers=len(runtime.master.planned_workers) if isinstance(runner, MasterRunner) else 0,
        started_at_unix=runtime.run.started_at_unix,
        blocked=runtime.run.blocked,
        lost_workers=tuple(runtime.master.lost_workers),
        cpu_saturated_s=runtime.run.cpu_saturated_s,
        sends=SendFigures.combine(sends.values()),
        timeseries=tuple(dict(row) for row in timeseries),
        server=server,
        server_warnings=tuple(server_warnings),
        aborted=runtime.timeline.aborted.as_dict() if runtime.timeline.aborted is not None else None,
        checkpoint_at_s=checkpoint_at_s,
        drift=drift,
        worker_clocks=dict(runtime.master.worker_clocks) if isinstance(runner, MasterRunner) else {},
        stopped_by=runtime.run.stopped_by,
    )


def _in_thread(write: Callable[[], None]) -> None:
    """Run ``write`` in gevent's thread pool and wait for it (its exception is re-raised here)."""
    gevent.get_hub().threadpool.apply(write)


def start(environment: Environment, **_kw: Any) -> None:
    """Master or single process with ``--results-json`` and ``--checkpoint-interval`` > 0: start checkpointing."""
    runtime = runtime_of(environment)
    if runtime is None or isinstance(environment.runner, WorkerRunner) or not runtime.run.run_id:
        return
    stop(runtime)
    config = runtime.process.config
    if not config.results_json or config.checkpoint_interval_s <= 0 or runtime.run.blocked:
        return
    runtime.process.checkpoint_stop = gevent.event.Event()
    writer = CheckpointWriter(config.results_json, run=_in_thread)
    runtime.process.checkpoint_task = gevent.spawn(
        _checkpoint_forever, environment, runtime, writer, runtime.process.checkpoint_stop
    )


def _checkpoint_forever(
    environment: Environment, runtime: Runtime, writer: CheckpointWriter, stopped: gevent.event.Event
) -> None:
    interval_s = runtime.process.config.checkpoint_interval_s
    while not stopped.is_set():
        checkpoint(environment, runtime, writer)
        stopped.wait(timeout=interval_s)


def checkpoint(environment: Environment, runtime: Runtime, writer: CheckpointWriter) -> bool:
    """Write one partial results document now; False when it could not be built or written (logged)."""
    at_s = time.perf_counter() - runtime.run.run_started_s
    try:
        results = build_results(
            run_outcome(environment, runtime, timeseries=runtime.timeline.rows, checkpoint_at_s=at_s)
        )
    except (ValueError, ArithmeticError) as exc:  # a figure that cannot be computed yet: skip this checkpoint
        log.warning("llmload: checkpoint at %.0f s skipped (%s)", at_s, exc)
        return False
    return writer.write(results)


def stop(runtime: Runtime) -> None:
    """Stop checkpointing; a write in progress finishes first (bounded), so none lands after the final results."""
    task, runtime.process.checkpoint_task = runtime.process.checkpoint_task, None
    runtime.process.checkpoint_stop.set()
    if task is None:
        return
    task.join(timeout=_STOP_WAIT_S)
    if not task.dead:
        log.error(
            "llmload: a checkpoint write of %s did not finish within %g s; the final results are written anyway",
            runtime.process.config.results_json,
            _STOP_WAIT_S,
        )
        task.kill(block=False)
