"""Prometheus metrics of the master (or the single process): a Collector over the live view.

``LLMLoadCollector`` reads a ``RunView`` (``llmload.exporters.window``: the
master's merged ``LLMStats``, the live window and a few runner gauges) at
scrape time; nothing is copied or precomputed between scrapes.
``llmload.exporters.prometheus_server`` registers it in its own
``CollectorRegistry`` (never the global one) and serves ``GET /metrics``.
Workers run no exporter: their statistics reach the master as deltas.

Metric families (prefix ``llmload_``, base units; ``endpoint`` is the user's
API: ``chat``, ``completions``, ``responses``, ``messages`` or ``embeddings``;
``model`` the served model name; embeddings have no completion tokens, TTFT,
ITL or TPOT, so their completion and token-time families stay empty). Counters and histograms
count exactly what the end-of-run results count, so after the run they equal
the results JSON (``requests.by_outcome``, ``errors``, ``tokens``,
``latency.*.count``):

- ``llmload_requests_total{endpoint,model,outcome}``: finished and cancelled
  requests by ``Outcome`` value (8 values, all exported from the first request).
- ``llmload_request_errors_total{endpoint,model,error_type}``: failures by
  ``ErrorInfo.category`` (built from label-safe server type/code fields only;
  at most 50 types per endpoint/model, the rest in ``other``; truncated to
  100 characters). Error messages never become labels.
- ``llmload_prompt_tokens_total{endpoint,model}``: prompt tokens of successes.
- ``llmload_completion_tokens_total{endpoint,model,source}``: completion tokens
  of successes by count source (``server``, ``logprobs``, ``client-tokenized``,
  ``chunk-count``); the sum over sources is ``tokens.completion``.
- ``llmload_reasoning_tokens_total{endpoint,model}``: usage's reasoning tokens
  of successes (part of the completion tokens; ``tokens.reasoning``);
  ``llmload_hidden_reasoning_tokens_total``: those never streamed
  (``tokens.hidden_reasoning``); ``llmload_reasoning_apart_tokens_total``:
  those servers counted apart from (above) their completion tokens
  (``tokens.reasoning_apart``; answer = completion − (reasoning − apart)); ``llmload_cached_prompt_tokens_total``:
  prompt tokens the server served from its prefix cache (``tokens.cached_prompt``);
  ``llmload_usage_checks_total{endpoint,model,check}``: successes per usage
  check (``tokens.usage_checks``).
- histograms ``llmload_time_to_first_token_seconds``,
  ``llmload_inter_token_latency_seconds``,
  ``llmload_time_per_output_token_seconds``,
  ``llmload_request_duration_seconds`` (E2E) ``{endpoint,model}`` over
  successes (names follow vLLM's server-side metrics), and
  ``llmload_client_read_lag_seconds`` over every kernel-stamped read of
  finished requests (how far the times a read gave may be off, see ``llmload.net.transport``).
- gauges ``llmload_users``, ``llmload_in_flight_requests``, ``llmload_workers``
  (connected workers; 0 for a single process), ``llmload_run_start_time_seconds``.
- live window gauges ``{endpoint,model}``: ``llmload_window_output_tokens_per_second``,
  ``llmload_window_requests_per_second`` (successes) and, with a ``quantile``
  label (0.5, 0.9, 0.99), ``llmload_window_time_to_first_token_seconds``,
  ``llmload_window_inter_token_latency_seconds``,
  ``llmload_window_time_per_output_token_seconds``,
  ``llmload_window_request_duration_seconds``,
  ``llmload_window_client_read_lag_seconds``; plus ``llmload_window_length_seconds``.
  See ``llmload.exporters.window``; quantiles use ``LatencyHistogram.quantiles``,
  the rule of the report.
- ``llmload_run_info{run_id,host,model,version}`` = 1 (user:password is
  removed from the host URL).

Histogram buckets: the exported edges are every second edge of
``llmload.aggregate.histogram``'s log buckets, ``GAMMA**k`` for even ``k`` from -346 to
320 (0.988 ms … 602 s, 334 edges, ratio ``GAMMA**2`` ≈ 1.0408 between
neighbours). Because each exported edge is also an internal edge, every
cumulative count ``le=e`` is exact: the number of values ``<= e``. Prometheus'
``histogram_quantile`` interpolates linearly inside one exported bucket, so
its estimate and the exact quantile lie in the same bucket: relative error
below 4.1% between 0.988 ms and 602 s (and below 3.1% against the report's
own p99, which sits inside the same bucket within 1% of exact). Below the
first edge the error is absolute, under 1 ms; above 602 s only ``+Inf``
remains. The residual float rounding at an edge is ~1e-15 relative.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from llmload.aggregate.histogram import GAMMA, LatencyHistogram
from llmload.aggregate.stats import LLMStats
from llmload.exporters.sections import CPU_SATURATION_S, PERCENTILES, READ_LAG_LIMIT_S, REQUEST_LAG_LIMIT_S
from llmload.exporters.window import RunView, WindowView
from llmload.request.record import Outcome, TokenSource
from llmload.settings.credentials import public_url

__all__ = [
    "BUCKET_EDGES_S",
    "LAG_BUCKET_EDGES_S",
    "MAX_LABEL_CHARS",
    "WINDOW_QUANTILES",
    "LLMLoadCollector",
    "histogram_buckets",
]

_FIRST_EDGE_INDEX = -346  # GAMMA**-346 ≈ 0.988 ms
_LAST_EDGE_INDEX = 320  # GAMMA**320 ≈ 602 s
_EDGE_INDEXES: tuple[int, ...] = tuple(range(_FIRST_EDGE_INDEX, _LAST_EDGE_INDEX + 1, 2))
BUCKET_EDGES_S: tuple[float, ...] = tuple(GAMMA**k for k in _EDGE_INDEXES)
"""Exported histogram bucket upper bounds in seconds (``+Inf`` not included)."""
_EDGE_LABELS: tuple[str, ...] = tuple(repr(edge) for edge in BUCKET_EDGES_S)
# The client's read lag is mostly well below 1 ms: its buckets start at ~10 us, ~17% apart, up to ~10 s.
_LAG_EDGE_INDEXES: tuple[int, ...] = tuple(range(-576, 116, 8))
LAG_BUCKET_EDGES_S: tuple[float, ...] = tuple(GAMMA**k for k in _LAG_EDGE_INDEXES)
"""Bucket upper bounds of ``llmload_client_read_lag_seconds`` in seconds (``+Inf`` not included)."""
_LAG_EDGE_LABELS: tuple[str, ...] = tuple(repr(edge) for edge in LAG_BUCKET_EDGES_S)
_LATENCY_EDGES = (_EDGE_LABELS, _EDGE_INDEXES)
_LAG_EDGES = (_LAG_EDGE_LABELS, _LAG_EDGE_INDEXES)

WINDOW_QUANTILES = tuple(q for _, q in PERCENTILES)
"""Quantiles exported by the window gauges (the reported percentiles)."""
_QUANTILE_LABELS = tuple(str(q) for q in WINDOW_QUANTILES)

MAX_LABEL_CHARS = 100
"""Longest ``error_type`` label value; longer categories are truncated (and merged if they collide)."""

_HISTOGRAMS = (
    ("ttft_s", "time_to_first_token_seconds", "Time from send to the first generated token (TTFT), successes"),
    ("itl_s", "inter_token_latency_seconds", "Gaps between consecutive tokens, TTFT excluded (ITL), successes"),
    ("tpot_s", "time_per_output_token_seconds", "(last token - first token) / (completion tokens - 1), successes"),
    ("e2e_s", "request_duration_seconds", "Time from send to the end of the reply (E2E), successes"),
)
_NO_OUTPUT_ENDPOINTS = frozenset({"embeddings"})
"""Endpoints that generate nothing: no completion-token or token-time series (absent, never 0)."""
_TOKEN_TIMES = frozenset({"ttft_s", "itl_s", "tpot_s"})

_SATURATED_HELP = (
    f"1 when a load-generating process ran above 90% CPU for {CPU_SATURATION_S:g} s or more, or the client's "
    f"P99 read lag exceeds {READ_LAG_LIMIT_S * 1e3:g} ms or any request's read or send lag "
    f"{REQUEST_LAG_LIMIT_S * 1e3:g} ms (events piled up behind late reads, or a send the kernel held; over the live "
    "window while the run goes on, the whole run once it ended): "
    "latencies may be the client's"
)
"""HELP of ``llmload_client_saturated``: the gauge follows ``sections.client_saturated`` (CPU, read or send lag)."""

_READ_LAG = (
    "read_lag_s",
    "client_read_lag_seconds",
    "How long before a read's kernel stamp its oldest reply bytes may have arrived (a bound of how far "
    "the times it gave are off; 0 for a read of one event), every stamped read",
)
_KEY_LABELS = ("endpoint", "model")
_TOKEN_SOURCES = (TokenSource.SERVER, TokenSource.LOGPROBS, TokenSource.TOKENIZER, TokenSource.CHUNKS)


_USAGE_CHECK_FIELDS = (
    ("usage_incremental", "usage_incremental_requests"),
    ("usage_not_growing", "usage_not_growing_requests"),
    ("usage_below_events", "usage_below_events_requests"),
    ("hidden_reasoning", "hidden_reasoning_requests"),
    ("reasoning_unexplained", "reasoning_unexplained_requests"),
    ("reasoning_apart", "reasoning_apart_requests"),
    ("usage_above_text", "usage_above_text_requests"),
    ("cached_above_prompt", "cached_above_prompt_requests"),
    ("usage_detail_unreadable", "usage_detail_unreadable_requests"),
)


def _usage_detail_counters(stats: LLMStats) -> Iterator[Metric]:
    """Reasoning, hidden reasoning and cached prompt tokens, and the usage checks, per (endpoint, model)."""
    families = [
        (
            CounterMetricFamily(f"llmload_{name}", doc, labels=_KEY_LABELS),
            attribute,
        )
        for name, doc, attribute in (
            ("reasoning_tokens", "Reasoning tokens of successes per the server's usage", "reasoning_tokens_sum"),
            (
                "hidden_reasoning_tokens",
                "Reasoning tokens counted in usage but never streamed",
                "hidden_reasoning_tokens_sum",
            ),
            (
                "reasoning_apart_tokens",
                "Reasoning tokens counted apart from completion_tokens (more than them)",
                "reasoning_apart_tokens_sum",
            ),
            (
                "cached_prompt_tokens",
                "Prompt tokens served from the server's prefix cache, per its usage",
                "cached_prompt_tokens_sum",
            ),
        )
    ]
    checks = CounterMetricFamily(
        "llmload_usage_checks",
        "Successful requests whose usage needed a check, by check",
        labels=(*_KEY_LABELS, "check"),
    )
    for key, s in stats.items():
        for family, attribute in families:
            family.add_metric(key, getattr(s, attribute))
        for check, attribute in _USAGE_CHECK_FIELDS:
            checks.add_metric((*key, check), getattr(s, attribute))
    yield from (family for family, _ in families)
    yield checks


def histogram_buckets(
    hist: LatencyHistogram, edges: tuple[tuple[str, ...], tuple[int, ...]] = _LATENCY_EDGES
) -> list[tuple[str, float]]:
    """Return the cumulative ``(le, count)`` pairs exported for ``hist``, ending with ``+Inf``.

    Each count is exact: the number of values ``<= le`` (see the module docstring).
    ``edges`` are (labels, bucket indexes): ``BUCKET_EDGES_S`` by default.
    """
    edge_labels, edge_indexes = edges
    bins = hist.buckets()
    n_bins = len(bins)
    i = 0
    cumulative = hist.zero_count
    out: list[tuple[str, float]] = []
    append = out.append
    for label, edge_index in zip(edge_labels, edge_indexes, strict=True):
        while i < n_bins and bins[i][0] <= edge_index:
            cumulative += bins[i][1]
            i += 1
        append((label, cumulative))
    append(("+Inf", hist.count))
    return out


def _no_pause() -> None:
    """No pause between families (a process without an event loop to yield to)."""


class LLMLoadCollector:
    """prometheus_client Collector: turns a ``RunView`` into llmload's metric families."""

    def __init__(self, snapshot: Callable[[], RunView], *, pause: Callable[[], None] | None = None) -> None:
        """Create a collector that calls ``snapshot`` once per scrape.

        ``pause`` is called before each histogram family and each window
        family is built (the master passes a yield to its event loop, so one
        scrape never holds the loop for more than one family's formatting);
        None: no pause. The families come from the one ``RunView`` either way.
        """
        self._snapshot = snapshot
        self._pause = pause or _no_pause

    def collect(self) -> Iterator[Metric]:
        """Yield every family (see the module docstring) from one fresh ``RunView``."""
        view = self._snapshot()
        yield InfoMetricFamily(
            "llmload_run",
            "The current llmload run",
            value={
                "run_id": view.run_id,
                "host": public_url(view.host),
                "model": view.model,
                "version": view.version,
            },
        )
        yield GaugeMetricFamily("llmload_users", "Simulated users running now", value=view.users)
        yield GaugeMetricFamily(
            "llmload_in_flight_requests", "Requests sent and not yet finished", value=view.in_flight_requests
        )
        yield GaugeMetricFamily("llmload_workers", "Connected Locust workers (0: single process)", value=view.workers)
        yield GaugeMetricFamily(
            "llmload_client_saturated",
            _SATURATED_HELP,
            value=1.0 if view.client_saturated else 0.0,
        )
        yield GaugeMetricFamily(
            "llmload_lost_workers",
            "Workers lost mid-run (their unreported requests are missing)",
            value=view.lost_workers,
        )
        if view.started_at_unix is not None:
            yield GaugeMetricFamily(
                "llmload_run_start_time_seconds", "Unix time the run started", value=view.started_at_unix
            )
        yield from self._counters(view.stats)
        yield from self._histograms(view.stats, self._pause)
        if view.window is not None:
            yield from self._window(view.window, self._pause)

    @staticmethod
    def _counters(stats: LLMStats) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "llmload_requests",
            "Requests by outcome (cancelled: in flight at stop)",
            labels=(*_KEY_LABELS, "outcome"),
        )
        errors = CounterMetricFamily(
            "llmload_request_errors", "Failed requests by error type", labels=(*_KEY_LABELS, "error_type")
        )
        prompt = CounterMetricFamily(
            "llmload_prompt_tokens", "Prompt tokens of successful requests", labels=_KEY_LABELS
        )
        completion = CounterMetricFamily(
            "llmload_completion_tokens",
            "Completion tokens of successful requests, by count source",
            labels=(*_KEY_LABELS, "source"),
        )
        for (endpoint, model), s in stats.items():
            by_outcome = s.requests_by_outcome
            for outcome in Outcome:
                requests.add_metric((endpoint, model, outcome.value), by_outcome.get(outcome, 0))
            by_type: dict[str, int] = {}
            for category, group in s.errors.items():
                label = category[:MAX_LABEL_CHARS]
                by_type[label] = by_type.get(label, 0) + group.count
            for label, count in sorted(by_type.items()):
                errors.add_metric((endpoint, model, label), count)
            prompt.add_metric((endpoint, model), s.prompt_tokens_sum)
            if endpoint in _NO_OUTPUT_ENDPOINTS:
                continue  # embeddings generate nothing: no completion series (absent, not 0)
            by_source = s.completion_tokens_by_source
            for source in _TOKEN_SOURCES:
                completion.add_metric((endpoint, model, source.value), by_source.get(source, 0))
        yield from (requests, errors, prompt, completion)
        yield from _usage_detail_counters(stats)

    @staticmethod
    def _histograms(stats: LLMStats, pause: Callable[[], None]) -> Iterator[Metric]:
        items = list(stats.items())
        for attribute, suffix, doc in _HISTOGRAMS:
            pause()
            family = HistogramMetricFamily(f"llmload_{suffix}", doc, labels=_KEY_LABELS)
            for key, s in items:
                if attribute in _TOKEN_TIMES and key[0] in _NO_OUTPUT_ENDPOINTS:
                    continue  # no token of an embeddings reply is timed: no series, not an empty one
                hist: LatencyHistogram = getattr(s, attribute)
                family.add_metric(key, histogram_buckets(hist), hist.sum_s)
            yield family
        pause()
        lag = HistogramMetricFamily(f"llmload_{_READ_LAG[1]}", _READ_LAG[2], labels=_KEY_LABELS)
        for key, s in items:
            lag.add_metric(key, histogram_buckets(s.read_lag_s, _LAG_EDGES), s.read_lag_s.sum_s)
        yield lag

    @staticmethod
    def _window(window: WindowView, pause: Callable[[], None]) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "llmload_window_length_seconds",
            "Length of the live window of llmload_window_*",
            value=window.length_s,
        )
        for name, doc, rates in (
            ("output_tokens", "Completion tokens of successes", window.output_tokens_per_s),
            ("requests", "Successful requests", window.requests_per_s),
        ):
            family = GaugeMetricFamily(
                f"llmload_window_{name}_per_second", f"{doc} per second over the live window", labels=_KEY_LABELS
            )
            for key, rate in sorted(rates.items()):
                family.add_metric(key, rate)
            yield family
        items = list(window.stats.items())
        for attribute, suffix, doc in (*_HISTOGRAMS, _READ_LAG):
            pause()
            family = GaugeMetricFamily(
                f"llmload_window_{suffix}",
                f"{doc}: quantiles over the live window",
                labels=(*_KEY_LABELS, "quantile"),
            )
            for (endpoint, model), s in items:
                hist = getattr(s, attribute)
                for label, value in zip(_QUANTILE_LABELS, hist.quantiles(WINDOW_QUANTILES), strict=True):
                    if value is not None:
                        family.add_metric((endpoint, model, label), value)
            yield family
