"""Every Locust event listener llmload uses, wired by ``install(events)``.

This module only binds Locust's events to llmload's modules:
``llmload.cluster`` (the master/worker protocol: plan, reports, flush, final
reports, lost workers), ``llmload.live`` (the live view behind ``/metrics``)
and ``llmload.launch`` (options, tokenizer, workload, preflight). What it
keeps itself is the process's ``init`` and the end of a run (results,
summary, exit status).
"""

from __future__ import annotations

from locust import events as locust_events
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

import functools
import json
import logging
import sys
import threading
from typing import Any

import gevent

from llmload import cluster, live
from llmload.config import OPTIONS, RunConfig
from llmload.credentials import public_url
from llmload.errors import ConfigError, LLMLoadError
from llmload.exporters.report import RunInfo, write_results_json
from llmload.exporters.run_results import RunFacts, assemble_results
from llmload.exporters.run_summary import SendFigures, public_options, summary_lines
from llmload.interrupt import Interrupter
from llmload.launch import prepare, stop_process_services
from llmload.runtime import Runtime

__all__ = ["RESULTS_LINE_PREFIX", "add_arguments", "install"]

log = logging.getLogger("llmload")

RESULTS_LINE_PREFIX = "LLMLOAD_RESULTS "
"""Start of the headless run's last output line; the rest of the line is the results JSON."""


def install(events: Events | None = None) -> None:
    """Register llmload's listeners on Locust's event hooks (idempotent per ``events``)."""
    events = events or locust_events
    if getattr(events, "_llmload_installed", False):
        return
    events._llmload_installed = True  # type: ignore[attr-defined]
    events.init_command_line_parser.add_listener(add_arguments)
    events.init.add_listener(_on_init)


def _bind(environment: Environment) -> None:
    """Register the run listeners, bound to this environment (Locust calls init once per process)."""
    ev = environment.events
    ev.test_start.add_listener(cluster.on_test_start)
    ev.test_stopping.add_listener(cluster.on_test_stopping)
    ev.test_stop.add_listener(_on_test_stop)
    ev.test_stop.add_listener(_on_test_stopped)
    ev.report_to_master.add_listener(functools.partial(cluster.on_report_to_master, environment))
    ev.worker_report.add_listener(functools.partial(cluster.on_worker_report, environment))
    ev.quit.add_listener(functools.partial(_on_quit, environment))
    ev.quitting.add_listener(cluster.on_quitting)
    # The live view's listeners run after the ones above on each event (results first, then the freeze).
    ev.test_start.add_listener(functools.partial(live.on_test_start, take_report=cluster.take_report))
    ev.test_stop.add_listener(live.on_test_stop)
    ev.quit.add_listener(functools.partial(live.on_quit, environment))
    ev.quit.add_listener(functools.partial(_print_results_line, environment))  # last: after the exporter's wait


def add_arguments(parser: Any) -> None:
    """Add llmload's options to Locust's parser (CLI, ``locust.conf``, ``LOCUST_*`` env, web UI)."""
    group = parser.add_argument_group("llmload", "LLM request options (see README: Options)")
    for spec in OPTIONS:
        if spec.is_flag:
            action = group.add_argument(spec.flag, action="store_true", default=False, env_var=spec.env, help=spec.help)
        else:
            default = "" if spec.default is None else str(spec.default)
            action = group.add_argument(
                spec.flag, type=str, default=default, env_var=spec.env, help=spec.help, metavar=spec.metavar
            )
        # An argument group bypasses LocustArgumentParser.add_argument, which is what marks
        # options for the web UI's "Custom parameters"; mark them the same way here.
        action.include_in_web_ui = True
        action.is_secret = spec.is_secret
        action.is_required = False
        action.is_multiple = False


# ── init ────────────────────────────────────────────────────────────────


