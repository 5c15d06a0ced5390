"""Every Locust event listener llmload uses, wired by ``install(events)``.

This module only binds Locust's events to llmload's modules, with no
callbacks passed between them (each imports what it calls):
``llmload.edge.cluster`` (the master/worker protocol and its message table:
``worker``, ``master``, ``stop``; plan, reports, flush, final reports, lost
workers), ``llmload.edge.live`` (the live view behind ``/metrics``),
``llmload.edge.timeline`` (the time series) and ``llmload.edge.launch`` (options, tokenizer, workload,
preflight, the server-metrics scraper). What it keeps itself is the
process's ``init`` and the end of a run (the last server-metrics scrape,
results, summary, exit status).
"""

from __future__ import annotations

from locust import events as locust_events
from locust.env import Environment
from locust.event import Events
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

import contextlib
import copy
import dataclasses
import functools
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import gevent

from llmload.aggregate.series import interval_index
from llmload.edge import checkpoints, cluster, live, locust_internals, master, refusals, stop, timeline, web, worker
from llmload.edge.interrupt import Interrupter
from llmload.edge.launch import note_request_limit, preload_tokenizer, prepare, stop_process_services
from llmload.edge.runtime import Runtime, attach, runtime_of
from llmload.errors import ConfigError, LLMLoadError
from llmload.exporters.console import results_line, summary_lines
from llmload.exporters.html import ReportError, write_html_report
from llmload.exporters.results import build_results, write_results_json
from llmload.exporters.timeseries_files import write_csv_files
from llmload.net.scrape import ServerScraper
from llmload.settings.config import RunConfig
from llmload.settings.options import GROUPS, OPTIONS

__all__ = ["add_arguments", "install"]

log = logging.getLogger("llmload")


def install(events: Events | None = None) -> None:
    """Register llmload's listeners on Locust's event hooks (idempotent per ``events``).

    Also makes a worker's spawn messages cheap (``llmload.edge.locust_internals``):
    without that, a worker starves its own heartbeats during a ramp-up.
    """
    locust_internals.cache_default_args()
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
    ev.test_start.add_listener(timeline.start_timeline)
    ev.test_start.add_listener(checkpoints.start)  # after the timeline: checkpoints read its rows
    ev.test_stopping.add_listener(stop.on_test_stopping)
    ev.test_stop.add_listener(_on_test_stop)
    ev.test_stop.add_listener(_on_test_stopped)
    ev.report_to_master.add_listener(functools.partial(worker.on_report_to_master, environment))
    # after Locust's own listener (added when the runner was built), which put its statistics in the report
    ev.report_to_master.add_listener(functools.partial(_locust_stats_on_master_clock, environment))
    ev.worker_report.add_listener(functools.partial(master.on_worker_report, environment))
    ev.quit.add_listener(functools.partial(_on_quit, environment))
    ev.quitting.add_listener(stop.on_quitting)
    ev.reset_stats.add_listener(functools.partial(web.form.on_reset_stats, environment))
    ev.reset_stats.add_listener(functools.partial(_restart_server_metrics, environment))
    ev.spawning_complete.add_listener(functools.partial(_reset_with_locust, environment))
    # The live view's listeners run after the ones above on each event (results first, then the freeze).
    ev.test_start.add_listener(live.on_test_start)
    ev.test_stop.add_listener(live.on_test_stop)
    ev.quit.add_listener(functools.partial(live.on_quit, environment))
    ev.quit.add_listener(functools.partial(_print_results_line, environment))  # last: after the exporter's wait


