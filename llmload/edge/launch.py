"""What a process does before its users send: options, credentials, API key, tokenizer, workload, preflight.

``prepare`` runs on the master (or the single process) at ``init`` for
headless runs and again at each test start; ``load_local_parts`` runs on each
worker at test start. ``start_workload``, ``start_open_loop`` and
``start_process_services`` apply one ``WorkerShare`` of the run plan
(``llmload.run.plan``) to this process.
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import MasterRunner

import argparse
import contextlib
import dataclasses
import logging
import os
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import gevent
import gevent.event
import gevent.lock

from llmload.edge.run_parts import CpuMonitor, WarmupGate
from llmload.edge.runtime import Runtime
from llmload.errors import ConfigError, LLMLoadError
from llmload.exporters.requests_log import RequestsLog, worker_path
from llmload.net.scrape import ServerScraper, metrics_urls, routed_fetch
from llmload.net.transport import GeventHTTPTransport
from llmload.request import preflight
from llmload.request.payloads import LLMRequest, check_endpoint_path, check_host_path, check_host_v1
from llmload.request.record import RequestRecord
from llmload.request.tokens import load_tokenizer
from llmload.run.plan import RequestLimitNote, WorkerShare, split_run
from llmload.settings import proxies
from llmload.settings.config import RunConfig, Timeouts
from llmload.settings.credentials import public_url, secret_query_names, split_credentials
from llmload.workload.arrivals import Arrival, ArrivalSchedule
from llmload.workload.prompts import build_workload
from llmload.workload.session_file import SessionStream
from llmload.workload.trace import Trace, TraceCursor, trace_shares

__all__ = [
    "TRACE_LEAD_S",
    "choose_route",
    "load_local_parts",
    "note_request_limit",
    "preflight_limit_s",
    "preflight_step",
    "preflight_timeouts",
    "preload_tokenizer",
    "prepare",
    "split",
    "start_open_loop",
    "start_process_services",
    "start_server_metrics",
    "start_workload",
    "stop_process_services",
]

log = logging.getLogger("llmload")


_PROBLEMS_LOGGED = 10
TRACE_LEAD_S = 1.0
"""A trace's first line is due this long after the run starts (users spawn in between), on every worker alike."""


