"""Every Locust event listener llmload uses, wired by ``install(events)``.

Distributed protocol (master M, workers W; all payloads carry the run id):

1. ``test_start`` on M: validate options, preflight ``GET /v1/models``, split
   ``--num-requests`` into one share per worker, and publish the plan as the
   parsed option ``llmload_plan`` (Locust ships custom options to workers with
   every ``spawn`` message, so each W knows its share before its users start).
2. Every report interval W adds ``{"llmload": {"run_id", "stats"}}`` (a delta,
   ``llmload.wire`` format) to Locust's report; M merges it.
3. When a W has finished its whole share it sends ``llmload_done``; when all
   planned workers are done, M stops the run.
4. On any stop (``--num-requests`` reached, ``-t``, web UI, SIGTERM) M fires
   ``test_stopping``: it sends ``llmload_flush``; each W stops its users
   (in-flight requests are counted as cancelled) and answers ``llmload_final``
   with its last delta; M waits for all of them (bounded) before Locust tells
   workers to quit. Locust alone stops listening 0.5 s after ``quit`` and
   drops late reports; this step is why final totals are complete.

Server metrics (``--server-metrics``): M (or the single process) scrapes the
inference server's ``/metrics`` after preflight and before the load, every
10 s during it and after the final reports (``llmload.servermetrics_scrape``);
workers never do.

Prometheus exporter (``--prometheus-port``, not 0): M (or the single process)
serves ``/metrics`` from ``init`` until the end of the grace period after
``quit``. Each W also sends its delta every 0.5 s as ``llmload_live``
(same payload as step 2, plus ``in_flight``), so M's counters and live window
lag by at most half a second instead of Locust's 3 s report interval; every
record still travels in exactly one delta.
"""

from __future__ import annotations

from locust import events as locust_events
from locust.env import Environment
from locust.event import Events
from locust.exception import RPCError, RPCSendError
from locust.runners import STATE_INIT, STATE_MISSING, STATE_STOPPED, MasterRunner, WorkerRunner

import functools
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import gevent
import gevent.event
import gevent.lock

from llmload import preflight
from llmload.arrivals import Arrival, ArrivalSchedule
from llmload.config import RunConfig
from llmload.credentials import public_url, split_credentials
from llmload.errors import ConfigError, LLMLoadError, WireFormatError
from llmload.exporters.console import results_line, summary_lines
from llmload.exporters.load import SendFigures
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.requests_log import RequestsLog, worker_path
from llmload.exporters.results import RunOutcome, build_results, write_results_json
from llmload.exporters.sections import client_saturated
from llmload.exporters.window import RunView, SlidingWindow
from llmload.interrupt import Interrupter
from llmload.options import GROUPS, OPTIONS
from llmload.plan import RunPlan, WorkerShare, split_run, users_per_worker
from llmload.runtime import CpuMonitor, ExportState, RequestBudget, Runtime, SendWindow, WarmupGate
from llmload.servermetrics_scrape import ServerScraper, fetch_text, metrics_urls
from llmload.stats import LLMStats
from llmload.tokens import load_tokenizer
from llmload.transport import GeventHTTPTransport
from llmload.version import __version__
from llmload.wire import WorkerReport, plan_from_wire, plan_to_wire, report_from_wire, report_run_id, report_to_wire
from llmload.workload import build_workload

__all__ = ["add_arguments", "install"]

log = logging.getLogger("llmload")

