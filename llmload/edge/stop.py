"""How a run ends, on every kind of process: the stop, the master's flush and wait for final reports, the exit.

``finish_run`` is the one way llmload itself ends a run (all workers done,
``--num-requests`` reached, a lost worker's run, ``--abort-on``).
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

import logging
import time
from typing import Any

import gevent.event

from llmload.edge.messages import FLUSH, FlushMessage
from llmload.edge.runtime import Runtime, runtime_of
from llmload.edge.worker import finish_worker

__all__ = ["finish_run", "on_quitting", "on_test_stopping"]

log = logging.getLogger("llmload")

_FINAL_WAIT_EXTRA_S = 30.0
_FINAL_POLL_S = 0.25


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
        runner.send_message(FLUSH, FlushMessage(run_id=runtime.run.run_id).to_wire(), client_id=client_id)
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
        finish_worker(runtime, runner)
        return
    if runtime.run.run_id and runtime.run.results is None:
        log.info("llmload: stopping the load and collecting final reports before exit")
        if isinstance(runner, MasterRunner):
            # Locust's "stop" makes workers drop out of the master's list, so its "quit" would
            # never reach them; the flush (test_stopping) stops their users, "quit" ends them.
            runner.stop(send_stop_to_client=False)
        else:
            runner.stop()
