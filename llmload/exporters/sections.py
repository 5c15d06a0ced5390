"""The statistics sections of the results document, from one ``EndpointStats``.

``stats_sections`` gives the keys the run total and each ``by_endpoint`` entry
share (``requests``, ``errors``, ``tokens``, ``duration_s``, ``throughput``,
``latency``, ``client``, ``goodput``); ``llmload.exporters.results`` adds the
run-level keys. This module also holds the rules every output applies alike:
the reported percentiles (``PERCENTILES``), the histogram summary and the
client-saturation rule. Metric definitions: ``llmload.exporters.results``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import LATENCY_HISTOGRAM_NAMES, REQUEST_LAG_LIMIT_S, EndpointStats
from llmload.request.degenerate import DEGENERATE_REPEATED, DEGENERATE_SAME_TEXT
from llmload.request.record import Outcome, TokenSource
from llmload.settings.goodput import SLO

__all__ = [
    "CPU_SATURATION_S",
    "MIXED",
    "PERCENTILES",
    "READ_LAG_LIMIT_S",
    "REQUEST_LAG_LIMIT_S",
    "client_saturated",
    "latency_section",
    "read_lag_saturated",
    "stats_sections",
    "summarize",
]

PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
"""The reported percentiles, (name, quantile): results keys, console rows and live quantile gauges."""

READ_LAG_LIMIT_S = 0.002
"""p99 read lag above which the client's delay is flagged (``client.read_lag_saturated``)."""

CPU_SATURATION_S = 5.0
"""Seconds of CPU above 90% in a row after which a load-generating process counts as saturated."""

MIXED = "mixed"
"""The value of a source or kind field when requests differed."""

_E = TypeVar("_E", bound=Enum)


def read_lag_saturated(read_lag: LatencyHistogram) -> bool:
    """True when the client was too late to trust its latencies.

    The P99 read lag exceeds ``READ_LAG_LIMIT_S`` (latencies at large may be
    off), or any read's lag exceeds ``REQUEST_LAG_LIMIT_S`` (the read lag
    bounds the error of every time its read gave, so some request's TTFT,
    ITL or E2E may be off by more than that, however low the P99).
    """
    worst = read_lag.max
    if worst is None:
        return False
    if worst > REQUEST_LAG_LIMIT_S:
        return True
    p99 = read_lag.quantile(0.99)
    return p99 is not None and p99 > READ_LAG_LIMIT_S


def client_saturated(
    cpu_saturated_s: float, read_lag: LatencyHistogram, request_lag: LatencyHistogram | None = None
) -> bool:
    """The one saturation rule: CPU above 90% for ``CPU_SATURATION_S`` or more, or a late client (read or send lag).

    Decides the results' ``client_saturated`` and the live ``llmload_client_saturated`` gauge.

    Args:
        cpu_saturated_s: longest CPU saturation streak of any load-generating process (s).
        read_lag: the client's read lag over the run so far.
        request_lag: the requests' lags over the same span (the larger of each request's read and
            send lag): any above ``REQUEST_LAG_LIMIT_S`` flags the run too; None: not judged.
    """
    if cpu_saturated_s >= CPU_SATURATION_S or read_lag_saturated(read_lag):
        return True
    worst = request_lag.max if request_lag is not None else None
    return worst is not None and worst > REQUEST_LAG_LIMIT_S


def summarize(hist: LatencyHistogram) -> dict[str, Any]:
    """``mean``, one key per ``PERCENTILES`` entry, ``max`` and ``count`` of ``hist`` (None when unknown)."""
    summary: dict[str, Any] = {"mean": hist.mean}
    summary.update(zip((name for name, _ in PERCENTILES), hist.quantiles([q for _, q in PERCENTILES]), strict=True))
    summary["max"] = hist.max
    summary["count"] = hist.count
    return summary


def stats_sections(s: EndpointStats, slo: SLO | None) -> dict[str, Any]:
    """The sections of one statistics key (or the total), in the document's key order."""
    duration_s = _duration_s(s)
    tokens = _tokens(s)
    return {
        "goodput": _goodput(s, slo, duration_s),
        "requests": _requests(s),
        "errors": [g.as_dict(c) for c, g in sorted(s.errors.items(), key=lambda item: (-item[1].count, item[0]))],
        "tokens": tokens,
        "duration_s": duration_s,
        "send_span_s": None
        if s.first_send_unix is None or s.last_send_unix is None
        else s.last_send_unix - s.first_send_unix,
        "throughput": _throughput(s, tokens, duration_s),
        "latency": latency_section(s),
        "client": _client(s),
    }


