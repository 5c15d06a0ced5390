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
  when the vLLM names are missing (a simulator older than them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

__all__ = ["GAUGES", "HISTOGRAMS", "MEAN_GAUGES", "MODEL_LABEL", "NAMES", "SCALE", "ServerKind", "detect"]


class ServerKind(StrEnum):
    """What published a metrics text, told by its metric name prefixes."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    SIM = "llmload-sim"
    DCGM = "dcgm"
    UNKNOWN = "unknown"


_PREFIXES: tuple[tuple[str, ServerKind], ...] = (
    ("llmload_sim_", ServerKind.SIM),  # before vllm: the simulator publishes vllm: names too
    ("vllm:", ServerKind.VLLM),
    ("sglang:", ServerKind.SGLANG),
    ("llamacpp:", ServerKind.LLAMACPP),
    ("tgi_", ServerKind.TGI),
    ("DCGM_FI_", ServerKind.DCGM),
)

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


def detect(names: Iterable[str]) -> ServerKind:
    """The server kind whose metric name prefix occurs in ``names`` (the simulator before vLLM)."""
    seen = set()
    for name in names:
        for prefix, kind in _PREFIXES:
            if name.startswith(prefix):
                seen.add(kind)
    for _, kind in _PREFIXES:
        if kind in seen:
            return kind
    return ServerKind.UNKNOWN
