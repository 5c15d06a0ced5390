"""A run of snapshots: counter deltas, gauge mean/max, histogram deltas; the results' ``server`` section."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from llmload.servermetrics.names import GAUGES, HISTOGRAMS, ServerKind
from llmload.servermetrics.snapshot import MAX_UNMAPPED, BucketCounts, ServerSnapshot

__all__ = ["Endpoint", "ServerRun", "counter_increase", "cross_check", "summarise"]


@dataclass(slots=True)
class _GaugeStats:
    total: float = 0.0
    samples: int = 0
    max: float = -math.inf

    def add(self, value: float) -> None:
        self.total += value
        self.samples += 1
        self.max = max(self.max, value)


@dataclass(slots=True)
class ServerRun:
    """The snapshots of one endpoint over one run, reduced as they come.

    The first snapshot is the baseline. Counter deltas add each step's
    increase; a counter that went down was reset (server restart) and adds its
    new value. A series that appears mid-run counts from 0. Gauges are
    averaged over the snapshots added with ``sample_gauges`` (taken while the
    load ran).
    """

    kind: ServerKind | None = None
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, BucketCounts] = field(default_factory=dict)
    gauges: dict[str, _GaugeStats] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    snapshots: int = 0
    _last: ServerSnapshot | None = None

    def add(self, snap: ServerSnapshot, *, sample_gauges: bool) -> None:
        """Fold in the next snapshot of this endpoint."""
        self.snapshots += 1
        self.kind = snap.kind
        self.names.update(snap.names)
        self.notes.extend(n for n in snap.notes if n not in self.notes)
        self.unmapped.extend(n for n in snap.unmapped if n not in self.unmapped)
        if sample_gauges:
            for name in GAUGES:
                if name in snap.values:
                    self.gauges.setdefault(name, _GaugeStats()).add(snap.values[name])
        last, self._last = self._last, snap
        if last is None:
            return
        for name, value in snap.values.items():
            if name not in GAUGES:
                self.counters[name] = self.counters.get(name, 0.0) + counter_increase(last.values.get(name), value)
        for name, hist in snap.histograms.items():
            before = last.histograms.get(name)
            step = hist if before is None else (hist.minus(before) or hist)
            self.histograms[name] = self.histograms[name].plus(step) if name in self.histograms else step

    def gauge_summary(self, name: str) -> dict[str, float | int | None]:
        """``{mean, max, samples}`` of one common gauge; nulls without samples."""
        stats = self.gauges.get(name)
        if stats is None or stats.samples == 0:
            return {"mean": None, "max": None, "samples": 0}
        return {"mean": stats.total / stats.samples, "max": stats.max, "samples": stats.samples}


def counter_increase(before: float | None, now: float) -> float:
    """A counter's increase between two reads; a decrease means it was reset and restarted from 0."""
    if before is None or now < before:
        return now
    return now - before


@dataclass(slots=True)
class Endpoint:
    """One scraped URL and what came of it over the run.

    Attributes:
        url: the ``/metrics`` URL (never with credentials).
        run: its snapshots, reduced.
        failed_scrapes: scrapes that failed (timeout, HTTP error, not Prometheus text).
        error: the last failure's message, None if none failed.
        start_ok: the scrape before the load succeeded (the deltas' baseline).
        end_ok: the scrape after the load succeeded.
    """

    url: str
    run: ServerRun = field(default_factory=ServerRun)
    failed_scrapes: int = 0
    error: str | None = None
    start_ok: bool = False
    end_ok: bool = False


