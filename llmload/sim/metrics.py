"""Ground-truth Prometheus metrics of the simulator, in their own registry.

Names use the ``llmload_sim_`` prefix and base units (seconds, tokens), in the
style of vLLM's ``vllm:`` metrics. Token counters cover *completed* requests
only, so over any set of finished requests they equal the sum of the
``usage`` the clients received (and of the chunks they were streamed).
Requests that got an injected failure (``llmload.sim.faults``) count only in
``faults_injected``: never as completed, aborted or rejected, and their
partial tokens never in the token counters.

================================================  =========  ====================================
name                                              type       meaning
================================================  =========  ====================================
llmload_sim_requests_completed_total{endpoint}    counter    replies written to the end
llmload_sim_requests_aborted_total{endpoint}      counter    client went away before the end
llmload_sim_requests_rejected_total{endpoint,     counter    4xx answers (bad JSON, unknown model,
code}                                                        wrong method, unknown path)
llmload_sim_prompt_tokens_total{endpoint}         counter    prompt tokens of completed requests
llmload_sim_completion_tokens_total{endpoint}     counter    generated tokens of completed requests
llmload_sim_requests_running                      gauge      sequences in the batch
llmload_sim_requests_waiting                      gauge      sequences queued for a slot
llmload_sim_time_to_first_token_seconds{endpoint} histogram  streams: request received → first
                                                             token chunk written to the socket
llmload_sim_request_duration_seconds{endpoint}    histogram  request received → last byte written
llmload_sim_engine_steps_total                    counter    engine steps run
llmload_sim_faults_injected_total{endpoint,kind}  counter    injected faults by ``FaultKind``
                                                             (a stall counts also as completed
                                                             or aborted, as it then ends)
================================================  =========  ====================================

The simulator also publishes vLLM's names (``vllm/v1/metrics/loggers.py``),
labelled ``model_name`` (the served model) and ``engine="0"``, so that
llmload's server-metrics path (``llmload.servermetrics``) runs end to end
against it: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc`` (here: the share of the ``--max-num-seqs`` batch
slots in use, the simulator having no KV blocks), ``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``, ``vllm:request_success_total{finished_reason}``,
``vllm:num_preemptions_total`` (always 0: the simulator never preempts) and the
histograms ``vllm:time_to_first_token_seconds``,
``vllm:e2e_request_latency_seconds`` and
``vllm:request_time_per_output_token_seconds`` (streams of 2 or more tokens).
They are updated at the same moments as the ``llmload_sim_`` metrics, so their
token counters equal the ground truth (both endpoints together).

With ``--metric-names sglang:`` or ``sglang_`` (``llmload.sim.shapes``)
SGLang's names take their place, spelled with that separator
(``python/sglang/srt/metrics/collector.py``): ``num_running_reqs``,
``num_queue_reqs``, ``token_usage`` (the batch-slot share, as above),
``prompt_tokens_total``, ``generation_tokens_total``, ``num_requests_total``
(completed requests) and the histograms ``time_to_first_token_seconds`` and
``e2e_request_latency_seconds``, labelled ``model_name``.

"Request received" is when the request's first bytes reached the server's
kernel (its receive stamp, Linux), so time a request waited to be read under
a burst of connections counts, as it does for a client; elsewhere it is when
the handler started.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.registry import Collector

from llmload.sim.engine import Engine
from llmload.sim.faults import FaultKind
from llmload.sim.protocol import Endpoint
from llmload.sim.shapes import MetricNames

__all__ = ["LATENCY_BUCKETS_S", "SGLangNames", "SimMetrics", "VLLMNames"]

LATENCY_BUCKETS_S: tuple[float, ...] = (
    *(round(i * 0.001, 3) for i in range(1, 101)),  # 1 ms resolution to 100 ms: TTFT accuracy benchmark
    0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, float("inf"),
)  # fmt: skip
"""Histogram bucket upper bounds, seconds."""


class _EngineCollector(Collector):
    """Reads the engine's step count at scrape time."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> list[CounterMetricFamily]:
        family = CounterMetricFamily("llmload_sim_engine_steps", "Engine steps run.")
        family.add_metric([], self._engine.steps)
        return [family]