def _client(s: EndpointStats) -> dict[str, Any]:
    stamped, unstamped = s.read_lag_s.count, s.unstamped_reads
    clock = None if not stamped + unstamped else "monotonic" if not stamped else MIXED if unstamped else "kernel"
    return {
        "clock": clock,
        "stamped_reads": stamped,
        "unstamped_reads": unstamped,
        "read_lag_s": summarize(s.read_lag_s),
        "read_lag_limit_s": READ_LAG_LIMIT_S,
        "read_lag_saturated": read_lag_saturated(s.read_lag_s),
        "request_lag_s": summarize(s.request_lag_s),
        "request_lag_limit_s": REQUEST_LAG_LIMIT_S,
        "lagged_requests": s.lagged_requests,
        "connect_s": summarize(s.connect_s),
    }


def _requests(s: EndpointStats) -> dict[str, Any]:
    total = s.finished
    return {
        "total": total,
        "succeeded": s.succeeded,
        "failed": s.failed,
        "cancelled": s.cancelled,
        "skipped": s.skipped,
        "failure_ratio": s.failed / total if total else None,
        "by_outcome": {o.value: s.requests_by_outcome.get(o, 0) for o in Outcome},
        **_reply_checks(s),
    }


def _reply_checks(s: EndpointStats) -> dict[str, Any]:
    """``requests.{finish_reasons, short_of_requested, degenerate}`` (replies measured, not trusted)."""
    short = s.short_requests

    def sample(category: str) -> str | None:
        group = s.errors.get(category)
        return group.samples[0] if group is not None and group.samples else None

    return {
        "finish_reasons": dict(sorted(s.finish_reasons.items())),
        "without_finish_reason": s.no_finish_reason_requests,
        "short_of_requested": {
            "checked": s.short_checked_requests,
            "short": short,
            "mean_got_tokens": s.short_got_tokens / short if short else None,
            "mean_asked_tokens": s.short_asked_tokens / short if short else None,
        },
        "degenerate": {
            "empty": s.requests_by_outcome.get(Outcome.EMPTY, 0),
            "repeated_token": s.degenerate_repeated_requests,
            "same_text": s.degenerate_same_text_requests,
            "samples": {"repeated_token": sample(DEGENERATE_REPEATED), "same_text": sample(DEGENERATE_SAME_TEXT)},
        },
    }


def _one_or_mixed(values: Mapping[_E, int]) -> str | None:
    """The one value every request had, ``"mixed"``, or None without requests."""
    if not values:
        return None
    return str(next(iter(values)).value) if len(values) == 1 else MIXED


def _by_name(counts: Mapping[TokenSource, int]) -> dict[str, int]:
    return {k.value: n for k, n in sorted(counts.items(), key=lambda item: item[0].value)}


def _tokens(s: EndpointStats) -> dict[str, Any]:
    prompt_known = s.prompt_tokens_known_requests
    completion_known = s.completion_tokens_known_requests
    requested_n = s.requested_prompt_tokens_count
    return {
        "prompt": s.prompt_tokens_sum if prompt_known else None,
        "completion": s.completion_tokens_sum if completion_known else None,
        "prompt_source": _one_or_mixed(s.prompt_source_requests),
        "prompt_sources": _by_name(s.prompt_source_requests),
        "completion_source": _one_or_mixed(s.completion_source_requests),
        "completion_sources": _by_name(s.completion_source_requests),
        "completion_tokens_by_source": _by_name(s.completion_tokens_by_source),
        "avg_prompt_per_request": s.prompt_tokens_sum / prompt_known if prompt_known else None,
        "avg_completion_per_request": s.completion_tokens_sum / completion_known if completion_known else None,
        "requested_prompt_avg": s.requested_prompt_tokens_sum / requested_n if requested_n else None,
        "prompt_vs_requested": _prompt_vs_requested(s),
        "completion_client_vs_server": _client_vs_server(s),
        **_usage_details(s, completion_known),
    }