_TOKEN_COUNTERS = ("prompt_tokens", "generation_tokens", "prompt_cached_tokens")
_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def summarise(endpoints: list[Endpoint]) -> dict[str, object] | None:
    """The results' ``server`` section from every endpoint scraped; None when none ever answered.

    Counters and histograms come from the first endpoint that has them (the
    target comes first, then the extra URLs in their order), as do gauges.
    """
    answered = [e for e in endpoints if e.run.snapshots > 0]
    if not answered:
        return None
    kinds = [e.run.kind for e in answered if e.run.kind not in (None, ServerKind.DCGM)]
    counters: dict[str, float] = {}
    histograms: dict[str, BucketCounts] = {}
    names: dict[str, str] = {}
    gauges: dict[str, dict[str, float | int | None]] = {}
    unmapped: list[str] = []
    for e in answered:
        unmapped.extend(n for n in e.run.unmapped if n not in unmapped)
        for name, value in e.run.counters.items():
            counters.setdefault(name, value)
        for name, hist in e.run.histograms.items():
            histograms.setdefault(name, hist)
        for name in GAUGES:
            if name not in gauges and name in e.run.gauges:
                gauges[name] = e.run.gauge_summary(name)
        for name, raw in e.run.names.items():
            names.setdefault(name, raw)
    ratio = None
    if counters.get("prefix_cache_queries_tokens"):
        ratio = counters.get("prefix_cache_hits_tokens", 0.0) / counters["prefix_cache_queries_tokens"]
    elif "prompt_cached_tokens" in counters and counters["prompt_cached_tokens"] + counters.get("prompt_tokens", 0):
        ratio = counters["prompt_cached_tokens"] / (counters["prompt_cached_tokens"] + counters.get("prompt_tokens", 0))
    elif "prefix_cache_hit_ratio" in gauges:
        mean = gauges["prefix_cache_hit_ratio"]["mean"]
        ratio = None if mean is None else float(mean)
    return {
        "kind": str(kinds[0]) if kinds else str(ServerKind.UNKNOWN),
        "reset": None,  # a RESET's window: ServerScraper.finish fills it in
        "complete": all(e.start_ok and e.end_ok for e in endpoints),
        "endpoints": [
            {
                "url": e.url,
                "kind": None if e.run.kind is None else str(e.run.kind),
                "scrapes": e.run.snapshots,
                "failed_scrapes": e.failed_scrapes,
                "error": e.error,
            }
            for e in endpoints
        ],
        **{name: _count(counters.get(name)) for name in _TOKEN_COUNTERS},
        "counters": {k: _count(v) for k, v in sorted(counters.items()) if k not in _TOKEN_COUNTERS},
        "prefix_cache_hit_ratio": ratio,
        "gauges": {name: gauges.get(name, {"mean": None, "max": None, "samples": 0}) for name in GAUGES},
        "latency": {name: _latency(histograms.get(name)) for name in HISTOGRAMS},
        "names": dict(sorted(names.items())),
        "notes": [n for e in answered for n in e.run.notes],
        "unmapped_families": unmapped[:MAX_UNMAPPED],
    }