_PLAN = "llmload_plan"
_FINAL_WAIT_EXTRA_S = 30.0
_FINAL_POLL_S = 0.25
_WATCH_INTERVAL_S = 0.5  # README: a lost worker is noticed within about 5 s (Locust: 4 missed 1 s heartbeats)
_PROBLEMS_LOGGED = 10


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
    ev.test_start.add_listener(_on_test_start)
    ev.test_stopping.add_listener(_on_test_stopping)
    ev.test_stop.add_listener(_on_test_stop)
    ev.test_stop.add_listener(_on_test_stopped)
    ev.report_to_master.add_listener(functools.partial(_on_report_to_master, environment))
    ev.worker_report.add_listener(functools.partial(_on_worker_report, environment))
    ev.quit.add_listener(functools.partial(_on_quit, environment))
    ev.quitting.add_listener(_on_quitting)
    _bind_exporter(environment)
    ev.quit.add_listener(functools.partial(_print_results_line, environment))  # last: after the exporter's wait


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
                    type=str,
                    default=spec.locust_default,
                    env_var=spec.env,
                    help=spec.help,
                    metavar=spec.metavar,
                    choices=_Choices(spec.choices) if spec.choices else None,
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
    if is_worker:
        runner.register_message("llmload_flush", _on_flush, concurrent=True)
        return
    if isinstance(runner, MasterRunner):
        runner.register_message("llmload_done", _on_worker_done)
        runner.register_message("llmload_final", _on_worker_final)
    _start_exporter(environment, runtime)
    if options is not None and getattr(options, "headless", False):
        # Fail before any load: options, tokenizer and the target are checked now.
        try:
            _prepare(environment, runtime)
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


def _prepare(environment: Environment, runtime: Runtime) -> None:
    """Validate options, load the tokenizer, preflight the target (master/standalone).

    Runs at ``init`` for headless runs (before any load) and again at each test
    start when the options or host changed (web UI).

    Raises:
        LLMLoadError: with a message that names the problem and the fix.
    """
    config = RunConfig.from_options(environment.parsed_options)
    host = _strip_credentials(environment, runtime)
    if runtime.prepared_for == (host, config):
        return
    runtime.config = config
    if config.results_json:
        _check_writable(config.results_json)
    _load_local_parts(runtime)
    if not host:
        raise ConfigError("no target host; pass -H http://HOST:PORT (e.g. -H http://127.0.0.1:8000)")
    if config.insecure:
        log.warning("llmload: --insecure: TLS certificates of %s are NOT verified", host)
    transport = GeventHTTPTransport(host, headers=runtime.headers, timeouts=config.timeouts, insecure=config.insecure)
    try:
        models = preflight.fetch_models(host, transport.get, config.api_key_env)
        runtime.model = preflight.choose_model(models, config.model, host)
        if not config.skip_preflight:
            probes = [
                (cls.__name__, cls.build_request(runtime, max_tokens=2))  # type: ignore[attr-defined]
                for cls in environment.user_classes
                if callable(getattr(cls, "build_request", None))
            ]
            report = preflight.probe(transport, probes, config, models, runtime.model)
            for note in report.notes:
                log.info("llmload preflight: %s", note)
            for warning in report.warnings:
                log.warning("llmload preflight: %s", warning)
    finally:
        transport.close()
    users = int(getattr(environment.parsed_options, "num_users", 0) or 0)
    workers = int(getattr(environment.parsed_options, "expect_workers", 1) or 1)
    per_process = users if not isinstance(environment.runner, MasterRunner) else -(-users // max(workers, 1))
    raised = preflight.check_open_files(per_process)
    if raised:
        log.info("llmload: %s", raised)
    runtime.prepared_for = (host, config)


def _strip_credentials(environment: Environment, runtime: Runtime) -> str:
    """Move ``user:password@`` out of the target host into ``runtime.url_authorization``; return the host.

    Every later use of the host (Locust's HTML report and web UI, logs, error
    messages, results, Prometheus, the spawn messages to workers) then sees it
    without credentials; they are sent only as the ``Authorization`` header.
    A host typed again without them (web UI) keeps the credentials it had.
    """
    host = environment.host or ""
    target = split_credentials(host)
    if target.authorization is not None:
        runtime.url_authorization = target.authorization
        environment.host = target.public
        options = environment.parsed_options
        if options is not None and getattr(options, "host", None):
            options.host = public_url(options.host)
    elif runtime.prepared_for is None or runtime.prepared_for[0] != host:
        runtime.url_authorization = None
    return target.public


def _check_writable(path: str) -> None:
    """Refuse before load a results path that could not be written after it (results would be lost).

    Raises:
        ConfigError: naming the path and why.
    """
    target = os.path.abspath(path)
    if os.path.isdir(target):
        raise ConfigError(f"--results-json {path!r} is a directory; pass a file path such as {path}/results.json")
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".llmload-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--results-json {path!r} cannot be written ({exc.strerror}); pass a path in a writable directory"
        ) from None


