"""Per-process state shared by the Locust users and the event hooks, split by lifetime.

One ``Runtime`` lives on each Locust environment (``attach``; read it with
``runtime_of``), created by ``hooks.install`` when Locust fires ``init``;
nothing is created at import time. It holds four states:

- ``ProcessState``: what lives as long as the process (options, request
  headers, tokenizer, workload, shared services such as the exporter);
- ``RunState``: one run, built afresh at each test start (no field-by-field reset);
- ``MasterState``: what a master learns of its workers in one run;
- ``TimelineState``: the time series being written, built afresh at each timeline start.

A user hands every finished request to ``Runtime.hand_off``, the one way a
record enters the statistics.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gevent
import gevent.event
import gevent.lock

from llmload.aggregate.series import FoldedTotal, IntervalSeries, interval_index
from llmload.aggregate.stats import LLMStats
from llmload.edge.replay import SessionOrder
from llmload.edge.run_parts import CpuMonitor, RequestBudget, RequestCache, SendWindow, WarmupGate
from llmload.exporters.load import SendFigures
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.requests_log import RequestsLog
from llmload.exporters.timeline import Timeline
from llmload.exporters.timeseries import Row
from llmload.exporters.timeseries_files import TimeseriesLog
from llmload.exporters.window import SlidingWindow
from llmload.net.scrape import ServerScraper
from llmload.net.sockets import AddressCache
from llmload.net.turns import LoopTurns
from llmload.request.degenerate import SameTextWatch
from llmload.request.preflight import not_streamed_warning
from llmload.request.record import RequestRecord
from llmload.request.tokens import TokenCounter
from llmload.run.clock import OffsetEstimate
from llmload.run.wire_plans import ShareMessage
from llmload.settings.config import RunConfig
from llmload.settings.proxies import ProxyChoice
from llmload.settings.thresholds import Breach, ThresholdWatch
from llmload.workload.arrivals import ArrivalSchedule
from llmload.workload.prompts import PromptStream, Workload
from llmload.workload.session_file import SessionStream
from llmload.workload.trace import Trace, TraceCursor

log = logging.getLogger(__name__)

__all__ = [
    "ExportState",
    "MasterState",
    "ProcessState",
    "RunState",
    "Runtime",
    "TimelineState",
    "attach",
    "runtime_of",
]


@dataclass
class ExportState:
    """The Prometheus exporter's state on the master or a single process.

    Attributes:
        exporter: serves ``/metrics``.
        window: live window, fed with every delta merged into the run's statistics.
        grace_s: longest wait after the run for a scrape of the final totals.
        final_stats: copy of the statistics the results were built from (what
            scrapes report after the run, so late reports cannot make the
            counters differ from the results); None while a run is live.
        url: where ``/metrics`` is served (the web UI's LLM tab points to it).
    """

    exporter: PrometheusExporter
    window: SlidingWindow
    grace_s: float
    url: str = ""
    final_stats: LLMStats | None = None


@dataclass
class ProcessState:
    """What one Locust process keeps across runs: options, prepared request parts, shared services.

    Attributes:
        config: validated options (a worker rebuilds it at every test start from the master's).
        model: the served model name requests use (resolved by preflight; a worker's comes with the plan).
        headers: request headers (the API key lives only here).
        url_authorization: ``Authorization: Basic`` value for ``user:password@`` in ``-H``
            (``llmload.settings.credentials``); the host itself is kept without them.
        key_sent_as: the header that carries the API key (for messages), None = no key sent.
        token_counter: local tokenizer, used only when the server sends no usage.
        idle: never set; users with nothing to send park on it until the runner stops them.
        workload: the prompt source (``--dataset`` or ``--input-tokens``), built before load; None = plain ``--prompt``.
        addresses: name resolutions shared by every user's transport in this process.
        turns: when this process's gevent loop polls, shared by every user's transport (read lags).
        proxy: the forward proxy every transport of this process uses for the
            current target (``llmload.settings.proxies.route``), or None for direct connections.
        proxy_note: master/standalone: the start-up line about the proxy choice, or None.
        request_cache: requests built in this process, reused for repeated prompts.
        interrupt_main: hands a Ctrl-C to Locust's main greenlet (``llmload.edge.interrupt``);
            None outside a Locust process.
        faults_reported: causes of skipped requests already logged (each is logged once per process).
        ended_run_id: the run this process has ended (``Runtime.end_run``); Locust may still
            start users for it (late spawn messages), and they send nothing.
        share_from_master: worker: its own share of the run, as the master sent it
            (``llmload_share``, before the spawn message); None before one arrived.
        prepared_for: the (host, config) the last ``prepare`` checked, or None.
        requests_log: ``--requests-log`` of the current run in a process that runs users, or None.
        cpu: this process's CPU monitor (made by the first run that runs users), or None.
        server_scraper: ``--server-metrics`` of the current run, master or single process only, or None.
        export: the Prometheus exporter, master or single process, when ``--prometheus-port`` is not 0.
        live_task: worker live reports / single-process window ticks (``llmload.edge.live``).
        checkpoint_task: ``--checkpoint-interval`` writes; ``checkpoint_stop`` ends them.
        usage_refused: endpoints that refused ``stream_options``.
        not_streamed: endpoints already warned of a JSON answer to ``stream: true``.
    """

    config: RunConfig
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    url_authorization: str | None = None
    key_sent_as: str | None = None
    token_counter: TokenCounter | None = None
    idle: gevent.event.Event = field(default_factory=gevent.event.Event)
    workload: Workload | None = None
    addresses: AddressCache = field(default_factory=AddressCache)
    turns: LoopTurns = field(default_factory=LoopTurns)
    proxy: ProxyChoice | None = None
    proxy_note: str | None = None
    request_cache: RequestCache = field(default_factory=RequestCache)
    interrupt_main: Callable[[], None] | None = None
    faults_reported: set[str] = field(default_factory=set)
    ended_run_id: str = ""
    share_from_master: ShareMessage | None = None
    prepared_for: tuple[str, RunConfig] | None = None
    requests_log: RequestsLog | None = None
    cpu: CpuMonitor | None = None
    server_scraper: ServerScraper | None = None
    export: ExportState | None = None
    live_task: gevent.Greenlet[[], None] | None = None
    checkpoint_task: gevent.Greenlet[[], None] | None = None
    checkpoint_stop: gevent.event.Event = field(default_factory=gevent.event.Event)
    usage_refused: set[str] = field(default_factory=set)
    not_streamed: set[str] = field(default_factory=set)
    _psutil_process: object = field(default=None, init=False, repr=False)  # psutil.Process of this process

    def include_usage(self, endpoint: str) -> bool:
        """Whether requests to ``endpoint`` ask for ``stream_options.include_usage`` (``--stream-usage``)."""
        mode = self.config.stream_usage
        return mode == "on" or (mode == "auto" and endpoint not in self.usage_refused)

    def learn_usage_refused(self, endpoint: str, record: RequestRecord) -> bool:
        """True when ``record`` is a 400/422 naming ``stream_options`` under ``auto``: send it again without.

        The first time per endpoint, requests to ``endpoint`` are built without
        the field from then on (the request cache is emptied) and a warning says
        so; requests already in flight then are refused too and are retried alike.
        """
        error = record.error
        if (
            self.config.stream_usage != "auto"
            or error is None
            or error.status not in (400, 422)
            or "stream_options" not in error.message
        ):
            return False
        if endpoint in self.usage_refused:
            return True
        self.usage_refused.add(endpoint)
        self.request_cache.reset(self.config, self.model)
        counts = (
            "with --tokenizer"
            if self.config.tokenizer
            else "as the number of streamed chunks (a lower bound; pass --tokenizer PATH)"
        )
        log.warning(
            "llmload: the %s endpoint refused stream_options (HTTP %s: %s); sending its requests without it "
            "from now on, so completion tokens are counted %s",
            endpoint,
            error.status,
            error.message[:120].strip(),
            counts,
        )
        return True

    def note_not_streamed(self, endpoint: str, request_streamed: bool, record: RequestRecord) -> None:
        """Warn once per endpoint and process (not per request) that a streamed request got one JSON body.

        Such replies succeed with the server's usage, but have no token times:
        TTFT, ITL and TPOT are unavailable for them.
        """
        if not request_streamed or record.streamed or not record.ok or endpoint in self.not_streamed:
            return
        self.not_streamed.add(endpoint)
        log.warning("llmload: %s", not_streamed_warning(f"the {endpoint} endpoint"))

    @property
    def trace_of_run(self) -> Trace | None:
        """The loaded ``--trace`` of this run, or None."""
        return self.workload.trace if self.workload is not None else None

    def rss_bytes(self) -> int | None:
        """This process's resident memory now (bytes); None when psutil cannot read it."""
        import psutil

        try:
            if not isinstance(self._psutil_process, psutil.Process):
                self._psutil_process = psutil.Process()
            return int(self._psutil_process.memory_info().rss)
        except psutil.Error:
            return None


@dataclass
class RunState:
    """One run of this process, built afresh at each test start: its defaults are a new run's values.

    Nothing here is reset field by field: ``llmload.edge.worker`` and
    ``llmload.edge.master`` replace the whole ``Runtime.run`` when a run starts (a field added here starts
    each run at its default). Before the first run it holds those defaults
    (``run_id`` ""). RESET in the web UI restarts only the counts (``restart_counts``).

    Attributes:
        run_id: identifies the current run; worker payloads of another run are dropped; "" = no run yet.
        started_at_unix: start of the current run on the run's timeline (the
            master's wall clock; ``llmload.run.clock``), the same instant as ``run_started_s``.
        run_started_s: ``time.perf_counter()`` at this run's start (``llmload.aggregate.series``,
            ``llmload.run.clock``).
        clock_offset_s: worker: its wall clock minus the master's (``llmload.run.clock``), None = unknown.
        blocked: why the run must not send load (failed preflight), or None.
        stopping: a stop is under way (a further Ctrl-C is ignored).
        stopped_by: the signal that stopped the run before its end (``"Ctrl-C"``), None = none.
        results: master or single process: the run's results once built, else None.
        stats: statistics counted outside the series (kept, in the interval of
            now, by ``Runtime.take_delta``); the run's totals are ``totals()``.
        series: this process's requests by finish interval (worker: since its last report; master: the run's).
        local_total: single process and master: run totals folded from ``series``; None on a worker.
        budget: this process's share of ``--num-requests``.
        schedule: open loop: this process's arrival schedule; ``schedule_start_s`` its monotonic start (0.0: not yet).
        concurrency: open loop: the in-flight cap, or None.
        trace: ``--trace``: this process's lines; ``trace_start_s`` the monotonic instant the trace's
            time 0 is due (0.0: at the first take); ``trace_order`` a session's lines one at a time.
        session_stream: ``--sessions``: this process's sessions.
        prompts: this process's share of the workload's prompt sequence; None = none.
        warmup: this process's share of ``--warmup-requests``; None = no warm-up.
        sends: the requests this process sent in this run.
        stopped_at_s: ``time.perf_counter()`` when this process's stop began, None before.
        in_flight: requests sent by this process's users and not finished yet.
        failure_samples: error category -> first message (Locust's Failures tab).
        same_text: this process's recent replies (degenerate output).
        reset_at_unix: master/single process: when the web UI's RESET last cleared the statistics.
        cpu_saturated_s: longest CPU saturation streak (s), max over workers on the master.
        window_delta: single process with the exporter: records since the last window tick, else None.
    """

    run_id: str = ""
    started_at_unix: float = 0.0
    run_started_s: float = 0.0
    clock_offset_s: float | None = None
    blocked: str | None = None
    stopping: bool = False
    stopped_by: str | None = None
    results: dict[str, object] | None = None
    stats: LLMStats = field(default_factory=LLMStats.empty)
    series: IntervalSeries = field(default_factory=IntervalSeries.empty)
    local_total: FoldedTotal | None = field(default_factory=FoldedTotal)
    budget: RequestBudget = field(default_factory=lambda: RequestBudget(None))
    schedule: ArrivalSchedule | None = None
    schedule_start_s: float = 0.0
    concurrency: gevent.lock.BoundedSemaphore | None = None
    trace: TraceCursor | None = None
    trace_start_s: float = 0.0
    trace_order: SessionOrder = field(default_factory=SessionOrder)
    session_stream: SessionStream | None = None
    prompts: PromptStream | None = None
    warmup: WarmupGate | None = None
    sends: SendWindow = field(default_factory=SendWindow)
    stopped_at_s: float | None = None
    in_flight: int = 0
    failure_samples: dict[str, str] = field(default_factory=dict)
    same_text: SameTextWatch = field(default_factory=SameTextWatch)
    reset_at_unix: float | None = None
    cpu_saturated_s: float = 0.0
    window_delta: LLMStats | None = None

    def restart_counts(self, at_unix: float) -> None:
        """RESET (web UI or ``--reset-stats``) at ``at_unix``: the counts start afresh; the run goes on.

        The statistics, series, folded totals, failure samples and the live
        window's pending records restart; the budget, schedule and run id stay.
        """
        self.stats = LLMStats.empty()
        self.series = IntervalSeries.empty()  # the time series restarts too: its sums stay the summary's totals
        if self.local_total is not None:
            self.local_total = self.local_total.restarted()
        self.reset_at_unix = at_unix
        self.failure_samples.clear()
        if self.window_delta is not None:
            self.window_delta = LLMStats.empty()

    def totals(self) -> LLMStats:
        """The run's statistics so far: the series folded (single process and master), else ``stats``."""
        if self.local_total is not None:
            return self.local_total.of(self.series)
        return self.stats

    def has_unreported(self) -> bool:
        """True when something was counted since the last ``Runtime.take_delta``."""
        return not (self.series.is_empty() and self.stats.is_empty())

    def send_figures(self) -> SendFigures:
        """This process's open-loop figures: schedule rate, send rate, and how far behind it was at the stop."""
        schedule = self.schedule
        if self.trace is not None:
            return self._trace_figures(self.trace)
        if schedule is None:
            return SendFigures(sent_rate_per_s=self.sends.rate_per_s)
        behind_s = None
        if not math.isinf(schedule.rate) and self.schedule_start_s and not self.budget.exhausted:
            now_s = self.stopped_at_s if self.stopped_at_s is not None else time.perf_counter()
            behind_s = max(0.0, now_s - (self.schedule_start_s + schedule.next_due_offset_s))
        return SendFigures(self.sends.scheduled_rate_per_s, self.sends.rate_per_s, behind_s)

    def _trace_figures(self, trace: TraceCursor) -> SendFigures:
        """Send figures of a trace replay: how far behind its next untaken line this process was at the stop."""
        behind_s = None
        due_s = trace.next_due_offset_s
        if due_s is not None and self.trace_start_s:
            now_s = self.stopped_at_s if self.stopped_at_s is not None else time.perf_counter()
            behind_s = max(0.0, now_s - (self.trace_start_s + due_s))
        return SendFigures(self.sends.scheduled_rate_per_s, self.sends.rate_per_s, behind_s)


@dataclass
class MasterState:
    """What a master learns of its workers in one run; built afresh at each run start of a master or single process.

    Present on every process (empty outside a master), because the results,
    ``/metrics`` and the time series read lost workers and send figures on
    every kind of process.

    Attributes:
        planned_workers: the workers the run was split over.
        done_workers: workers that reported their whole share sent (``llmload_done``).
        pending_finals: workers flushed whose final report has not arrived yet; ``finals_in`` is set when none is left.
        finals_from: workers whose final report of this run arrived (sent when the master flushed,
            or by a worker shutting down on its own).
        lost_workers: workers lost mid-run or that never sent their final report.
        flushed: the master has sent ``llmload_flush`` for this run.
        send_figures_by_process: each worker's latest open-loop figures.
        worker_clocks: each worker's clock offset estimate (``llmload.run.clock``).
        worker_rss_bytes: each worker's resident memory, as of its latest report.
        worker_in_flight: each worker's in-flight requests, as of its latest report.
    """

    planned_workers: set[str] = field(default_factory=set)
    done_workers: set[str] = field(default_factory=set)
    pending_finals: set[str] = field(default_factory=set)
    finals_from: set[str] = field(default_factory=set)
    finals_in: gevent.event.Event = field(default_factory=gevent.event.Event)
    lost_workers: list[str] = field(default_factory=list)
    flushed: bool = False
    send_figures_by_process: dict[str, SendFigures] = field(default_factory=dict)
    worker_clocks: dict[str, OffsetEstimate] = field(default_factory=dict)
    worker_rss_bytes: dict[str, int] = field(default_factory=dict)
    worker_in_flight: dict[str, int] = field(default_factory=dict)


@dataclass
class TimelineState:
    """One run's time series as it is written (master or single process); built afresh by ``timeline.start_timeline``.

    Attributes:
        table: the intervals sampled and written so far, None before a run (and on a worker).
        log: the ``--timeseries`` file, or None.
        task: the greenlet that ticks the intervals, or None.
        rows: rows of the intervals written so far (since the last RESET; checkpoints read them).
        progress_finished: requests finished in the intervals the progress lines covered so far.
        watch: ``--abort-on`` thresholds, or None.
        aborted: the threshold that stopped the run, or None.
        end_s: the run's end on the time series' clock once the stop took it, else None: from then on
            the ticks write only the intervals that ended before it (``timeline.end_timeline``).
    """

    table: Timeline | None = None
    log: TimeseriesLog | None = None
    task: gevent.Greenlet[[], None] | None = None
    rows: list[Row] = field(default_factory=list)
    progress_finished: int = 0
    watch: ThresholdWatch | None = None
    aborted: Breach | None = None
    end_s: float | None = None

    def restart(self) -> None:
        """RESET: checkpoints hold the rows measured after it, and ``--abort-on`` windows start again."""
        self.rows = []
        if self.watch is not None:  # rows before the reset no longer count
            self.watch = ThresholdWatch(self.watch.thresholds, self.watch.interval_s)


class Runtime:
    """llmload's state in one Locust process: ``process`` (across runs), ``run``, ``master`` and ``timeline``.

    One lives on each Locust environment (``attach``, read with ``runtime_of``).
    ``run`` and ``master`` are replaced whole at each test start, ``timeline``
    at each timeline start; ``process`` lives as long as the process.
    """

    __slots__ = ("master", "process", "run", "timeline")

    def __init__(self, config: RunConfig) -> None:
        """The state of a process with options ``config`` before its first run."""
        self.process = ProcessState(config=config)
        self.run = RunState()
        self.master = MasterState()
        self.timeline = TimelineState()

    def end_run(self) -> None:
        """This process's run is over: no user may start a request any more, until the next run's budget.

        Called before the users are stopped and the final figures taken, so every
        request sent is in them; users that Locust starts later (its master keeps
        sending spawn messages for a while after a stop) stop without sending.
        """
        self.run.budget.close()
        if self.run.run_id:
            self.process.ended_run_id = self.run.run_id

    def hand_off(self, record: RequestRecord, *, met_slo: bool = False, log_it: bool = True) -> None:
        """A user hands off one finished request: counted once, in the run's series (interval of now, its finish).

        Also into the live window's pending records (single process with the
        exporter) and, when ``log_it``, the ``--requests-log``. A worker's
        statistics come from the series (``take_delta``), a single process's
        from it too (``RunState.totals``); the master merges its workers'.
        """
        run = self.run
        run.series.add(self.interval_now(), record, met_slo=met_slo)
        if run.window_delta is not None:
            run.window_delta.add(record, met_slo=met_slo)
        requests_log = self.process.requests_log
        if log_it and requests_log is not None:
            requests_log.write(record)

    def count_cancelled(self, endpoint: str, model: str) -> None:
        """Count one request cancelled at the stop, like ``hand_off`` (in the series only)."""
        self.run.series.add_cancelled(self.interval_now(), endpoint, model)

    def take_delta(self) -> tuple[LLMStats, IntervalSeries]:
        """Return what was counted since the last call, as statistics and per interval, and start afresh (workers).

        The statistics are the series' intervals merged; anything added to
        ``run.stats`` directly is kept too, in the interval of now.
        """
        run = self.run
        series = run.series.take()
        if not run.stats.is_empty():
            stray, run.stats = run.stats, LLMStats.empty()
            series.slot(self.interval_now()).merge_in(stray)
        return series.total(), series

    def now_unix(self) -> float:
        """Now on the run's timeline: Unix seconds of the master's wall clock, read off this process's monotonic clock.

        Every request stamp (``RequestRecord.started_at_unix``) comes from
        here, so no span depends on this machine's wall clock (``llmload.run.clock``).
        """
        return self.run.started_at_unix + (time.perf_counter() - self.run.run_started_s)

    def workers_in_flight(self) -> int:
        """Master: its workers' in-flight requests, as of their latest reports (``MasterState.worker_in_flight``).

        0 once the exporter holds the run's final figures (``ExportState.final_stats``): the run is over.
        """
        export = self.process.export
        if export is not None and export.final_stats is not None:
            return 0
        return sum(self.master.worker_in_flight.values())

    def interval_now(self) -> int:
        """The time-series interval this process's clock is in now (``llmload.aggregate.series``)."""
        return interval_index(time.perf_counter() - self.run.run_started_s, self.process.config.timeseries_interval_s)


def attach(environment: object, runtime: Runtime) -> None:
    """Put ``runtime`` on ``environment`` (a Locust ``Environment``) as ``environment.llmload``."""
    environment.llmload = runtime  # type: ignore[attr-defined]


def runtime_of(environment: object) -> Runtime | None:
    """The ``Runtime`` attached to ``environment`` (``attach``), or None when llmload is not installed on it."""
    runtime = getattr(environment, "llmload", None)
    return runtime if isinstance(runtime, Runtime) else None