def prepare(
    environment: Environment, runtime: Runtime, *, options: argparse.Namespace | None = None, host: str | None = None
) -> None:
    """Validate options, load the tokenizer, preflight the target (master/standalone).

    Runs at ``init`` for headless runs (before any load), when the web UI's
    form is posted (``options`` and ``host`` as posted, before Locust applies
    them) and again at each test start, where it does nothing when the
    options and host are those already prepared.

    Raises:
        LLMLoadError: with a message that names the problem and the fix.
    """
    options = environment.parsed_options if options is None else options
    config = RunConfig.from_options(options)
    host = _strip_credentials(environment, runtime, (environment.host or "") if host is None else host)
    if runtime.process.prepared_for == (host, config):
        return
    runtime.process.config = config
    _check_endpoint_path(environment, config, host)
    _check_batch_size(environment, config)
    _check_users(environment, options)
    _check_processes_port(environment, options)
    for flag, path in (
        ("--results-json", config.results_json),
        ("--html-report", config.html_report),
        ("--timeseries", config.timeseries),
    ):
        if path:
            _check_writable(flag, path)
    load_local_parts(runtime)
    if not host:
        raise ConfigError("no target host; pass -H http://HOST:PORT (e.g. -H http://127.0.0.1:8000)")
    if config.insecure:
        log.warning("llmload: --insecure: TLS certificates of %s are NOT verified", host)
    runtime.process.proxy_note = choose_route(runtime, host)
    limit_s = preflight_limit_s(config, getattr(options, "run_time", None))
    transport = GeventHTTPTransport(
        host,
        headers=runtime.process.headers,
        timeouts=preflight_timeouts(config, limit_s),
        insecure=config.insecure,
        proxy=runtime.process.proxy,
    )
    try:
        with preflight_step(f"GET {public_url(preflight.join_url(host, '/v1/models'))}", limit_s):
            models = preflight.fetch_models(
                host, transport.get, config.api_key_env, model=config.model, key_sent_as=runtime.process.key_sent_as
            )
        if models.missing is not None:
            log.warning("llmload preflight: %s; using --model %s as given", models.missing, config.model)
        runtime.process.model = preflight.choose_model(models, config.model, host)
        if not config.skip_preflight:
            probes = [
                (cls.__name__, cls.build_request(runtime, max_tokens=2))  # type: ignore[attr-defined]
                for cls in environment.user_classes
                if callable(getattr(cls, "build_request", None))
            ]
            classes = {getattr(cls, "endpoint", ""): cls for cls in environment.user_classes}

            def without_usage(request: LLMRequest, record: RequestRecord) -> LLMRequest | None:
                if not runtime.process.learn_usage_refused(request.endpoint, record):
                    return None
                return classes[request.endpoint].build_request(runtime, max_tokens=2)  # type: ignore[attr-defined,no-any-return]

            workload = runtime.process.workload
            prompts_vary = workload is not None and workload.prompts_vary
            apart = _probes_with_own_headers(runtime, environment.user_classes)  # e.g. Messages: no Bearer
            probes = [(name, request) for name, request in probes if name not in apart]
            with preflight_step(_probe_step(probes + [p for _, p in apart.values()]), limit_s):
                report = preflight.probe(
                    transport,
                    probes,
                    config,
                    models,
                    runtime.process.model,
                    retry=without_usage,
                    host=host,
                    prompts_vary=prompts_vary,
                )
                for headers, named in apart.values():
                    own = GeventHTTPTransport(
                        host, headers=headers, timeouts=preflight_timeouts(config, limit_s), insecure=config.insecure,
                        proxy=runtime.process.proxy,
                    )  # fmt: skip
                    try:
                        more = preflight.probe(
                            own, [named], config, models, runtime.process.model, host=host, prompts_vary=prompts_vary
                        )
                    finally:
                        own.close()
                    report.notes.extend(more.notes)
                    report.warnings.extend(more.warnings)
                    report.not_streamed.extend(more.not_streamed)
            runtime.process.not_streamed.update(report.not_streamed)  # warned once, here
            for note in report.notes:
                log.info("llmload preflight: %s", note)
            for warning in report.warnings:
                log.warning("llmload preflight: %s", warning)
    finally:
        transport.close()
    users = int(getattr(options, "num_users", 0) or 0)
    workers = int(getattr(options, "expect_workers", 1) or 1)
    per_process = users if not isinstance(environment.runner, MasterRunner) else -(-users // max(workers, 1))
    raised = preflight.check_open_files(per_process)
    if raised:
        log.info("llmload: %s", raised)
    runtime.process.prepared_for = (host, config)


def _probes_with_own_headers(
    runtime: Runtime, classes: list[type]
) -> dict[str, tuple[dict[str, str], tuple[str, LLMRequest]]]:
    """Probes of user classes whose connection headers are not the run's: class name → (headers, probe)."""
    apart = {}
    for cls in classes:
        own = getattr(cls, "connection_headers", None)
        headers = own(runtime) if callable(own) else runtime.process.headers
        if headers != runtime.process.headers:
            apart[cls.__name__] = (headers, (cls.__name__, cls.build_request(runtime, max_tokens=2)))  # type: ignore[attr-defined]
    return apart


def preflight_limit_s(config: RunConfig, run_time_s: object) -> float:
    """Longest wait for one preflight step: ``--preflight-timeout``, and no longer than ``-t`` (seconds) when set."""
    limit_s = config.preflight_timeout_s
    if isinstance(run_time_s, int | float) and run_time_s > 0:
        limit_s = min(limit_s, float(run_time_s))
    return limit_s


_BACKSTOP_S = 1.0


def preflight_timeouts(config: RunConfig, limit_s: float) -> Timeouts:
    """The preflight connection's timeouts: the run's, none longer than ``limit_s`` plus one second.

    ``preflight_step`` ends a step at ``limit_s`` with a message that names the
    options; these limits are a backstop just behind it (a connect refused or
    timed out earlier still says so).
    """
    t, cap_s = config.timeouts, limit_s + _BACKSTOP_S
    return Timeouts(connect_s=min(t.connect_s, cap_s), idle_s=min(t.idle_s, cap_s), total_s=min(t.total_s, cap_s))


@contextlib.contextmanager
def preflight_step(what: str, limit_s: float) -> Iterator[None]:
    """Say what the preflight waits for and for how long; stop waiting after ``limit_s`` seconds.

    The limit holds for the whole step, however the server answers (silence,
    or bytes trickling in forever), on top of the connection's own timeouts.

    Raises:
        ConfigError: the step did not finish within ``limit_s`` (the message names it and the options).
    """
    log.info("llmload preflight: waiting for %s (up to %g s)", what, limit_s)
    timer = gevent.Timeout(limit_s)
    timer.start()
    try:
        yield
    except gevent.Timeout as exc:
        if exc is not timer:
            raise
        raise ConfigError(
            f"preflight: no complete answer to {what} within {limit_s:g} s; is the server up and not hung? "
            "Raise --preflight-timeout if it is only slow to answer (-t bounds it too), "
            "or pass --skip-preflight to skip the probe requests"
        ) from None
    finally:
        timer.close()


def _probe_step(probes: list[tuple[str, LLMRequest]]) -> str:
    """``POST /v1/chat/completions (ChatUser)``: what the probe requests are, for the waiting line."""
    shown = ", ".join(f"POST {request.path} ({name})" for name, request in probes)
    return f"the probe request{'s' if len(probes) > 1 else ''} {shown}" if probes else "the probe requests"


def _check_users(environment: Environment, options: argparse.Namespace | None) -> None:
    """``-u 0`` (or a form's 0 users) starts no user: refused, not a run that idles to ``-t`` and fails.

    Raises:
        ConfigError: 0 users without a load shape (``LoadTestShape`` sets the users itself).
    """
    users = getattr(options, "num_users", None)
    if users is None or environment.shape_class is not None:
        return
    if int(users) < 1:
        raise ConfigError(
            f"-u {users} starts no user, so no request would be sent; pass -u N with N >= 1 "
            "(each user keeps one request in flight), e.g. -u 32",
            options=("-u",),
        )


def _check_processes_port(environment: Environment, options: argparse.Namespace | None) -> None:
    """A ``--processes`` master bound to another port than its workers dial: refused, not a run that never starts.

    Locust's forked workers connect to ``--master-port`` (default 5557), not to ``--master-bind-port``.

    Raises:
        ConfigError: the two ports differ on a master that forks its own workers.
    """
    if not isinstance(environment.runner, MasterRunner) or not getattr(options, "processes", None):
        return
    bind, dial = getattr(options, "master_bind_port", None), getattr(options, "master_port", None)
    if bind is not None and dial is not None and int(bind) != int(dial):
        raise ConfigError(
            f"--processes with --master-bind-port {bind}: the forked workers connect to --master-port {dial}, "
            f"so none would join; pass --master-port {bind} too",
            options=("--master-bind-port", "--master-port"),
        )


def _check_batch_size(environment: Environment, config: RunConfig) -> None:
    """Refuse, before any load, a ``--batch-size`` that no user of the run would use (it would be ignored).

    A run that mixes embeddings users with others (``locustfiles/mixed.py``)
    uses it for its embeddings users: accepted.
    """
    if config.batch_size == 1:
        return
    classes = environment.user_classes
    if any(getattr(cls, "endpoint", None) == "embeddings" for cls in classes):
        return
    names = ", ".join(sorted(cls.__name__ for cls in classes)) or "none"
    raise ConfigError(
        f"--batch-size {config.batch_size} applies to EmbeddingsUser only, and this run has no embeddings user "
        f"({names}): it would be ignored. Remove --batch-size, or run embeddings users "
        "(locust -f $(llmload locustfile embeddings), or a locustfile with an EmbeddingsUser)",
        options=("--batch-size",),
    )


def _check_endpoint_path(environment: Environment, config: RunConfig, host: str) -> None:
    """Refuse, before any load, an ``--endpoint-path`` or ``-H`` path of an API the run's user classes do not speak,
    and a ``-H`` ending in ``/v1`` before a path that starts with it (``/v1/v1/chat/completions``)."""
    for cls in environment.user_classes:
        endpoint = getattr(cls, "endpoint", None)
        if endpoint in ("chat", "completions", "responses", "messages", "embeddings"):
            if host:
                check_host_path(host, endpoint)
                check_host_v1(host, endpoint, config.endpoint_path)
            if config.endpoint_path is not None:
                check_endpoint_path(config.endpoint_path, endpoint)


def choose_route(runtime: Runtime, host: str, master_note: str | None = None) -> str | None:
    """Set ``runtime.process.proxy`` for ``host`` from this process's environment; return the one-line note.

    The note is logged unless it is ``master_note`` (a worker whose
    environment chose as its master did stays silent).

    Raises:
        ConfigError: the proxy variable that applies is not a usable http:// proxy URL.
    """
    decision = proxies.route(
        host, urllib.request.getproxies_environment(), ignore=runtime.process.config.ignore_proxy_env
    )
    runtime.process.proxy = decision.proxy
    if decision.note and decision.note != master_note:
        log.info("llmload: %s", decision.note)
    return decision.note


def _strip_credentials(environment: Environment, runtime: Runtime, host: str) -> str:
    """Move ``user:password@`` out of the target host into ``runtime.process.url_authorization``; return the host.

    Every later use of the host (Locust's HTML report and web UI, logs, error
    messages, results, Prometheus, the spawn messages to workers) then sees it
    without credentials; they are sent only as the ``Authorization`` header.
    A host typed again without them (web UI) keeps the credentials it had.
    """
    target = split_credentials(host)
    secrets = secret_query_names(urlsplit(host).query) if "?" in host else ()
    if secrets and runtime.process.prepared_for is None:
        log.warning(
            "llmload: -H carries %s in its query string; llmload shows it as *** but Locust's own web UI "
            "and HTML report show -H as given: prefer --api-key-header NAME or --header",
            ", ".join(secrets),
        )
    if target.authorization is not None:
        runtime.process.url_authorization = target.authorization
        environment.host = target.public
        options = environment.parsed_options
        if options is not None and getattr(options, "host", None):
            options.host = public_url(options.host)
    elif runtime.process.prepared_for is None or runtime.process.prepared_for[0] != host:
        runtime.process.url_authorization = None
    return target.public


def _check_writable(flag: str, path: str) -> None:
    """Refuse before load an output path (``flag``'s) that could not be written after it (results would be lost).

    Raises:
        ConfigError: naming the path and why.
    """
    target = os.path.abspath(path)
    if os.path.isdir(target):
        name = {"--html-report": "report.html", "--timeseries": "timeseries.jsonl"}.get(flag, "results.json")
        raise ConfigError(f"{flag} {path!r} is a directory; pass a file path such as {path}/{name}")
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".llmload-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{flag} {path!r} cannot be written ({exc.strerror}); pass a path in a writable directory"
        ) from None