def _on_init(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    options = environment.parsed_options
    is_worker = isinstance(runner, WorkerRunner)
    try:
        config = RunConfig.from_options(options)
    except ConfigError as exc:
        if is_worker:  # the master's options arrive with the first spawn message
            config = RunConfig()
        else:
            _fatal(environment, str(exc))
            return
    runtime = Runtime(config=config)
    environment.llmload = runtime  # type: ignore[attr-defined]
    if runner is None:
        return
    _bind(environment)
    _install_interrupter(environment, runtime)
    cluster.register_messages(runner)
    if is_worker:
        return
    try:
        live.start_exporter(environment, runtime)
    except ConfigError as exc:
        _fatal(environment, str(exc))
        return
    if options is not None and getattr(options, "headless", False):
        # Fail before any load: options, tokenizer and the target are checked now.
        try:
            prepare(environment, runtime)
        except LLMLoadError as exc:
            _fatal(environment, str(exc))


def _install_interrupter(environment: Environment, runtime: Runtime) -> None:
    """Ctrl-C becomes one KeyboardInterrupt in Locust's main greenlet, never one inside a user's read.

    Locust fires ``init`` from its main greenlet in the main thread; anywhere
    else (a test that builds an environment itself) SIGINT is left alone.
    """
    if threading.current_thread() is not threading.main_thread() or gevent.getcurrent().parent is not None:
        return
    interrupter = Interrupter(gevent.getcurrent(), stopping=lambda: runtime.stopping)
    interrupter.install()
    runtime.interrupt_main = interrupter.forward


def _fatal(environment: Environment, message: str) -> None:
    sys.stderr.write(f"llmload: error: {message}\n")
    sys.stderr.flush()
    environment.process_exit_code = 2
    sys.exit(2)


# ── stop ────────────────────────────────────────────────────────────────


def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if isinstance(runner, WorkerRunner) or runtime is None or not runtime.run_id or runtime.results is not None:
        return
    if not isinstance(runner, MasterRunner):
        stop_process_services(runtime)
    options = environment.parsed_options
    workers = len(runtime.planned_workers) if isinstance(runner, MasterRunner) else 0
    run = RunInfo(
        run_id=runtime.run_id,
        host=public_url(environment.host or ""),
        user_classes=tuple(sorted(u.__name__ for u in environment.user_classes)),
        model=runtime.model or "",
        users=int(getattr(options, "num_users", 0) or 0),
        workers=workers,
        num_requests=runtime.config.num_requests,
        started_at_unix=runtime.started_at_unix,
        options=public_options(runtime.config),
    )
    if not isinstance(runner, MasterRunner):
        runtime.send_figures_by_process["local"] = runtime.send_figures()
    facts = RunFacts(
        blocked=runtime.blocked,
        lost_workers=tuple(runtime.lost_workers),
        cpu_saturated_s=runtime.cpu_saturated_s,
        sends=SendFigures.combine(runtime.send_figures_by_process.values()),
    )
    results = assemble_results(runtime.stats, run=run, config=runtime.config, facts=facts)
    runtime.results = results
    if runtime.config.results_json:
        write_results_json(runtime.config.results_json, results)
    environment.process_exit_code = results["exit_status"]  # README "Exit status": 0, 1, or 2 when blocked
    if not (options is not None and getattr(options, "headless", False)):
        _print_summary(results)


def _on_test_stopped(environment: Environment, **_kw: Any) -> None:
    """The stop is complete: with the web UI (or on a worker) Ctrl-C may end the process again.

    A headless run goes on to exit, so its stop stays under way until then.
    """
    runtime: Runtime | None = getattr(environment, "llmload", None)
    options = environment.parsed_options
    if runtime is not None and not (options is not None and getattr(options, "headless", False)):
        runtime.stopping = False


def _on_quit(environment: Environment, **_kw: Any) -> None:
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if runtime is not None and runtime.results is not None:
        _print_summary(runtime.results)


def _print_results_line(environment: Environment, **_kw: Any) -> None:
    """Headless master or single process: the results JSON as the last output line, one line, marked.

    ``kubectl logs`` then recovers the results when no volume was mounted (README "Results file").
    """
    runtime: Runtime | None = getattr(environment, "llmload", None)
    options = environment.parsed_options
    if runtime is None or runtime.results is None or not getattr(options, "headless", False):
        return
    sys.stdout.write(RESULTS_LINE_PREFIX + json.dumps(runtime.results, separators=(",", ":"), allow_nan=False) + "\n")
    sys.stdout.flush()


def _print_summary(results: dict[str, Any]) -> None:
    sys.stdout.write("\n" + "\n".join(summary_lines(results)) + "\n")
    sys.stdout.flush()
