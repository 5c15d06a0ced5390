"""Master/worker protocol: the run plan, reports, flush, final reports, lost workers.

Master M, workers W; all messages carry the run id:

1. ``test_start`` on M: validate options, preflight ``GET /v1/models``, split
   the run over the workers (``llmload.run.plan.split_run``) and publish the
   ``RunPlan`` (``llmload.run.wire_plans.plan_to_wire``) as the parsed option
   ``llmload_plan`` (Locust ships custom options to workers with every
   ``spawn`` message). The plan holds no shares: M sends each W its own share
   alone (``llmload_share``) just before Locust's spawn messages, on the same
   ordered connection, so each W knows its share before its users start and
   the bytes sent to each W do not grow with the number of workers.
2. Every report interval W adds ``{"llmload": WorkerReport}`` (a delta,
   ``llmload.run.wire_reports.report_to_wire``) to Locust's report; M merges it.
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

The protocol's modules, each importing only the ones before it (no callback
is passed between them through ``llmload.edge.hooks``):

- ``llmload.edge.messages``: the message names and payload types;
- ``llmload.edge.worker``: the worker's side (steps 1, 2, 3 and 4), and
  ``take_report``, the one way a worker's delta is built;
- ``llmload.edge.stop``: how a run ends on every process (step 4, and the
  exit), with ``finish_run``, the one way llmload ends a run itself;
- ``llmload.edge.live``: the live view; it sends a worker's 0.5 s reports
  with ``take_report``, imported directly;
- ``llmload.edge.timeline``: the time series; it ends a run whose
  ``--abort-on`` threshold fires with ``finish_run``, imported directly;
- ``llmload.edge.master``: the master's side (steps 1, 2, 3 and 5; a single
  process's start too), which feeds each merged delta to the live view;
- this module: which side handles which message and which start runs
  (``register_messages``, ``on_test_start``), read by ``llmload.edge.hooks``.
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import MasterRunner, Runner, WorkerRunner

import gc
from typing import Any

from llmload.edge import locust_internals
from llmload.edge.master import on_worker_done, on_worker_final, on_worker_live, start_master_or_local
from llmload.edge.messages import DONE, FINAL, FLUSH, LIVE, SHARE, option_defaults
from llmload.edge.worker import on_flush, on_share, start_worker

__all__ = ["on_test_start", "register_messages"]


def register_messages(runner: Runner | None) -> None:
    """Register llmload's runner messages: the flush on a worker; done, final and live reports on the master."""
    if isinstance(runner, WorkerRunner):
        runner.register_message(FLUSH, on_flush, concurrent=True)
        runner.register_message(SHARE, on_share)
    elif isinstance(runner, MasterRunner):
        locust_internals.compact_spawn_messages(runner, option_defaults())
        runner.register_message(LIVE, on_worker_live)
        runner.register_message(DONE, on_worker_done)
        runner.register_message(FINAL, on_worker_final)


YOUNG_COLLECTION_THRESHOLD = 20_000
"""Allocations of tracked objects between two collections of the cyclic collector's youngest generation (Python's
default: 700). A process that reads tokens allocates short-lived containers (its receives, token times) by the
hundred thousand a second, nearly all freed by reference counting before any collection; at the default the
collector ran so often that it took 3.5% of a process's CPU in scenario A of the benchmarks (256 users, 10 ms ITL),
1% at this threshold. The older generations keep their defaults."""


def on_test_start(environment: Environment, **_kw: Any) -> None:
    """Start a run: a worker applies the master's plan; the master plans; a single process plans for itself."""
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        start_worker(environment, runner)
    else:
        start_master_or_local(environment)