def _locust_stats_on_master_clock(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    """Worker: Locust's statistics in this report put on the master's clock (``locust_internals.on_master_clock``)."""
    runtime = runtime_of(environment)
    if runtime is not None and isinstance(environment.runner, WorkerRunner):
        locust_internals.on_master_clock(data, runtime.run.clock_offset_s)


class _Choices(tuple[str, ...]):
    """Values the web UI offers as a dropdown; every value passes Locust's parser.

    The option's own parser checks it, so a wrong value gets llmload's message with the fix.
    """

    def __contains__(self, _item: object) -> bool:
        return True


def add_arguments(parser: Any) -> None:
    """Add llmload's options to Locust's parser (CLI, ``locust.conf``, ``LOCUST_*`` env, web UI).

    One argument group per ``GROUPS`` entry, in table order: that is also the web UI form's order.
    """
    for name in GROUPS:
        group = parser.add_argument_group(f"llmload: {name}", "run `llmload options` for every option")
        for spec in (s for s in OPTIONS if s.group == name):
            if spec.is_flag:
                action = group.add_argument(
                    spec.flag, action="store_true", default=False, env_var=spec.env, help=spec.help
                )
            else:
                action = group.add_argument(
                    spec.flag,
                    action="append" if spec.repeatable else "store",
                    type=str,
                    default=spec.locust_default,
                    env_var=spec.env,
                    help=spec.help,
                    metavar=spec.metavar,
                    choices=_Choices(spec.choices) if spec.choices else None,
                )
            # An argument group bypasses LocustArgumentParser.add_argument, which is what marks
            # options for the web UI's "Custom parameters"; mark them the same way here
            # (launch-only options stay out: the form could not change them).
            action.include_in_web_ui = not spec.launch_only
            action.is_secret = spec.is_secret
            action.is_required = False
            action.is_multiple = False
    locust_internals.check_after_parse(parser, refusals.check_master_port)


# ── init ────────────────────────────────────────────────────────────────


def _on_init(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    options = environment.parsed_options
    is_worker = isinstance(runner, WorkerRunner)
    launch = refusals.launch_refusal(options)
    if launch is not None and not is_worker:  # e.g. a master port already taken (found before any fork)
        _fatal(environment, launch.message, _options_as_given(options, ()), refused=launch.given)
        return
    try:
        config = RunConfig.from_options(options)
    except ConfigError as exc:
        if is_worker:  # the master's options arrive with the first spawn message
            config = RunConfig()
        else:
            given = refusals.given_values(options, exc.options)
            _fatal(environment, str(exc), _options_as_given(options, exc.options), refused=given)
            return
    runtime = Runtime(config=config)
    attach(environment, runtime)
    if runner is None:
        return
    _bind(environment)
    interrupter = _install_interrupter(environment, runtime)
    cluster.register_messages(runner)
    if is_worker:
        preload_tokenizer(runtime)  # not in the first spawn message's handler: it would starve the heartbeats
        return
    web.install(environment)
    try:
        live.start_exporter(environment, runtime)
    except ConfigError as exc:
        _fatal(environment, str(exc), runtime)
        return
    if options is not None and getattr(options, "headless", False):
        # Fail before any load: options, tokenizer and the target are checked now.
        if interrupter is not None:
            interrupter.guard_sigterm()  # Locust handles SIGTERM only once the load starts
        try:
            prepare(environment, runtime)
        except LLMLoadError as exc:
            refused = refusals.given_values(options, exc.options if isinstance(exc, ConfigError) else ())
            _fatal(environment, str(exc), runtime, refused=refused)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while preflight waits (e.g. a server that never answers)
            runtime.run.stopping = True
            name = (interrupter.signal_name if interrupter is not None else None) or "Ctrl-C"
            _fatal(environment, interrupted_in_preflight(name), runtime, interrupted=True)
        else:
            note_request_limit(options, runtime.process.config)
            if interrupter is not None and isinstance(runner, MasterRunner):
                # Locust's loop that waits for the workers has no orderly stop: llmload ends it.
                interrupter.before_load = functools.partial(
                    _stop_waiting_for_workers, environment, runtime, interrupter
                )
                _bound_the_wait_for_workers(environment, runtime, interrupter)
            elif interrupter is not None:
                interrupter.load_started()


def _install_interrupter(environment: Environment, runtime: Runtime) -> Interrupter | None:
    """Ctrl-C becomes one KeyboardInterrupt in Locust's main greenlet, never one inside a user's read.

    Locust fires ``init`` from its main greenlet in the main thread; anywhere
    else (a test that builds an environment itself) SIGINT is left alone and None is returned.
    """
    if threading.current_thread() is not threading.main_thread() or gevent.getcurrent().parent is not None:
        return None
    interrupter = Interrupter(
        gevent.getcurrent(),
        stopping=lambda: runtime.run.stopping,
        noted=lambda name: _note_stop(environment, runtime, name),
    )
    interrupter.install()
    runtime.process.interrupt_main = interrupter.forward
    environment.events.test_start.add_listener(lambda **_kw: interrupter.load_started())
    options = environment.parsed_options
    if not (options is not None and getattr(options, "headless", False)):
        # the web UI (or a worker) outlives the run's stop: a Ctrl-C that came during it ends the process now
        environment.events.test_stop.add_listener(lambda **_kw: interrupter.stopped())
    return interrupter


def _note_stop(environment: Environment, runtime: Runtime, signal_name: str) -> None:
    """A signal stops a run that sends load: its results say so (``run.stopped_by``); between runs, nothing."""
    runner = environment.runner
    if runner is not None and runner.state in (STATE_SPAWNING, STATE_RUNNING):
        runtime.run.stopped_by = signal_name


def interrupted_in_preflight(signal_name: str) -> str:
    """``interrupted (Ctrl-C) during preflight, before any load``: the blocked reason of a signal in preflight."""
    return f"interrupted ({signal_name}) during preflight, before any load"


INTERRUPTED_IN_PREFLIGHT = interrupted_in_preflight("Ctrl-C")


def _stop_waiting_for_workers(environment: Environment, runtime: Runtime, interrupter: Interrupter, name: str) -> bool:
    """A headless master still waiting for its workers got Ctrl-C or SIGTERM: end before load, with results.

    Locust's waiting loop would raise the interrupt out of its ``main`` (a
    traceback, no results) or die of SIGTERM. Instead: the blocked results
    (``blocked`` says how many workers had connected), the workers that did
    connect told to quit, exit status 2. Returns False once the load started.
    """
    runner = environment.runner
    if not isinstance(runner, MasterRunner) or runtime.run.run_id:
        return False
    runtime.run.stopping = True
    expected = int(getattr(environment.parsed_options, "expect_workers", 1) or 1)
    ready = len(runner.clients.ready)
    connected = "no worker had connected" if ready == 0 else f"only {ready} had connected"
    reason = f"stopped ({name}) while waiting for {expected} worker{'s' if expected != 1 else ''}: {connected}"
    _end_before_load(environment, reason, runtime, interrupted=True)
    runner.quit()  # tells the workers that did connect to quit
    interrupter.exit(2)
    return True


def _bound_the_wait_for_workers(environment: Environment, runtime: Runtime, interrupter: Interrupter) -> None:
    """``--expect-workers-max-wait S``: end a wait that runs out with results instead of Locust's bare exit.

    Locust gives up with "Gave up waiting for workers to connect", exit status 1
    and no results (``quitting`` is never fired), so a script sees a run that
    neither passed nor said why. llmload takes the limit over (Locust's own is
    set to 0, waiting forever) and ends the wait at the same moment: the blocked
    results say how many workers were expected and how many connected, and that
    no load was sent; exit status 2, as for every run stopped before load.
    """
    options = environment.parsed_options
    max_wait_s = float(getattr(options, "expect_workers_max_wait", 0) or 0)
    if options is None or max_wait_s <= 0:
        return
    options.expect_workers_max_wait = 0
    gevent.spawn_later(max_wait_s, _give_up_waiting, environment, runtime, interrupter, max_wait_s)


def _give_up_waiting(environment: Environment, runtime: Runtime, interrupter: Interrupter, max_wait_s: float) -> None:
    """The wait for workers ran out: the blocked results (expected vs connected), the workers told to quit, exit 2.

    Does nothing once the load started (every worker had connected in time).
    """
    runner = environment.runner
    expected = int(getattr(environment.parsed_options, "expect_workers", 1) or 1)
    if not isinstance(runner, MasterRunner) or runtime.run.run_id or interrupter.before_load is None:
        return
    ready = len(runner.clients.ready)
    if ready >= expected:
        return
    interrupter.before_load = None  # a Ctrl-C from now on finds the process already ending
    runtime.run.stopping = True
    reason = (
        f"gave up waiting for workers after --expect-workers-max-wait {max_wait_s:g} s: {ready} of {expected} "
        f"expected worker{'s' if expected != 1 else ''} connected (--expect-workers {expected}); start the missing "
        "workers (they need the master's --master-bind-host/--master-bind-port), raise --expect-workers-max-wait, "
        "or lower --expect-workers"
    )
    _end_before_load(environment, reason, runtime, interrupted=True)  # its line ends "; no load was sent"
    runner.quit()  # tells the workers that did connect to quit
    interrupter.exit(2)


_READ_ATTEMPTS = 4


def _options_as_given(options: Any, refused: tuple[str, ...]) -> Runtime:
    """A runtime for a run whose options were refused: every option as given, the refused ones at their defaults.

    ``refused`` are the flags the first reading refused; a cross-option rule
    that still refuses the rest sets its own options to their defaults too
    (a few rounds). When even that fails: the defaults, with the
    ``--results-json`` path as given.
    """
    specs = {spec.flag: spec for spec in OPTIONS}
    readable, flags = copy.copy(options), set(refused)
    for _ in range(_READ_ATTEMPTS):
        for spec in (specs[flag] for flag in flags & specs.keys()):
            setattr(readable, spec.dest, None if spec.if_unset is None else str(spec.default))
        if "-H" in flags:  # Locust's option, refused with llmload's (an endpoint's URL)
            readable.host = None
        try:
            return Runtime(config=RunConfig.from_options(readable))
        except ConfigError as exc:
            if not set(exc.options) - flags:
                break
            flags |= set(exc.options)
    raw = getattr(options, "results_json", None)
    path = raw.strip() if isinstance(raw, str) and raw.strip() else None
    return Runtime(config=dataclasses.replace(RunConfig(), results_json=path))


def _fatal(
    environment: Environment,
    message: str,
    runtime: Runtime,
    *,
    interrupted: bool = False,
    refused: Mapping[str, str] | None = None,
) -> None:
    """Stop the process before any load: one line on stderr, the blocked results, exit status 2.

    The results (``blocked``: ``message``, verdict ``BLOCKED``, ``run.refused_options``: ``refused``,
    the refused values as given) go to ``--results-json`` when given and, headless on a
    non-terminal, as the ``LLMLOAD_RESULTS`` line, as for any run that ended.
    """
    _end_before_load(environment, message, runtime, interrupted=interrupted, refused=refused)
    sys.exit(2)


def _end_before_load(
    environment: Environment,
    message: str,
    runtime: Runtime,
    *,
    interrupted: bool,
    refused: Mapping[str, str] | None = None,
) -> None:
    """``_fatal`` without the exit: the line, the blocked results, exit status 2, the forked workers stopped."""
    line = f"llmload: {message}; no load was sent" if interrupted else f"llmload: error: {message}"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    _write_blocked_results(environment, runtime, message, refused or {})
    environment.process_exit_code = 2
    if getattr(environment.parsed_options, "processes", None):
        _stop_forked_workers()


def _write_blocked_results(environment: Environment, runtime: Runtime, reason: str, refused: Mapping[str, str]) -> None:
    """Build the results of a run blocked at ``init`` and write them where the run would have (never raises).

    ``refused``: the refused options' values as given (``run.refused_options``).
    """
    options = environment.parsed_options
    config = runtime.process.config
    runtime.run.run_id = uuid.uuid4().hex[:12]
    runtime.run.started_at_unix = time.time()
    runtime.run.blocked = reason
    runtime.process.model = runtime.process.model or config.model
    outcome = checkpoints.run_outcome(environment, runtime, timeseries=())
    results = build_results(dataclasses.replace(outcome, refused_options=dict(refused)))
    runtime.run.results = results
    if config.results_json:
        try:
            write_results_json(config.results_json, results)
        except (OSError, ValueError) as exc:
            log.error(
                "llmload: --results-json %s: the blocked run's results were not written (%s)", config.results_json, exc
            )
    if getattr(options, "headless", False) and not sys.stdout.isatty():
        sys.stdout.write(results_line(results) + "\n")
        sys.stdout.flush()


def _stop_forked_workers() -> None:
    """Send SIGTERM to the workers ``--processes`` forked from this process.

    Locust's exit handler forgets children that are still running, so a run
    refused before load would otherwise leave them waiting 60 s for a master
    (holding the terminal or pipe open all that time). Forked workers share
    this process's command line, which is how they are told apart.
    """
    import psutil

    me = psutil.Process()
    for child in me.children():
        with contextlib.suppress(psutil.Error):
            if child.cmdline() == me.cmdline():
                child.send_signal(signal.SIGTERM)


def _reset_with_locust(environment: Environment, **_kw: Any) -> None:
    """``--reset-stats``: Locust clears its statistics when a ramp-up completes without firing ``reset_stats``.

    llmload's figures (client, time series, server metrics) are cleared at the same moment, so the
    summary and results cover the requests Locust's tables cover.
    """
    if not getattr(environment, "reset_stats", False) or isinstance(environment.runner, WorkerRunner):
        return
    web.form.on_reset_stats(environment, cause="--reset-stats at the end of the ramp-up")
    _restart_server_metrics(environment)


def _restart_server_metrics(environment: Environment, **_kw: Any) -> None:
    """RESET: the server-metrics figures (summary block, cross-check, time-series columns) restart too.

    The new baseline is read in a greenlet of its own: the read waits on the
    network, and inside Locust's ``reset_stats`` event that wait let users
    finish requests between llmload's reset and Locust's (Locust clears its
    table after the event), so llmload counted a few more requests since the
    RESET than Locust's table did (3 of 26 measured at 20 req/s).
    """
    runtime = runtime_of(environment)
    if runtime is None or isinstance(environment.runner, WorkerRunner) or runtime.process.server_scraper is None:
        return
    gevent.spawn(_read_server_baseline, runtime, runtime.process.server_scraper)


def _read_server_baseline(runtime: Runtime, scraper: ServerScraper) -> None:
    """RESET, in its own greenlet: read the server's new baseline, then drop the time series' server columns.

    How long after the RESET the baseline came, and how many requests the client
    counted in between (they count on the client only), go to ``server.reset``.
    """
    scraper.restart()
    reset_at_unix = runtime.run.reset_at_unix
    if reset_at_unix is not None:
        scraper.note_reset(max(0.0, time.time() - reset_at_unix), runtime.run.totals().total().succeeded)
    if runtime.timeline.table is not None:
        runtime.timeline.table.clear_extra()


# ── stop ────────────────────────────────────────────────────────────────


def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    runtime = runtime_of(environment)
    if isinstance(runner, WorkerRunner) or runtime is None or not runtime.run.run_id or runtime.run.results is not None:
        return
    if not isinstance(runner, MasterRunner):
        stop_process_services(runtime)
    options = environment.parsed_options
    checkpoints.stop(runtime)  # a checkpoint write in progress finishes before the final results
    end_s = timeline.run_elapsed_s(runtime)
    # the last server read below may take seconds: the ticks meanwhile write only intervals that ended
    # before end_s (a row written then for the end's interval would cover it as a whole one)
    timeline.end_timeline(runtime, end_s)
    scraper, runtime.process.server_scraper = runtime.process.server_scraper, None
    # the last server-metrics scrape, after the final reports; its deltas go to the run's last interval
    server = (
        None if scraper is None else scraper.finish(interval_index(end_s, runtime.process.config.timeseries_interval_s))
    )
    timeseries, drift = timeline.finish_timeline(environment, runtime, end_s)
    outcome = checkpoints.run_outcome(
        environment,
        runtime,
        timeseries=timeseries,
        server=server,
        drift=drift,
        server_warnings=() if scraper is None else tuple(scraper.warnings()),
    )
    results = build_results(outcome)
    runtime.run.results = results
    if runtime.process.config.results_json:
        write_results_json(runtime.process.config.results_json, results)
    csv_prefix = getattr(options, "csv_prefix", None)
    if csv_prefix:
        try:
            write_csv_files(csv_prefix, results, runtime.timeline.table.extra_columns if runtime.timeline.table else ())
        except OSError as exc:
            log.error("llmload: --csv %s: the LLM CSV files could not be written (%s)", csv_prefix, exc)
    if runtime.process.config.html_report:
        _write_html_report(runtime.process.config.html_report, results)
    environment.process_exit_code = results["exit_status"]  # README "Exit status": 0, 1, or 2 when blocked
    if not (options is not None and getattr(options, "headless", False)):
        _print_summary(results)


def _write_html_report(path: str, results: dict[str, Any]) -> None:
    """Write the HTML report; a failure is logged (the results JSON and summary are already out)."""
    try:
        size = write_html_report(path, [results])
    except (OSError, ReportError) as exc:
        log.error(
            "llmload: --html-report %r was not written (%s); rebuild it with: llmload report RESULTS.json -o %s",
            path,
            exc,
            path,
        )
        return
    log.info("llmload: HTML report written to %s (%d bytes)", path, size)


def _on_test_stopped(environment: Environment, **_kw: Any) -> None:
    """The stop is complete: with the web UI (or on a worker) Ctrl-C may end the process again.

    A headless run goes on to exit, so its stop stays under way until then.
    """
    runtime = runtime_of(environment)
    options = environment.parsed_options
    if runtime is not None and not (options is not None and getattr(options, "headless", False)):
        runtime.run.stopping = False


def _on_quit(environment: Environment, **_kw: Any) -> None:
    """Headless: the summary, once, as the process ends (the web UI printed each run's at its stop)."""
    runtime = runtime_of(environment)
    options = environment.parsed_options
    if not (options is not None and getattr(options, "headless", False)):
        return
    if runtime is not None and runtime.run.results is not None:
        _print_summary(runtime.run.results)


def _print_results_line(environment: Environment, **_kw: Any) -> None:
    """Headless master or single process: the results JSON as the last output line, one line, marked.

    ``kubectl logs`` then recovers the results when no volume was mounted (README "Results file").
    Not printed to a terminal, where the summary is what a user reads.
    """
    runtime = runtime_of(environment)
    options = environment.parsed_options
    if runtime is None or runtime.run.results is None or not getattr(options, "headless", False):
        return
    if sys.stdout.isatty():
        return
    sys.stdout.write(results_line(runtime.run.results) + "\n")
    sys.stdout.flush()


def _print_summary(results: dict[str, Any]) -> None:
    sys.stdout.write("\n" + "\n".join(summary_lines(results)) + "\n")
    sys.stdout.flush()
