"""Known inference servers' metric names, mapped onto llmload's common vocabulary.

Common vocabulary (units in the names; ratios 0..1):

- gauges: ``running_requests``, ``waiting_requests``, ``kv_cache_usage``,
  ``prefix_cache_hit_ratio``, ``gpu_utilization``, ``gpu_memory_used_bytes``, ``gpu_power_w``
- counters: ``prompt_tokens``, ``generation_tokens``, ``prompt_cached_tokens``,
  ``preemptions``, ``prefix_cache_queries_tokens``, ``prefix_cache_hits_tokens``,
  ``requests_succeeded``
- histograms (seconds): ``ttft_s``, ``itl_s`` (per token gap), ``tpot_s`` (per
  request mean), ``e2e_s``, ``queue_s``

Where each server's names come from (read at the cited place; first listed name wins):

- vLLM: ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) and
  ``docs/design/metrics.md`` (v0 names): ``kv_cache_usage_perc`` replaced
  ``gpu_cache_usage_perc``; ``inter_token_latency_seconds`` replaced
  ``time_per_output_token_seconds`` (0.11); ``prefix_cache_{queries,hits}``
  replaced ``gpu_prefix_cache_{queries,hits}`` and v0's ``gpu_prefix_cache_hit_rate`` gauge.
  Labelled by ``model_name`` (and ``engine``).
- SGLang: ``python/sglang/srt/metrics/collector.py`` and
  ``docs/references/production_metrics.md``; ``token_usage`` is the KV pool's
  used share; ``num_retracted_requests_total`` counts preemptions (retractions).
  Labelled by ``model_name``.
- TGI: ``docs/source/reference/metrics.md``; no token counters, so token totals
  are the ``_sum`` of the per-request ``tgi_request_input_length`` and
  ``tgi_request_generated_tokens`` histograms; no TTFT histogram.
- llama.cpp ``llama-server --metrics``: ``tools/server/README.md`` and
  ``server-context.cpp``; ``prompt_tokens_total`` excludes prompt tokens reused
  from the cache (``prompt_tokens_cached_total``); ``kv_cache_usage_ratio``
  exists only in older builds; no histograms.
- DCGM exporter: ``etc/default-counters.csv`` (GPU util in %, FB memory in MiB, power in W).
- ``llmload sim``: publishes the vLLM names (``llmload.sim.metrics``) beside its own
  ``llmload_sim_`` ground truth; it is told apart by the latter, which are read
  when the vLLM names are missing (a simulator older than them). Told to spell
  another server's names (``--metric-names sglang_``), it is read as that server.

Names by family, not by exact spelling: a server's metric is its namespace
(``vllm``, ``sglang``, ``llamacpp``, ``tgi``), a separator and a family name.
Servers and their exporters spell the separator ``:`` (the names above) or
``_`` (SGLang pages and dashboards seen in the wild, kubernetes-sigs/inference-perf
#600 and llm-d/llm-d PR #1970; exporters and relabelling that turn ``:`` into
``_``: ``sglang_num_running_reqs``, ``vllm_prompt_tokens_total``), so
``canonical`` rewrites either spelling to the one in ``NAMES`` before any
lookup; ``snapshot`` keeps the spelling it read for ``ServerSnapshot.names``.
Families that look like an LLM server's (``llm_looking``) but that no
mapping knows are listed by name (``ServerSnapshot.unmapped``), so a page in
an unknown vocabulary is reported as such, not as "no token counters".
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from enum import StrEnum

__all__ = [
    "GAUGES",
    "HISTOGRAMS",
    "MEAN_GAUGES",
    "MODEL_LABEL",
    "NAMES",
    "SCALE",
    "ServerKind",
    "canonical",
    "detect",
    "family_of",
    "llm_looking",
    "mapped_families",
]


class ServerKind(StrEnum):
    """What published a metrics text, told by its metric name prefixes."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    SIM = "llmload-sim"
    DCGM = "dcgm"
    UNKNOWN = "unknown"


_NAMESPACES: tuple[tuple[str, str, ServerKind], ...] = (
    # (namespace, separator of the names in NAMES, kind), in detection precedence: the simulator
    # before vLLM, whose names it publishes by default; a simulator that publishes another server's
    # names instead (--metric-names) is read as that server
    ("llmload_sim", "_", ServerKind.SIM),
    ("vllm", ":", ServerKind.VLLM),
    ("sglang", ":", ServerKind.SGLANG),
    ("llamacpp", ":", ServerKind.LLAMACPP),
    ("tgi", "_", ServerKind.TGI),
    ("DCGM_FI", "_", ServerKind.DCGM),
)
_SEPARATORS = (":", "_")