class EndpointMetrics:
    """The per-endpoint children, resolved once so the request path does no label lookups."""

    __slots__ = (
        "aborted",
        "completed",
        "completion_tokens",
        "duration_s",
        "faults",
        "prompt_tokens",
        "ttft_s",
    )

    def __init__(self, parent: SimMetrics, endpoint: str) -> None:
        self.completed = parent.completed.labels(endpoint)
        self.aborted = parent.aborted.labels(endpoint)
        self.prompt_tokens = parent.prompt_tokens.labels(endpoint)
        self.completion_tokens = parent.completion_tokens.labels(endpoint)
        self.ttft_s = parent.ttft_s.labels(endpoint)
        self.duration_s = parent.duration_s.labels(endpoint)
        self.faults = {kind: parent.faults.labels(endpoint, kind.value) for kind in FaultKind}


class SimMetrics:
    """All simulator metrics, registered in ``registry`` (never the global one).

    Args:
        registry: where to register; ``generate_latest(registry)`` renders them.
        engine: read at scrape time for the running/waiting gauges and steps.
        model: the served model name, the ``model_name`` label of the vLLM-named metrics.
        max_num_seqs: batch slots, the denominator of ``vllm:kv_cache_usage_perc``.
        metric_names: the server vocabulary published beside the ground truth (``--metric-names``).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        engine: Engine,
        *,
        model: str,
        max_num_seqs: int,
        metric_names: MetricNames = MetricNames.VLLM,
    ) -> None:
        self.completed = Counter(
            "llmload_sim_requests_completed", "Replies written to the end.", ["endpoint"], registry=registry
        )
        self.aborted = Counter(
            "llmload_sim_requests_aborted",
            "Requests whose client disconnected before the reply ended; their slot was freed.",
            ["endpoint"],
            registry=registry,
        )
        self.rejected = Counter(
            "llmload_sim_requests_rejected",
            "Requests answered with a 4xx error.",
            ["endpoint", "code"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "llmload_sim_prompt_tokens",
            "Prompt tokens of completed requests (as reported in usage).",
            ["endpoint"],
            registry=registry,
        )
        self.completion_tokens = Counter(
            "llmload_sim_completion_tokens",
            "Generated tokens of completed requests (as reported in usage and streamed).",
            ["endpoint"],
            registry=registry,
        )
        self.ttft_s = Histogram(
            "llmload_sim_time_to_first_token_seconds",
            "Streaming requests: request received to first token chunk written.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.duration_s = Histogram(
            "llmload_sim_request_duration_seconds",
            "Completed requests: request received to last byte written.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.faults = Counter(
            "llmload_sim_faults_injected",
            "Faults injected by --fail-rate, --error-200-rate, --midstream-error-rate, --drop-rate, "
            "--stall-rate and --overload-rate.",
            ["endpoint", "kind"],
            registry=registry,
        )
        running = Gauge("llmload_sim_requests_running", "Sequences in the batch.", registry=registry)
        running.set_function(lambda: engine.running)
        waiting = Gauge("llmload_sim_requests_waiting", "Sequences queued for a slot.", registry=registry)
        waiting.set_function(lambda: engine.waiting)
        registry.register(_EngineCollector(engine))
        self.endpoints = {e: EndpointMetrics(self, e.value) for e in Endpoint}
        self.vllm: VLLMNames | SGLangNames
        """The server-named metrics (vLLM's by default; the attribute keeps its name for either)."""
        if metric_names is MetricNames.VLLM:
            self.vllm = VLLMNames(registry, engine, model=model, max_num_seqs=max_num_seqs)
        else:  # reply shapes
            separator = metric_names.value[-1]
            self.vllm = SGLangNames(registry, engine, model=model, max_num_seqs=max_num_seqs, separator=separator)


class VLLMNames:
    """The vLLM-named metrics (see the module docstring), children resolved once."""

    __slots__ = ("e2e_s", "generation_tokens", "prompt_tokens", "success", "tpot_s", "ttft_s")

    def __init__(self, registry: CollectorRegistry, engine: Engine, *, model: str, max_num_seqs: int) -> None:
        labels = ("model_name", "engine")
        values = (model, "0")
        for name, doc, read in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", lambda: engine.running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda: engine.waiting),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage (simulator: share of batch slots in use).",
                lambda: engine.running / max(max_num_seqs, 1),
            ),
        ):
            Gauge(name, doc, labels, registry=registry).labels(*values).set_function(read)
        preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, registry=registry
        )
        preemptions.labels(*values)  # the series exists (at 0) as in vLLM
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=registry
        ).labels(*values)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=registry
        ).labels(*values)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*labels, "finished_reason"),
            registry=registry,
        )
        self.success = {reason: success.labels(*values, reason) for reason in ("stop", "length")}
        self.ttft_s, self.e2e_s, self.tpot_s = (
            Histogram(name, doc, labels, buckets=LATENCY_BUCKETS_S, registry=registry).labels(*values)
            for name, doc in (
                ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
                ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
                ("vllm:request_time_per_output_token_seconds", "Histogram of time per output token per request."),
            )
        )