def _load_local_parts(runtime: Runtime) -> None:
    """Build request headers (API key from the variable or file) and load the tokenizer.

    Raises:
        ConfigError: the key file cannot be read.
        TokenizerError: the tokenizer cannot be loaded locally.
    """
    config = runtime.config
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
    key = os.environ.get(config.api_key_env, "")
    if config.api_key_file:
        try:
            with open(config.api_key_file, encoding="utf-8") as handle:
                key = handle.readline().strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read --api-key-file {config.api_key_file!r}: {exc.strerror}; "
                "pass a readable file whose first line is the key"
            ) from None
    if key:
        headers["Authorization"] = f"Bearer {key}"
        if runtime.url_authorization:
            log.warning(
                "llmload: -H carries user:password@ and an API key is set; sending the API key only "
                "(Authorization: Bearer). Remove one of them"
            )
    elif runtime.url_authorization:
        headers["Authorization"] = runtime.url_authorization
    elif config.api_key_env != "OPENAI_API_KEY" and not config.api_key_file:
        log.warning(
            "llmload: --api-key-env %s: that variable is unset or empty; sending no API key", config.api_key_env
        )
    runtime.headers = headers
    if config.tokenizer and runtime.token_counter is None:
        runtime.token_counter = load_tokenizer(config.tokenizer, allow_download=config.allow_download)
    _load_workload(runtime)


def _load_workload(runtime: Runtime) -> None:
    """Build the prompt source once per options (issue 3); report skipped dataset lines.

    Raises:
        DatasetError: no usable dataset line, or an exact length is unreachable.
    """
    config = runtime.config
    if runtime.workload is not None and runtime.workload.config == config:
        return
    runtime.workload = None
    workload = build_workload(config, runtime.token_counter)
    dataset = workload.dataset
    if dataset is not None:
        for problem in dataset.problems[:_PROBLEMS_LOGGED]:
            log.warning("llmload: skipped dataset line %s", problem)
        if dataset.skipped > _PROBLEMS_LOGGED:
            log.warning("llmload: ... and %d more bad lines in %s", dataset.skipped - _PROBLEMS_LOGGED, dataset.path)
    log.info("llmload: prompts: %s", workload.describe())
    if runtime.token_counter is None:
        log.info("llmload: no --tokenizer: token counts come from server usage (stream_options.include_usage)")
    runtime.workload = workload