GAUGES: tuple[str, ...] = (
    "running_requests",
    "waiting_requests",
    "kv_cache_usage",
    "prefix_cache_hit_ratio",
    "gpu_utilization",
    "gpu_memory_used_bytes",
    "gpu_power_w",
)
"""Common gauge names; summed over series, except these averaged ones:"""
MEAN_GAUGES = frozenset({"kv_cache_usage", "prefix_cache_hit_ratio", "gpu_utilization"})
HISTOGRAMS: tuple[str, ...] = ("ttft_s", "itl_s", "tpot_s", "e2e_s", "queue_s")

_VLLM: dict[str, tuple[str, ...]] = {
    "running_requests": ("vllm:num_requests_running",),
    "waiting_requests": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prefix_cache_hit_ratio": ("vllm:gpu_prefix_cache_hit_rate",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total",),
    "prefix_cache_queries_tokens": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits_tokens": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "requests_succeeded": ("vllm:request_success_total",),
    "ttft_s": ("vllm:time_to_first_token_seconds",),
    "itl_s": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot_s": ("vllm:request_time_per_output_token_seconds",),
    "e2e_s": ("vllm:e2e_request_latency_seconds",),
    "queue_s": ("vllm:request_queue_time_seconds",),
}

_SIM_OWN: dict[str, tuple[str, ...]] = {  # llmload.sim.metrics: the ground truth, summed over endpoints
    "running_requests": ("llmload_sim_requests_running",),
    "waiting_requests": ("llmload_sim_requests_waiting",),
    "prompt_tokens": ("llmload_sim_prompt_tokens_total",),
    "generation_tokens": ("llmload_sim_completion_tokens_total",),
    "requests_succeeded": ("llmload_sim_requests_completed_total",),
    "ttft_s": ("llmload_sim_time_to_first_token_seconds",),
    "e2e_s": ("llmload_sim_request_duration_seconds",),
}

NAMES: Mapping[ServerKind, Mapping[str, tuple[str, ...]]] = {
    ServerKind.VLLM: _VLLM,
    ServerKind.SIM: {k: _VLLM.get(k, ()) + _SIM_OWN.get(k, ()) for k in {**_VLLM, **_SIM_OWN}},
    ServerKind.SGLANG: {
        "running_requests": ("sglang:num_running_reqs",),
        "waiting_requests": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
        "prefix_cache_hit_ratio": ("sglang:cache_hit_rate",),
        "prompt_tokens": ("sglang:prompt_tokens_total",),
        "generation_tokens": ("sglang:generation_tokens_total",),
        "preemptions": ("sglang:num_retracted_requests_total",),
        "requests_succeeded": ("sglang:num_requests_total",),
        "ttft_s": ("sglang:time_to_first_token_seconds",),
        "itl_s": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "e2e_s": ("sglang:e2e_request_latency_seconds",),
        "queue_s": ("sglang:queue_time_seconds",),
    },
    ServerKind.TGI: {
        "running_requests": ("tgi_batch_current_size",),
        "waiting_requests": ("tgi_queue_size",),
        "prompt_tokens": ("tgi_request_input_length_sum",),
        "generation_tokens": ("tgi_request_generated_tokens_sum",),
        "requests_succeeded": ("tgi_request_success", "tgi_request_success_total"),
        "tpot_s": ("tgi_request_mean_time_per_token_duration",),
        "e2e_s": ("tgi_request_duration",),
        "queue_s": ("tgi_request_queue_duration",),
    },
    ServerKind.LLAMACPP: {
        "running_requests": ("llamacpp:requests_processing",),
        "waiting_requests": ("llamacpp:requests_deferred",),
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
        "prompt_tokens": ("llamacpp:prompt_tokens_total",),
        "prompt_cached_tokens": ("llamacpp:prompt_tokens_cached_total",),
        "generation_tokens": ("llamacpp:tokens_predicted_total",),
    },
    ServerKind.DCGM: {
        "gpu_utilization": ("DCGM_FI_DEV_GPU_UTIL",),
        "gpu_memory_used_bytes": ("DCGM_FI_DEV_FB_USED",),
        "gpu_power_w": ("DCGM_FI_DEV_POWER_USAGE",),
    },
    ServerKind.UNKNOWN: {},
}
"""Per server kind: common name → raw sample names (counters with ``_total``; histograms by base name)."""
SCALE = {"DCGM_FI_DEV_GPU_UTIL": 0.01, "DCGM_FI_DEV_FB_USED": float(1 << 20)}  # % → 0..1, MiB → bytes
MODEL_LABEL = "model_name"


