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
"""

from __future__ import annotations

from locust import events as locust_events
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

import functools
import json
import logging
import os
import sys
import time
import uuid
from typing import Any

import gevent
import gevent.event

from llmload.config import OPTIONS, RunConfig
from llmload.errors import ConfigError, LLMLoadError, RequestError, WireFormatError
from llmload.exporters.report import RunInfo, build_results, format_summary, write_results_json
from llmload.runtime import RequestBudget, Runtime
from llmload.stats import LLMStats
from llmload.tokens import load_tokenizer
from llmload.transport import GeventHTTPTransport
from llmload.wire import from_wire, to_wire

__all__ = ["add_arguments", "install"]

log = logging.getLogger("llmload")

_PLAN = "llmload_plan"
_FINAL_WAIT_EXTRA_S = 30.0


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
    ev.report_to_master.add_listener(functools.partial(_on_report_to_master, environment))
    ev.worker_report.add_listener(functools.partial(_on_worker_report, environment))
    ev.quit.add_listener(functools.partial(_on_quit, environment))


def add_arguments(parser: Any) -> None:
    """Add llmload's options to Locust's parser (CLI, ``locust.conf``, ``LOCUST_*`` env, web UI)."""
    group = parser.add_argument_group("llmload", "LLM request options (see README: Options)")
    for spec in OPTIONS:
        if spec.is_flag:
            group.add_argument(
                spec.flag, action="store_true", default=False, env_var=spec.env, help=spec.help
            )
        else:
            default = "" if spec.default is None else str(spec.default)
            group.add_argument(
                spec.flag, type=str, default=default, env_var=spec.env, help=spec.help, metavar=spec.metavar
            )


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
    if is_worker:
        runner.register_message("llmload_flush", _on_flush, concurrent=True)
        return
    if isinstance(runner, MasterRunner):
        runner.register_message("llmload_done", _on_worker_done)
        runner.register_message("llmload_final", _on_worker_final)
    if options is not None and getattr(options, "headless", False):
        # Fail before any load: options, tokenizer and the target are checked now.
        try:
            _prepare(environment, runtime)
        except LLMLoadError as exc:
            _fatal(environment, str(exc))


def _fatal(environment: Environment, message: str) -> None:
    log.error("llmload: %s", message)
    sys.stderr.write(f"llmload: error: {message}\n")
    sys.stderr.flush()
    environment.process_exit_code = 2
    sys.exit(2)


def _prepare(environment: Environment, runtime: Runtime) -> None:
    """Validate options, load the tokenizer, resolve the model (master/standalone).

    Raises:
        LLMLoadError: with a message that names the problem and the fix.
    """
    runtime.config = RunConfig.from_options(environment.parsed_options)
    _load_local_parts(runtime)
    host = environment.host or ""
    if not host:
        raise ConfigError("no target host; pass -H http://HOST:PORT (e.g. -H http://127.0.0.1:8000)")
    runtime.model = _resolve_model(host, runtime)


def _load_local_parts(runtime: Runtime) -> None:
    config = runtime.config
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
    key = os.environ.get(config.api_key_env, "")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    runtime.headers = headers
    if config.tokenizer and runtime.token_counter is None:
        runtime.token_counter = load_tokenizer(config.tokenizer)


def _resolve_model(host: str, runtime: Runtime) -> str:
    """Return the model to request, checked against ``GET /v1/models``."""
    transport = GeventHTTPTransport(host, headers=runtime.headers, timeouts=runtime.config.timeouts)
    try:
        reply = transport.get("/v1/models")
    except RequestError as exc:
        raise ConfigError(f"cannot reach {host}/v1/models: {exc}. Is the server up and -H right?") from exc
    finally:
        transport.close()
    status, body = reply.status, reply.body
    if status != 200:
        raise ConfigError(
            f"GET {host}/v1/models answered HTTP {status}: {body[:200]!r}. "
            f"Check -H and the API key variable {runtime.config.api_key_env}."
        )
    try:
        served = [str(m["id"]) for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"GET {host}/v1/models did not return an OpenAI model list ({body[:200]!r}); "
            "is -H an OpenAI-compatible server?"
        ) from exc
    wanted = runtime.config.model
    if wanted is None:
        if not served:
            raise ConfigError(f"{host}/v1/models lists no model; pass --model NAME")
        return served[0]
    if wanted not in served:
        raise ConfigError(f'model "{wanted}" not served; available: {", ".join(served) or "none"}')
    return wanted


# ── test start ──────────────────────────────────────────────────────────
def _on_test_start(environment: Environment, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    options = environment.parsed_options
    if isinstance(runner, WorkerRunner):
        plan = getattr(options, _PLAN, None) or {}
        runtime.config = RunConfig.from_options(options)
        _load_local_parts(runtime)
        runtime.run_id = str(plan.get("run_id", ""))
        runtime.model = plan.get("model")
        runtime.blocked = plan.get("blocked")
        quotas = plan.get("quotas")
        share = None if quotas is None else int(quotas.get(str(runner.worker_index), 0))
        runtime.stats = LLMStats.empty()
        run_id = runtime.run_id
        runtime.budget = RequestBudget(
            share, on_done=lambda: runner.send_message("llmload_done", {"run_id": run_id})
        )
        return

    runtime.run_id = uuid.uuid4().hex[:12]
    runtime.stats = LLMStats.empty()
    runtime.started_at_unix = time.time()
    runtime.results = None
    runtime.blocked = None
    runtime.lost_workers = []
    try:
        _prepare(environment, runtime)
    except LLMLoadError as exc:
        runtime.blocked = str(exc)
        log.error("llmload: %s; not sending load", exc)
        gevent.spawn(_finish_run, environment)
    limit = runtime.config.num_requests
    if isinstance(runner, MasterRunner):
        workers = sorted(
            runner.clients.ready + runner.clients.spawning + runner.clients.running,
            key=lambda c: runner.get_worker_index(c.id),
        )
        quotas = None
        if limit is not None:
            base, extra = divmod(limit, max(len(workers), 1))
            quotas = {
                str(runner.get_worker_index(c.id)): base + (1 if i < extra else 0)
                for i, c in enumerate(workers)
            }
        runtime.planned_workers = {c.id for c in workers}
        runtime.done_workers = set()
        setattr(
            options,
            _PLAN,
            {"run_id": runtime.run_id, "model": runtime.model, "quotas": quotas, "blocked": runtime.blocked},
        )
    else:
        runtime.budget = RequestBudget(limit, on_done=lambda: gevent.spawn(_finish_run, environment))


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
    data["llmload"] = {"run_id": runtime.run_id, "stats": to_wire(runtime.take_delta())}


def _on_worker_report(environment: Environment, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    payload = data.get("llmload")
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if payload is None or runtime is None:
        return
    _merge_payload(runtime, client_id, payload)


def _merge_payload(runtime: Runtime, client_id: str, payload: dict[str, Any]) -> None:
    if payload.get("run_id") != runtime.run_id:
        return  # a late report from a previous run
    try:
        runtime.stats.merge_in(from_wire(payload["stats"]))
    except (WireFormatError, KeyError, TypeError) as exc:
        log.error("llmload: dropped a report from worker %s: %s", client_id, exc)


def _on_worker_done(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    if msg.data.get("run_id") != runtime.run_id:
        return
    runtime.done_workers.add(msg.node_id)
    if runtime.planned_workers <= runtime.done_workers:
        gevent.spawn(_finish_run, environment)


def _on_worker_final(environment: Environment, msg: Any, **_kw: Any) -> None:
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    _merge_payload(runtime, msg.node_id, msg.data)
    runtime.pending_finals.discard(msg.node_id)
    if not runtime.pending_finals:
        runtime.finals_in.set()


def _on_flush(environment: Environment, msg: Any, **_kw: Any) -> None:
    """Worker: stop users, then send everything not yet reported."""
    runtime: Runtime = environment.llmload  # type: ignore[attr-defined]
    runner = environment.runner
    if runner is not None:
        runner.stop()
        runner.send_message(
            "llmload_final", {"run_id": runtime.run_id, "stats": to_wire(runtime.take_delta())}
        )


# ── stop ────────────────────────────────────────────────────────────────
def _on_test_stopping(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if not isinstance(runner, MasterRunner) or runtime is None or not runtime.run_id:
        return
    targets = {c.id for c in runner.clients.all}
    runtime.pending_finals = set(targets)
    runtime.finals_in = gevent.event.Event()
    for client_id in targets:
        runner.send_message("llmload_flush", {"run_id": runtime.run_id}, client_id=client_id)
    if targets:
        runtime.finals_in.wait(timeout=environment.stop_timeout + _FINAL_WAIT_EXTRA_S)
    if runtime.pending_finals:
        runtime.lost_workers = sorted(runtime.pending_finals)
        log.warning(
            "llmload: no final report from %d worker(s) %s; their last unreported requests are missing",
            len(runtime.pending_finals),
            ", ".join(runtime.lost_workers),
        )


def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if isinstance(runner, WorkerRunner) or runtime is None or not runtime.run_id:
        return
    options = environment.parsed_options
    workers = len(runtime.planned_workers) if isinstance(runner, MasterRunner) else 0
    run = RunInfo(
        run_id=runtime.run_id,
        host=environment.host or "",
        user_classes=tuple(sorted(u.__name__ for u in environment.user_classes)),
        model=runtime.model or "",
        users=int(getattr(options, "num_users", 0) or 0),
        workers=workers,
        num_requests=runtime.config.num_requests,
        started_at_unix=runtime.started_at_unix,
        options=_public_options(runtime.config),
    )
    results = build_results(runtime.stats, run=run)
    if runtime.lost_workers:
        results["lost_workers"] = list(runtime.lost_workers)
    if runtime.blocked:
        results["blocked"] = runtime.blocked
    runtime.results = results
    if runtime.config.results_json:
        write_results_json(runtime.config.results_json, results)
    requests = results["requests"]
    if runtime.blocked or requests["total"] == 0 or requests["succeeded"] == 0:
        environment.process_exit_code = 1
    if not (options is not None and getattr(options, "headless", False)):
        _print_summary(results)


def _on_quit(environment: Environment, **_kw: Any) -> None:
    runtime: Runtime | None = getattr(environment, "llmload", None)
    if runtime is not None and runtime.results is not None:
        _print_summary(runtime.results)


def _print_summary(results: dict[str, Any]) -> None:
    sys.stdout.write("\n" + format_summary(results) + "\n")
    sys.stdout.flush()


def _public_options(config: RunConfig) -> dict[str, Any]:
    """Options worth recording in results; the API key is never among them."""
    return {
        "model": config.model,
        "prompt_chars": len(config.prompt),
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "ignore_eos": config.ignore_eos,
        "stream": config.stream,
        "num_requests": config.num_requests,
        "tokenizer": config.tokenizer,
        "timeouts_s": {
            "connect": config.timeouts.connect_s,
            "read_idle": config.timeouts.idle_s,
            "total": config.timeouts.total_s,
        },
    }