def load_local_parts(runtime: Runtime) -> None:
    """Build request headers (API key from the variable or file) and load the tokenizer.

    Raises:
        ConfigError: the key file cannot be read.
        TokenizerError: the tokenizer cannot be loaded locally.
    """
    config = runtime.process.config
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
        if not key:
            raise ConfigError(
                f"--api-key-file {config.api_key_file!r}: its first line is empty, so no key would be sent; "
                "put the key on the first line"
            )
    headers.update(config.headers)
    runtime.process.key_sent_as = None
    if key and config.api_key_header:
        headers[config.api_key_header] = key
        runtime.process.key_sent_as = config.api_key_header
    elif key:
        headers["Authorization"] = f"Bearer {key}"
        runtime.process.key_sent_as = "Authorization: Bearer"
        if runtime.process.url_authorization:
            log.warning(
                "llmload: -H carries user:password@ and an API key is set; sending the API key only "
                "(Authorization: Bearer). Remove one of them"
            )
    elif runtime.process.url_authorization:
        headers["Authorization"] = runtime.process.url_authorization
    elif config.api_key_env != "OPENAI_API_KEY" and not config.api_key_file:
        log.warning(
            "llmload: --api-key-env %s: that variable is unset or empty; sending no API key", config.api_key_env
        )
    runtime.process.headers = headers
    if config.tokenizer and runtime.process.token_counter is None:
        runtime.process.token_counter = load_tokenizer(config.tokenizer, allow_download=config.allow_download)
    _load_workload(runtime)