def _count(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value


def _latency(hist: BucketCounts | None) -> dict[str, object] | None:
    """Mean, quantiles and count; each quantile's ``<p>_range`` is ``[lower, upper]`` (``BucketCounts.estimate``)."""
    if hist is None:
        return None
    out: dict[str, object] = {"mean": hist.mean()}
    for key, q in _QUANTILES:
        estimate = hist.estimate(q)
        out[key] = None if estimate is None else estimate.value
        out[f"{key}_range"] = None if estimate is None else [estimate.lower, estimate.upper]
    out["count"] = _count(hist.count)
    return out


def cross_check(
    server: Mapping[str, object],
    *,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    ttft_mean_s: float | None,
    ttft_p50_s: float | None,
    ttft_count: int | None = None,
) -> dict[str, object]:
    """Client totals against the server's counters, and client TTFT − server TTFT.

    Args:
        server: a ``summarise`` result.
        prompt_tokens, completion_tokens: the client's totals over successful requests.
        ttft_mean_s, ttft_p50_s: the client's TTFT over the same requests.
        ttft_count: how many requests the client's TTFT covers (None: not known, not checked).

    Returns:
        ``{tokens, prompt_tokens_diff, generation_tokens_diff, ttft_client_minus_server_s}``:
        ``tokens`` says "client = server" or the difference and its likely
        cause; diffs are client − server (None when either is unknown); the
        TTFT difference (``{mean, p50, p50_resolution_s}``) is network + HTTP
        + client time. The p50 difference is None when it is finer than the
        server's histogram can tell: smaller than the width of the range its
        p50 may lie in (``p50_resolution_s``; a 100 ms bucket cannot show a
        3 ms difference). The difference holds only over the same requests:
        when the server timed a different number of first tokens than the
        client (requests cancelled at the stop, warm-up requests, other
        clients of a shared server), ``mean`` and ``p50`` are None and
        ``not_comparable`` says why (``client_count``, ``server_count``);
        otherwise ``not_comparable`` is None.
    """
    prompt_diff = _diff(prompt_tokens, server.get("prompt_tokens"))
    gen_diff = _diff(completion_tokens, server.get("generation_tokens"))
    latency = server.get("latency")
    ttft = latency.get("ttft_s") if isinstance(latency, Mapping) else None
    ttft_diff: dict[str, object] | None = None
    if isinstance(ttft, Mapping) and ttft.get("count"):
        ttft_diff = {"mean": _diff(ttft_mean_s, ttft.get("mean")), **_p50_diff(ttft_p50_s, ttft)}
        server_count = ttft.get("count")
        ttft_diff.update(client_count=ttft_count, server_count=server_count, not_comparable=None)
        if ttft_count is not None and server_count != ttft_count:
            ttft_diff.update(mean=None, p50=None, not_comparable=_not_comparable(ttft_count, server_count))
    return {
        "tokens": _token_verdict(server, prompt_diff, gen_diff),
        "prompt_tokens_diff": prompt_diff,
        "generation_tokens_diff": gen_diff,
        "ttft_client_minus_server_s": ttft_diff,
    }


def _not_comparable(client_count: int, server_count: object) -> str:
    """Why a client − server TTFT difference would mislead: the two sides timed different requests."""
    more = "more" if isinstance(server_count, int | float) and server_count > client_count else "fewer"
    return (
        f"the server timed {server_count:,} first tokens, the client {client_count:,} "
        f"({more} on the server: requests cancelled at the stop, warm-up requests or other clients count "
        "on one side only, or a failed scrape before or after the load left the server's figures over "
        "another window), so the means are over different requests"
    )


def _p50_diff(client_p50_s: float | None, server: Mapping[str, object]) -> dict[str, float | None]:
    """``{p50, p50_resolution_s}``: client − server p50, None when the server's p50 range is wider than it."""
    diff = _diff(client_p50_s, server.get("p50"))
    bounds = server.get("p50_range")
    width: float | None = None
    if isinstance(bounds, list) and len(bounds) == 2 and isinstance(bounds[0], int | float):
        width = bounds[1] - bounds[0] if isinstance(bounds[1], int | float) else math.inf
    if diff is not None and width is not None and width > abs(diff):
        diff = None
    return {"p50": diff, "p50_resolution_s": None if width is None or math.isinf(width) else width}


def _diff(client: float | None, server: object) -> float | None:
    """client − server; None when either is unknown (ints stay ints)."""
    if client is None or not isinstance(server, int | float):
        return None
    return client - server


_SHOWN_UNMAPPED = 12
"""Unmapped families named in the token verdict (the results list them all)."""


def _token_verdict(server: Mapping[str, object], prompt_diff: float | None, gen_diff: float | None) -> str:
    if prompt_diff is None and gen_diff is None:
        unmapped = server.get("unmapped_families")
        if not isinstance(unmapped, list) or not unmapped:
            return "server has no token counters"
        shown = ", ".join(str(n) for n in unmapped[:_SHOWN_UNMAPPED])
        more = f" and {len(unmapped) - _SHOWN_UNMAPPED} more" if len(unmapped) > _SHOWN_UNMAPPED else ""
        return (
            f"no token counters llmload can read; the page has LLM-looking metrics no mapping knows: {shown}{more} "
            "(all in server.unmapped_families; llmload reads vLLM, SGLang, TGI and llama.cpp names, `:` or `_` spelled)"
        )
    diffs = {"prompt": prompt_diff, "generation": gen_diff}
    if all(not d for d in diffs.values()):
        return "client = server" + ("" if None not in diffs.values() else " (generation only)")
    parts = [f"{k} client {'+' if d > 0 else '−'}{abs(d):,g} vs server" for k, d in diffs.items() if d]
    cached = server.get("prompt_cached_tokens")
    if cached and prompt_diff == cached and not gen_diff:
        cause = "the server counts prompt tokens reused from its cache apart (prompt_cached_tokens)"
    elif any(d is not None and d < 0 for d in diffs.values()):
        cause = (
            "the server counted more: requests from others on a shared server, failed or cancelled "
            "requests, warm-up or preflight requests"
        )
    else:
        cause = "the client counted more: server counters not final when scraped, or prompt-cache accounting"
        reset = server.get("reset")
        if isinstance(reset, Mapping) and reset.get("client_succeeded_before_baseline"):
            cause = (
                f"the client counted more: {reset['client_succeeded_before_baseline']:,} request(s) finished "
                f"between the RESET and the server's new baseline ({reset['baseline_after_s']:.2f} s later) "
                "count on the client only"
            )
    if not server.get("complete"):
        cause += "; a start or end scrape failed, so the server deltas miss part of the run"
    return f"{', '.join(parts)}; likely: {cause}"