def canonical(name: str) -> str:
    """``name`` with a known server's namespace separator spelled as in ``NAMES``, else unchanged.

    ``sglang_num_running_reqs`` → ``sglang:num_running_reqs``, ``vllm_prompt_tokens_total`` →
    ``vllm:prompt_tokens_total``, ``tgi:queue_size`` → ``tgi_queue_size``; ``llmload_sim_`` and
    ``DCGM_FI_`` names have one spelling.
    """
    for namespace, separator, kind in _NAMESPACES:
        if name.startswith(namespace) and len(name) > len(namespace) + 1:
            found = name[len(namespace)]
            if found in _SEPARATORS and kind not in (ServerKind.SIM, ServerKind.DCGM):
                return name if found == separator else namespace + separator + name[len(namespace) + 1 :]
    return name


def family_of(name: str) -> str:
    """A sample name's family: without ``_bucket``, ``_sum``, ``_count``, ``_total`` or ``_created``."""
    for suffix in ("_bucket", "_count", "_sum", "_created", "_total"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def detect(names: Iterable[str]) -> ServerKind:
    """The server kind whose namespace occurs in ``names`` (canonical spellings), by ``_NAMESPACES`` precedence.

    ``llmload_sim_`` names mean the simulator only beside vLLM's names (its default) or none; beside
    another server's names they mean the simulator imitating that server, which is then the kind.
    """
    seen = set()
    for name in names:
        for namespace, separator, kind in _NAMESPACES:
            if name.startswith(namespace + separator):
                seen.add(kind)
    if ServerKind.SIM in seen and seen - {ServerKind.SIM, ServerKind.VLLM, ServerKind.DCGM}:
        seen.discard(ServerKind.SIM)  # the simulator speaking another server's names
    for _, _, kind in _NAMESPACES:
        if kind in seen:
            return kind
    return ServerKind.UNKNOWN


@functools.cache
def mapped_families() -> frozenset[str]:
    """Every family (canonical spelling) that some mapping of ``NAMES`` reads."""
    return frozenset(family_of(name) for table in NAMES.values() for names in table.values() for name in names)


@functools.cache
def mapped_histograms() -> frozenset[str]:
    """Every histogram family (canonical spelling) some mapping of ``NAMES`` reads (others' buckets go unread)."""
    return frozenset(name for table in NAMES.values() for common in HISTOGRAMS for name in table.get(common, ()))


_LLM_STEMS = (
    "token", "ttft", "tpot", "time_to_first", "kv_cache", "prefill", "decode", "prompt", "generat",
    "inference", "preempt", "queue", "request",
)  # fmt: skip
_LLM_WORDS = frozenset({"req", "reqs", "itl", "kv", "cache", "running", "waiting", "batch", "seqs", "sequences"})
_GENERIC_NAMESPACES = ("http_", "process_", "python_", "go_", "promhttp_", "llmload_")  # not an LLM server's own


def llm_looking(family: str) -> bool:
    """Whether a family's name reads like an LLM server's (tokens, TTFT, requests, KV cache, queue...).

    A name looks so when it contains a stem such as ``token``, ``ttft``, ``time_to_first``,
    ``kv_cache``, ``prefill``, ``decode``, ``prompt``, ``generat``, ``queue`` or ``request``, or a
    word (split at ``_`` and ``:``) such as ``reqs``, ``itl``, ``cache``, ``running``, ``waiting``
    or ``batch``. Generic HTTP, process and runtime families (``http_``, ``process_``,
    ``python_``, ``go_``) and llmload's own do not count.
    """
    if family.startswith(_GENERIC_NAMESPACES):
        return False
    lowered = family.lower()
    if any(stem in lowered for stem in _LLM_STEMS):
        return True
    return bool(set(lowered.replace(":", "_").split("_")) & _LLM_WORDS)