def preload_tokenizer(runtime: Runtime) -> None:
    """Worker at ``init``: load the tokenizer its own options name, before any spawn message arrives.

    Loading a tokenizer directory imports transformers: seconds of CPU in one
    turn of the gevent loop (4-5 s measured on a busy 2-core machine). In the
    handler of the first spawn message that stall starves the worker's
    heartbeats, and the master drops it as missing before it sends anything;
    at ``init`` the run has not started. The master's options still decide:
    ``load_local_parts`` loads at test start when nothing was loaded here (a
    failure here is left for it to report).
    """
    config = runtime.process.config
    if not config.tokenizer or runtime.process.token_counter is not None:
        return
    started_s = time.perf_counter()
    try:
        runtime.process.token_counter = load_tokenizer(config.tokenizer, allow_download=config.allow_download)
    except LLMLoadError:
        runtime.process.token_counter = None  # reported at test start, with the master's options
        return
    log.info(
        "llmload: worker loaded tokenizer %s before the run (%.1f s)", config.tokenizer, time.perf_counter() - started_s
    )


def _load_workload(runtime: Runtime) -> None:
    """Build the prompt source once per options; report skipped dataset lines.

    Raises:
        DatasetError: no usable dataset line, or an exact length is unreachable.
    """
    config = runtime.process.config
    if runtime.process.workload is not None and runtime.process.workload.config == config:
        _count_trace(runtime)
        return
    runtime.process.workload = None
    workload = build_workload(config, runtime.process.token_counter)
    trace = workload.trace
    if trace is not None:
        for problem in trace.problems[:_PROBLEMS_LOGGED]:
            log.warning("llmload: skipped trace line %s", problem)
        if trace.skipped > _PROBLEMS_LOGGED:
            log.warning("llmload: ... and %d more bad lines in %s", trace.skipped - _PROBLEMS_LOGGED, trace.path)
    dataset = workload.dataset
    if dataset is not None:
        for problem in dataset.problems[:_PROBLEMS_LOGGED]:
            log.warning("llmload: skipped dataset line %s", problem)
        if dataset.skipped > _PROBLEMS_LOGGED:
            log.warning("llmload: ... and %d more bad lines in %s", dataset.skipped - _PROBLEMS_LOGGED, dataset.path)
    log.info("llmload: prompts: %s", workload.describe())
    if runtime.process.token_counter is None:
        if not config.stream:
            log.info("llmload: no --tokenizer: token counts come from the server's usage in each reply")
        elif config.stream_usage == "off":
            log.info("llmload: no --tokenizer and --stream-usage off: completion tokens are streamed chunks")
        else:
            log.info("llmload: no --tokenizer: token counts come from server usage (stream_options.include_usage)")
    runtime.process.workload = workload
    _count_trace(runtime)