# ── reply shapes: SGLang's names in either spelling ──────────────────────────


class _Dropped:
    """A histogram child that records nothing (SGLang has no per-request TPOT histogram)."""

    def observe(self, amount: float) -> None:
        """Drop ``amount``."""


class _EveryReason:
    """``success[reason]`` for every finish reason: SGLang counts requests without a reason label."""

    __slots__ = ("_child",)

    def __init__(self, child: Counter) -> None:
        self._child = child

    def __getitem__(self, reason: str) -> Counter:
        return self._child


class SGLangNames:
    """SGLang's metric names spelled ``sglang`` + ``separator`` (see the module docstring), children resolved once.

    The same attributes as ``VLLMNames``; ``success`` maps every finish reason
    onto ``num_requests_total``, and ``tpot_s`` records nothing.
    """

    __slots__ = ("e2e_s", "generation_tokens", "prompt_tokens", "success", "tpot_s", "ttft_s")

    def __init__(
        self, registry: CollectorRegistry, engine: Engine, *, model: str, max_num_seqs: int, separator: str
    ) -> None:
        p = f"sglang{separator}"
        labels = ("model_name",)
        for name, doc, read in (
            (f"{p}num_running_reqs", "The number of running requests.", lambda: engine.running),
            (f"{p}num_queue_reqs", "The number of requests in the waiting queue.", lambda: engine.waiting),
            (
                f"{p}token_usage",
                "The token usage (simulator: share of batch slots in use).",
                lambda: engine.running / max(max_num_seqs, 1),
            ),
        ):
            Gauge(name, doc, labels, registry=registry).labels(model).set_function(read)
        self.prompt_tokens = Counter(
            f"{p}prompt_tokens", "Number of prefill tokens processed.", labels, registry=registry
        ).labels(model)
        self.generation_tokens = Counter(
            f"{p}generation_tokens", "Number of generation tokens processed.", labels, registry=registry
        ).labels(model)
        requests = Counter(f"{p}num_requests", "Number of requests processed.", labels, registry=registry).labels(model)
        self.success = _EveryReason(requests)
        self.ttft_s, self.e2e_s = (
            Histogram(name, doc, labels, buckets=LATENCY_BUCKETS_S, registry=registry).labels(model)
            for name, doc in (
                (f"{p}time_to_first_token_seconds", "Histogram of time to first token in seconds."),
                (f"{p}e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds"),
            )
        )
        self.tpot_s: _Dropped = _Dropped()