def _usage_details(s: EndpointStats, completion_known: int) -> dict[str, Any]:
    """Reasoning vs answer tokens, cached prompt tokens and the usage checks (``UsageNote`` counts).

    ``reasoning``/``cached_prompt`` are None when no success's server said;
    ``answer`` (completion − the reasoning counted inside it, never negative:
    ``EndpointStats.answer_tokens``) only when every success with a
    completion count also had a reasoning count; ``reasoning_apart`` is the
    reasoning servers counted apart from their completion tokens. ``streamed_completion`` is
    completion minus reasoning tokens that were never streamed.
    """
    reasoning_n, cached_n = s.reasoning_known_requests, s.cached_prompt_tokens_known_requests
    completion = s.completion_tokens_sum if completion_known else None
    return {
        "reasoning": s.reasoning_tokens_sum if reasoning_n else None,
        "reasoning_known_requests": reasoning_n,
        "answer": s.answer_tokens,
        "reasoning_apart": s.reasoning_apart_tokens_sum,
        "hidden_reasoning": s.hidden_reasoning_tokens_sum,
        "streamed_completion": completion - s.hidden_reasoning_tokens_sum if completion is not None else None,
        "cached_prompt": s.cached_prompt_tokens_sum if cached_n else None,
        "cached_prompt_known_requests": cached_n,
        "avg_cached_prompt_per_request": s.cached_prompt_tokens_sum / cached_n if cached_n else None,
        "usage_checks": {
            "usage_incremental": s.usage_incremental_requests,
            "usage_not_growing": s.usage_not_growing_requests,
            "usage_below_events": s.usage_below_events_requests,
            "hidden_reasoning": s.hidden_reasoning_requests,
            "reasoning_unexplained": s.reasoning_unexplained_requests,
            "reasoning_apart": s.reasoning_apart_requests,
            "usage_above_text": s.usage_above_text_requests,
            "cached_above_prompt": s.cached_above_prompt_requests,
            "usage_detail_unreadable": s.usage_detail_unreadable_requests,
        },
    }


def _prompt_vs_requested(s: EndpointStats) -> dict[str, Any]:
    n = s.requested_compared_requests
    return {
        "compared": n,
        "mean_abs_diff": s.requested_abs_diff_tokens / n if n else None,
        "relative_diff": s.requested_abs_diff_tokens / s.requested_compared_tokens
        if s.requested_compared_tokens
        else None,
    }


def _client_vs_server(s: EndpointStats) -> dict[str, Any]:
    n = s.tokenizer_compared_requests
    return {
        "compared": n,
        "disagreed": s.tokenizer_disagreed_requests,
        "mean_abs_diff": s.tokenizer_abs_diff_tokens / n if n else None,
    }


def _goodput(s: EndpointStats, slo: SLO | None, duration_s: float | None) -> dict[str, Any] | None:
    if slo is None:
        return None
    met, finished = s.slo_met_requests, s.finished
    return {
        "requests_per_s": met / duration_s if duration_s and duration_s > 0 else None,
        "share": met / finished if finished else None,
        "requests": met,
        "slo": slo.as_dict(),
    }


def _duration_s(s: EndpointStats) -> float | None:
    if s.first_send_unix is None or s.last_end_unix is None:
        return None
    return s.last_end_unix - s.first_send_unix


def _throughput(s: EndpointStats, tokens: Mapping[str, Any], duration_s: float | None) -> dict[str, Any]:
    if not duration_s or duration_s <= 0:
        return {
            "requests_per_s": None,
            "output_tokens_per_s": None,
            "total_tokens_per_s": None,
            "streamed_output_tokens_per_s": None,
            "input_tokens_per_s": None,
            "inputs_per_s": None,
        }
    prompt, completion, streamed = tokens["prompt"], tokens["completion"], tokens["streamed_completion"]
    return {
        "requests_per_s": s.succeeded / duration_s,
        "output_tokens_per_s": completion / duration_s if completion is not None else None,
        "streamed_output_tokens_per_s": streamed / duration_s if streamed is not None else None,
        "total_tokens_per_s": (
            (prompt + completion) / duration_s if prompt is not None and completion is not None else None
        ),
        "input_tokens_per_s": prompt / duration_s if prompt is not None else None,
        "inputs_per_s": s.inputs_sum / duration_s if s.inputs_sum else None,  # embeddings only
    }


def latency_section(s: EndpointStats) -> dict[str, Any]:
    """The ``latency`` section of ``s``: each latency histogram's summary, and ``itl_kind``."""
    latency: dict[str, Any] = {name: summarize(getattr(s, name)) for name in LATENCY_HISTOGRAM_NAMES}
    latency["itl_kind"] = _one_or_mixed(s.itl_kind_requests)
    return latency