def _count_trace(runtime: Runtime) -> None:
    """A trace run is a run of exactly its lines: ``num_requests`` becomes their number (split like it)."""
    workload = runtime.process.workload
    if workload is not None and workload.trace is not None:
        runtime.process.config = dataclasses.replace(runtime.process.config, num_requests=len(workload.trace.lines))


def split(config: RunConfig, workers: int, trace: Trace | None = None) -> tuple[WorkerShare, ...]:
    """The workers' shares of the run; of a trace run, each worker's quota is the number of lines it sends."""
    shares = split_run(
        workers,
        num_requests=config.num_requests,
        warmup_requests=config.warmup_requests,
        request_rate=config.request_rate,
        max_concurrency=config.max_concurrency,
    )
    if trace is None or not workers:
        return shares
    lines = trace_shares(trace, workers)
    return tuple(dataclasses.replace(share, quota_requests=lines[share.rank]) for share in shares)


def start_open_loop(runtime: Runtime, share: WorkerShare) -> None:
    """Set this process's arrival schedule (its share of --request-rate) and in-flight cap in the new run."""
    config = runtime.process.config
    rate, concurrency, rank = share.rate_per_s, share.concurrency, share.rank
    runtime.run.schedule = (
        None
        if rate is None
        else ArrivalSchedule(
            rate=rate, arrival=Arrival(config.arrival), burstiness=config.burstiness, seed=config.seed * 1009 + rank
        )
    )
    runtime.run.concurrency = None if concurrency is None else gevent.lock.BoundedSemaphore(concurrency)