# ── test start ──────────────────────────────────────────────────────────
def _on_test_start(environment: Environment, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    options = environment.parsed_options
    if isinstance(runner, WorkerRunner):
        raw_plan = getattr(options, _PLAN, None)
        plan_error = None
        try:
            plan = RunPlan() if raw_plan is None else plan_from_wire(raw_plan)
        except WireFormatError as exc:
            plan, plan_error = RunPlan(run_id=str(report_run_id(raw_plan) or "")), str(exc)
        runtime.config = RunConfig.from_options(options)
        runtime.stopping = False
        runtime.run_id = plan.run_id
        runtime.model = plan.model
        runtime.blocked = plan.blocked or plan_error
        runtime.url_authorization = plan.url_authorization or runtime.url_authorization
        try:
            _load_local_parts(runtime)
        except LLMLoadError as exc:
            runtime.blocked = runtime.blocked or str(exc)
            log.error("llmload: %s; this worker sends no load", exc)
        share = plan.share_for(str(runner.worker_index))
        _start_workload(runtime, share, plan.workers)
        _start_open_loop(runtime, share)
        runtime.stats = LLMStats.empty()
        run_id = runtime.run_id
        runtime.budget = RequestBudget(
            share.quota_requests, on_done=lambda: runner.send_message("llmload_done", {"run_id": run_id})
        )
        users_here = plan.users_per_worker
        try:
            raised = preflight.check_open_files(users_here)
            if raised:
                log.info("llmload: %s", raised)
        except ConfigError as exc:
            runtime.blocked = str(exc)
            log.error("llmload: %s; this worker sends no load", exc)
        _start_process_services(runtime, runner.worker_index)
        return

    runtime.run_id = uuid.uuid4().hex[:12]
    runtime.stats = LLMStats.empty()
    runtime.started_at_unix = time.time()
    runtime.results = None
    runtime.blocked = None
    runtime.lost_workers = []
    runtime.flushed = False
    runtime.stopping = False
    runtime.finals_from = set()
    runtime.cpu_saturated_s = 0.0
    runtime.send_figures_by_process = {}
    try:
        _prepare(environment, runtime)
    except LLMLoadError as exc:
        runtime.blocked = str(exc)
        log.error("llmload: %s; not sending load", exc)
        gevent.spawn(_finish_run, environment)
    else:
        _start_server_metrics(environment, runtime)
    limit = runtime.config.num_requests
    if isinstance(runner, MasterRunner):
        workers = sorted(
            runner.clients.ready + runner.clients.spawning + runner.clients.running,
            key=lambda c: runner.get_worker_index(c.id),
        )
        runtime.planned_workers = {c.id for c in workers}
        runtime.done_workers = set()
        users = int(getattr(options, "num_users", 0) or 0)
        plan = RunPlan(
            run_id=runtime.run_id,
            model=runtime.model,
            url_authorization=runtime.url_authorization,
            blocked=runtime.blocked,
            users_per_worker=users_per_worker(users, len(workers)),
            workers=len(workers),
            limited=limit is not None,
            shares={
                str(runner.get_worker_index(c.id)): share
                for c, share in zip(workers, _split(runtime.config, len(workers)), strict=True)
            },
        )
        setattr(options, _PLAN, plan_to_wire(plan))
        gevent.spawn(_watch_workers, environment, runtime.run_id)
    else:
        (share,) = _split(runtime.config, 1)
        runtime.budget = RequestBudget(share.quota_requests, on_done=lambda: gevent.spawn(_finish_run, environment))
        _start_workload(runtime, share, 1)
        _start_open_loop(runtime, share)
        _start_process_services(runtime, None)


def _start_server_metrics(environment: Environment, runtime: Runtime) -> None:
    """Start scraping the server's metrics (master or single process), after preflight and before any load."""
    config = runtime.config
    auto_url, extra_urls = metrics_urls(environment.host or "", config.server_metrics)
    if auto_url is None and not extra_urls:
        return
    scraper = ServerScraper(
        auto_url,
        extra_urls,
        model=runtime.model,
        headers=runtime.headers,
        fetch=functools.partial(fetch_text, insecure=config.insecure),
    )
    scraper.start()
    runtime.server_scraper = scraper if scraper.active else None


def _split(config: RunConfig, workers: int) -> tuple[WorkerShare, ...]:
    return split_run(
        workers,
        num_requests=config.num_requests,
        warmup_requests=config.warmup_requests,
        request_rate=config.request_rate,
        max_concurrency=config.max_concurrency,
    )


def _start_open_loop(runtime: Runtime, share: WorkerShare) -> None:
    """Set this process's arrival schedule (its share of --request-rate) and in-flight cap."""
    config = runtime.config
    rate, concurrency, rank = share.rate_per_s, share.concurrency, share.rank
    runtime.schedule = (
        None
        if rate is None
        else ArrivalSchedule(
            rate=rate, arrival=Arrival(config.arrival), burstiness=config.burstiness, seed=config.seed * 1009 + rank
        )
    )
    runtime.schedule_start_s = 0.0  # set by the first request that takes an arrival
    runtime.sends = SendWindow()
    runtime.stopped_at_s = None
    runtime.concurrency = None if concurrency is None else gevent.lock.BoundedSemaphore(concurrency)


def _start_workload(runtime: Runtime, share: WorkerShare, workers: int) -> None:
    """Start this process's prompt stream (rank of the workers) and its warm-up share."""
    stride = workers or 1
    rank = share.rank
    runtime.prompts = runtime.workload.stream(rank, stride) if runtime.workload and rank < stride else None
    warmup = share.warmup_requests
    runtime.warmup = WarmupGate(warmup) if warmup > 0 else None


def _start_process_services(runtime: Runtime, worker_index: int | None) -> None:
    """Open the requests log and start the CPU monitor in a process that runs users."""
    if runtime.requests_log is not None:
        runtime.requests_log.close()
        runtime.requests_log = None
    if runtime.config.requests_log:
        runtime.requests_log = RequestsLog(worker_path(runtime.config.requests_log, worker_index))
    if runtime.cpu is None:
        runtime.cpu = CpuMonitor()
    runtime.cpu.start()


def _stop_process_services(runtime: Runtime) -> None:
    if runtime.requests_log is not None:
        runtime.requests_log.close()
        runtime.requests_log = None
    if runtime.cpu is not None:
        runtime.cpu.stop()
        runtime.cpu_saturated_s = max(runtime.cpu_saturated_s, runtime.cpu.saturated_s)


def _watch_workers(environment: Environment, run_id: str) -> None:
    """Master: notice workers lost mid-run and end a --num-requests run without them.

    A worker that stops sending heartbeats is marked missing by Locust; what it
    had reported stays in the totals, its unfinished share is lost, and the
    results name it under ``lost_workers``.
    """
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    assert isinstance(runner, MasterRunner)
    while True:
        gevent.sleep(_WATCH_INTERVAL_S)
        if runtime.run_id != run_id or runtime.results is not None or runtime.flushed:
            return  # the run is stopping: workers leaving now are not lost
        alive = {c.id for c in runner.clients.all if c.state != STATE_MISSING}
        for client_id in sorted(runtime.planned_workers - alive - runtime.finals_from):
            if client_id not in runtime.lost_workers:
                runtime.lost_workers.append(client_id)
                log.warning("llmload: worker %s lost mid-run; its unreported requests are missing", client_id)
        remaining = runtime.planned_workers - set(runtime.lost_workers)
        if runtime.config.num_requests is not None and remaining <= runtime.done_workers and not runtime.flushed:
            if runtime.lost_workers:
                gevent.spawn(_finish_run, environment)
            return


def _finish_run(environment: Environment) -> None:
    """Stop the run (headless: quit Locust, web UI: stop the test)."""
    runner = environment.runner
    if runner is None:
        return
    options = environment.parsed_options
    if options is not None and getattr(options, "headless", False):
        runner.quit()
    else:
        runner.stop()


# ── worker → master ─────────────────────────────────────────────────────
def _on_report_to_master(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if runtime is None or not runtime.run_id or not isinstance(environment.runner, WorkerRunner):
        return
    data["llmload"] = _payload(runtime)


def _report(runtime: Runtime) -> WorkerReport:
    """A worker's delta since its last report, with its CPU saturation so far."""
    cpu_s = max(runtime.cpu_saturated_s, runtime.cpu.saturated_s if runtime.cpu else 0.0)
    return WorkerReport(
        run_id=runtime.run_id,
        stats=runtime.take_delta(),
        cpu_saturated_s=cpu_s,
        in_flight=runtime.in_flight,
        sends=runtime.send_figures().as_wire(),
    )


def _payload(runtime: Runtime) -> dict[str, Any]:
    return report_to_wire(_report(runtime))


def _on_worker_report(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    payload = data.get("llmload")
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if payload is None or runtime is None:
        return
    _merge_payload(runtime, client_id, payload)


def _merge_payload(runtime: Runtime, client_id: str, payload: object) -> None:
    if report_run_id(payload) != runtime.run_id:
        return  # a late report from a previous run
    try:
        report = report_from_wire(payload)
    except WireFormatError as exc:
        log.error("llmload: dropped a report from worker %s: %s", client_id, exc)
        return
    runtime.cpu_saturated_s = max(runtime.cpu_saturated_s, report.cpu_saturated_s)
    if report.sends:
        runtime.send_figures_by_process[client_id] = SendFigures.from_wire(report.sends)
    runtime.stats.merge_in(report.stats)
    if runtime.export is not None:
        _feed_exporter(runtime.export, client_id, report.stats, report.in_flight)


def _on_worker_done(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    if report_run_id(msg.data) != runtime.run_id:
        return
    runtime.done_workers.add(msg.node_id)
    if runtime.planned_workers <= runtime.done_workers:
        gevent.spawn(_finish_run, environment)


def _on_worker_final(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    _merge_payload(runtime, msg.node_id, msg.data)
    if report_run_id(msg.data) == runtime.run_id:
        runtime.finals_from.add(msg.node_id)
    runtime.pending_finals.discard(msg.node_id)
    if not runtime.pending_finals:
        runtime.finals_in.set()


def _on_flush(environment: Environment, msg: Any, **_kw: Any) -> None:
    """Worker: stop users, then send everything not yet reported."""
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    if runner is not None:
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
    if not runtime.run_id:
        return
    running = runner.state not in (STATE_INIT, STATE_STOPPED)
    if running:
        runner.stop()
    if not running and runtime.stats.is_empty():
        return
    try:
        runner.send_message("llmload_final", _payload(runtime))
    except (RPCError, RPCSendError) as exc:
        log.warning("llmload: final report to the master failed (%s); this worker's last requests are missing", exc)


# ── stop ────────────────────────────────────────────────────────────────
def _on_test_stopping(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if runtime is not None:
        runtime.stopping = True
        if runtime.stopped_at_s is None:
            runtime.stopped_at_s = time.perf_counter()  # the open-loop schedule's lag is read as of now
    if not isinstance(runner, MasterRunner) or runtime is None or not runtime.run_id:
        return
    deadline_s = time.monotonic() + environment.stop_timeout + _FINAL_WAIT_EXTRA_S
    if runtime.flushed:
        # A second stop while the first one waits (Ctrl-C and "the last worker quit" together):
        # wait for the same final reports, so the results are never built without them.
        _await_finals(runner, runtime, deadline_s)
        return
    runtime.flushed = True
    targets = {c.id for c in runner.clients.all if c.state != STATE_MISSING} - runtime.finals_from
    runtime.pending_finals = set(targets)
    runtime.finals_in = gevent.event.Event()
    for client_id in targets:
        runner.send_message("llmload_flush", {"run_id": runtime.run_id}, client_id=client_id)
    _await_finals(runner, runtime, deadline_s)
    if runtime.pending_finals:
        runtime.lost_workers = sorted(set(runtime.lost_workers) | runtime.pending_finals)
        log.warning(
            "llmload: no final report from %d worker(s) %s; their last unreported requests are missing",
            len(runtime.pending_finals),
            ", ".join(runtime.lost_workers),
        )


def _await_finals(runner: MasterRunner, runtime: Runtime, deadline_s: float) -> None:
    """Wait (until ``deadline_s``, monotonic) for the final reports still pending.

    A worker that quit on its own has sent its final report before its
    ``quit`` message (one ordered connection), so a pending worker that is no
    longer connected is not waited for.
    """
    while runtime.pending_finals:
        connected = {c.id for c in runner.clients.all if c.state != STATE_MISSING}
        runtime.pending_finals &= connected
        remaining_s = deadline_s - time.monotonic()
        if not runtime.pending_finals or remaining_s <= 0:
            break
        runtime.finals_in.wait(timeout=min(remaining_s, _FINAL_POLL_S))
    if not runtime.pending_finals:
        runtime.finals_in.set()


def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if isinstance(runner, WorkerRunner) or runtime is None or not runtime.run_id or runtime.results is not None:
        return
    if not isinstance(runner, MasterRunner):
        _stop_process_services(runtime)
    options = environment.parsed_options
    if not isinstance(runner, MasterRunner):
        runtime.send_figures_by_process["local"] = runtime.send_figures()
    scraper, runtime.server_scraper = runtime.server_scraper, None
    outcome = RunOutcome(
        stats=runtime.stats,
        config=runtime.config,
        run_id=runtime.run_id,
        host=public_url(environment.host or ""),
        user_classes=tuple(sorted(u.__name__ for u in environment.user_classes)),
        model=runtime.model or "",
        users=int(getattr(options, "num_users", 0) or 0),
        workers=len(runtime.planned_workers) if isinstance(runner, MasterRunner) else 0,
        started_at_unix=runtime.started_at_unix,
        blocked=runtime.blocked,
        lost_workers=tuple(runtime.lost_workers),
        cpu_saturated_s=runtime.cpu_saturated_s,
        sends=SendFigures.combine(runtime.send_figures_by_process.values()),
        server=None if scraper is None else scraper.finish(),
    )
    results = build_results(outcome)
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


def _on_quitting(environment: Environment, **_kw: Any) -> None:
    """SIGTERM/SIGINT or Ctrl-C mid-run: stop the load and collect results before Locust exits.

    Locust's shutdown fires ``quitting`` and reads the exit code before it stops
    the runner; stopping here first makes the results file, the summary and the
    exit code include everything the workers measured.
    """
    runtime: Runtime | None = getattr(environment, "llmload", None)
    runner = environment.runner
    if runtime is None or runner is None:
        return
    runtime.stopping = True  # the process is going away: a further Ctrl-C changes nothing
    if isinstance(runner, WorkerRunner):
        _finish_worker(runtime, runner)
        return
    if runtime.run_id and runtime.results is None:
        log.info("llmload: stopping the load and collecting final reports before exit")
        runner.stop()


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
    sys.stdout.write(results_line(runtime.results) + "\n")
    sys.stdout.flush()


def _print_summary(results: dict[str, Any]) -> None:
    sys.stdout.write("\n" + "\n".join(summary_lines(results)) + "\n")
    sys.stdout.flush()


# ── Prometheus exporter (issue 5) ───────────────────────────────────────
_LIVE_REPORT_INTERVAL_S = 0.5
_STOP_LIVE_TIMEOUT_S = 5.0


def _bind_exporter(environment: Environment) -> None:
    """Register the exporter's listeners; they run after the ones above on each event."""
    ev = environment.events
    ev.test_start.add_listener(_on_test_start_export)
    ev.test_stop.add_listener(_on_test_stop_export)
    ev.quit.add_listener(functools.partial(_on_quit_export, environment))
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        runner.register_message("llmload_live", _on_worker_live)


def _start_exporter(environment: Environment, runtime: Runtime) -> None:
    """Master or single process: serve /metrics now, before any load; a bind error stops the run."""
    config = runtime.config
    if config.prometheus_port == 0:
        return
    exporter = PrometheusExporter(functools.partial(_run_view, environment))
    try:
        port = exporter.start(config.prometheus_port, config.prometheus_host)
    except ConfigError as exc:
        _fatal(environment, str(exc))
        return
    runtime.export = ExportState(exporter=exporter, window=SlidingWindow(), grace_s=config.prometheus_grace_s)
    log.info("llmload: Prometheus metrics at http://%s:%d/metrics", config.prometheus_host or "0.0.0.0", port)


def _run_view(environment: Environment) -> RunView:
    """What one scrape reports (called by the exporter at scrape time; does not yield)."""
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    export = runtime.export
    stats = runtime.stats
    in_flight = runtime.in_flight
    workers = 0
    if isinstance(runner, MasterRunner):
        workers = runner.worker_count
        if export is not None:
            in_flight = sum(export.worker_in_flight.values())
    if export is not None and export.final_stats is not None:
        stats = export.final_stats
    return RunView(
        stats=stats,
        window=export.window.view() if export is not None else None,
        users=int(runner.user_count) if runner is not None else 0,
        in_flight_requests=in_flight,
        workers=workers,
        run_id=runtime.run_id,
        host=public_url(environment.host or ""),
        model=runtime.model or "",
        version=__version__,
        started_at_unix=runtime.started_at_unix or None,
        client_saturated=client_saturated(
            max(runtime.cpu_saturated_s, runtime.cpu.saturated_s if runtime.cpu else 0.0), stats.total().read_lag_s
        ),
        lost_workers=len(runtime.lost_workers),
    )


def _feed_exporter(export: ExportState, client_id: str, delta: LLMStats, in_flight: object) -> None:
    export.window.add(delta, client_id)
    if isinstance(in_flight, int):
        export.worker_in_flight[client_id] = in_flight


def _on_worker_live(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    _merge_payload(runtime, msg.node_id, msg.data)


def _on_test_start_export(environment: Environment, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    _stop_live(runtime)
    if isinstance(runner, WorkerRunner):
        if runtime.config.prometheus_port and runtime.run_id:
            runtime.live_task = gevent.spawn(_send_live_reports, runner, runtime)
        return
    export = runtime.export
    if export is None:
        return
    export.window.reset()
    export.worker_in_flight.clear()
    export.final_stats = None
    export.exporter.mark_running()
    if not isinstance(runner, MasterRunner):
        runtime.window_delta = LLMStats.empty()
        runtime.live_task = gevent.spawn(_tick_window_forever, runtime, export)


def _send_live_reports(runner: WorkerRunner, runtime: Runtime) -> None:
    """Worker: ship the delta every 0.5 s (see the module docstring).

    Sends are aligned to the wall clock (every whole and half second), so every
    worker's counters reach the master at the same offset in each second and a
    scrape sees a constant lag, which ``rate()`` cancels out.
    """
    while True:
        gevent.sleep(_LIVE_REPORT_INTERVAL_S - time.time() % _LIVE_REPORT_INTERVAL_S)
        report = _report(runtime)
        try:
            # Non-blocking send: nothing runs between taking the delta and handing it to zmq.
            runner.send_message("llmload_live", report_to_wire(report))
        except (RPCError, RPCSendError) as exc:
            runtime.stats.merge_in(report.stats)  # keep it for the next report
            log.warning("llmload: live report to the master failed (%s); it will be sent later", exc)


def _tick_window_forever(runtime: Runtime, export: ExportState) -> None:
    """Single process: hand the recent records to the live window every 0.5 s."""
    while True:
        gevent.sleep(_LIVE_REPORT_INTERVAL_S)
        _tick_window(runtime, export)


def _tick_window(runtime: Runtime, export: ExportState) -> None:
    delta = runtime.window_delta
    if delta is not None:
        runtime.window_delta = LLMStats.empty()
        export.window.add(delta, "local")


def _stop_live(runtime: Runtime) -> None:
    task, runtime.live_task = runtime.live_task, None
    if task is not None:
        task.kill(block=True, timeout=_STOP_LIVE_TIMEOUT_S)


def _on_test_stop_export(environment: Environment, **_kw: Any) -> None:
    """Freeze what scrapes report to the statistics the results were just built from."""
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if runtime is None:
        return
    _stop_live(runtime)
    export = runtime.export
    if export is None or isinstance(environment.runner, WorkerRunner):
        return
    _tick_window(runtime, export)
    runtime.window_delta = None
    export.worker_in_flight.clear()
    if export.final_stats is None:
        export.final_stats = LLMStats.empty().merge(runtime.stats)
    export.exporter.mark_final()


def _on_quit_export(environment: Environment, **_kw: Any) -> None:
    """Keep /metrics up until one scrape has read the final totals (at most the grace period).

    Runs in ``quit``, the last event before Locust's ``sys.exit``.
    """
    runtime: Runtime | None = getattr(environment, "llmload", None)
    export = runtime.export if runtime is not None else None
    if export is None:
        return
    exporter = export.exporter
    if exporter.scrapes and export.grace_s > 0:
        log.info("llmload: waiting up to %g s for a Prometheus scrape of the final totals", export.grace_s)
        if not exporter.wait_for_final_scrape(export.grace_s):
            log.warning("llmload: no scrape of the final totals within --prometheus-grace %g s", export.grace_s)
    exporter.stop()