def start_workload(runtime: Runtime, share: WorkerShare, workers: int) -> None:
    """Start this process's prompt stream (rank of the workers) and its warm-up share in the new run."""
    stride = workers or 1
    rank = share.rank
    runtime.run.prompts = (
        runtime.process.workload.stream(rank, stride) if runtime.process.workload and rank < stride else None
    )
    specs = runtime.process.workload.sessions if runtime.process.workload is not None else ()
    runtime.run.session_stream = SessionStream(specs, rank, stride) if specs and rank < stride else None
    trace = runtime.process.workload.trace if runtime.process.workload is not None else None
    runtime.run.trace = (
        TraceCursor(trace, rank, stride, runtime.process.config.trace_speed) if trace and rank < stride else None
    )
    # every worker replays from one instant of the run's timeline; after a warm-up, from its end
    runtime.run.trace_start_s = runtime.run.run_started_s + TRACE_LEAD_S if share.warmup_requests <= 0 else 0.0
    warmup = share.warmup_requests
    runtime.run.warmup = WarmupGate(warmup) if warmup > 0 else None


def start_process_services(runtime: Runtime, worker_index: int | None) -> None:
    """Open the requests log and start the CPU monitor in a process that runs users."""
    if runtime.process.requests_log is not None:
        runtime.process.requests_log.close()
        runtime.process.requests_log = None
    if runtime.process.config.requests_log:
        runtime.process.requests_log = RequestsLog(worker_path(runtime.process.config.requests_log, worker_index))
    if runtime.process.cpu is None:
        runtime.process.cpu = CpuMonitor()
    runtime.process.cpu.start()


def stop_process_services(runtime: Runtime) -> None:
    if runtime.process.requests_log is not None:
        runtime.process.requests_log.close()
        runtime.process.requests_log = None
    if runtime.process.cpu is not None:
        runtime.process.cpu.stop()
        runtime.run.cpu_saturated_s = max(runtime.run.cpu_saturated_s, runtime.process.cpu.saturated_s)


def start_server_metrics(environment: Environment, runtime: Runtime) -> None:
    """Start scraping the server's metrics (``--server-metrics``; master or single process), after preflight.

    The first scrape is taken here, before any load; then one at the end of
    every time-series interval (counted from the run's start); each URL goes the way
    ``llmload.settings.proxies.route`` decides for it, as the load does for the target.
    ``runtime.process.server_scraper`` stays None when nothing is to be scraped (off, or the target has no
    ``/metrics``).
    """
    config = runtime.process.config
    auto_url, extra_urls = metrics_urls(environment.host or "", config.server_metrics)
    if auto_url is None and not extra_urls:
        return
    scraper = ServerScraper(
        auto_url,
        extra_urls,
        model=runtime.process.model,
        headers=runtime.process.headers,
        interval_s=config.timeseries_interval_s,
        fetch=routed_fetch(
            ((auto_url,) if auto_url else ()) + extra_urls,
            urllib.request.getproxies_environment(),
            ignore=config.ignore_proxy_env,
            insecure=config.insecure,
        ),
    )
    scraper.start()
    runtime.process.server_scraper = scraper if scraper.active else None


def note_request_limit(options: argparse.Namespace | None, config: RunConfig) -> None:
    """Headless run bounded by ``--num-requests`` without ``-t``: install ``RequestLimitNote`` (once per process)."""
    logger = logging.getLogger("locust.main")
    for old in [f for f in logger.filters if isinstance(f, RequestLimitNote)]:
        logger.removeFilter(old)
    if options is None or not getattr(options, "headless", False) or getattr(options, "run_time", None):
        return
    if config.num_requests is not None:
        logger.addFilter(RequestLimitNote(config.num_requests))
