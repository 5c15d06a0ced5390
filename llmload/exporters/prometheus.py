"""Prometheus exporter for the master (or the single process): a Collector over the merged statistics.

``LLMLoadCollector`` reads a ``RunView`` (the master's merged ``LLMStats``, the
live window and a few runner gauges) at scrape time; nothing is copied or
precomputed between scrapes. ``PrometheusExporter`` registers it in its own
``CollectorRegistry`` (never the global one) and serves ``GET /metrics``.
Workers run no exporter: their statistics reach the master as deltas.

Metric families (prefix ``llmload_``, base units; ``endpoint`` is ``chat`` or
``completions``, ``model`` the served model name). Counters and histograms
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
  of successes by count source (``server``, ``client-tokenized``,
  ``chunk-count``); the sum over sources is ``tokens.completion``.
- histograms ``llmload_time_to_first_token_seconds``,
  ``llmload_inter_token_latency_seconds``,
  ``llmload_time_per_output_token_seconds``,
  ``llmload_request_duration_seconds`` (E2E) ``{endpoint,model}`` over
  successes (names follow vLLM's server-side metrics), and
  ``llmload_client_read_lag_seconds`` over every kernel-stamped read of
  finished requests (the client's own delay, see ``llmload.transport``).
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
``llmload.histogram``'s log buckets, ``GAMMA**k`` for even ``k`` from -346 to
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

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

from llmload.credentials import public_url
from llmload.errors import ConfigError
from llmload.exporters.window import WindowView
from llmload.histogram import GAMMA, LatencyHistogram
from llmload.record import Outcome, TokenSource
from llmload.stats import LLMStats

__all__ = [
    "BUCKET_EDGES_S",
    "LAG_BUCKET_EDGES_S",
    "MAX_LABEL_CHARS",
    "WINDOW_QUANTILES",
    "LLMLoadCollector",
    "PrometheusExporter",
    "RunView",
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

WINDOW_QUANTILES = (0.5, 0.9, 0.99)
"""Quantiles exported by the window gauges."""
_QUANTILE_LABELS = tuple(str(q) for q in WINDOW_QUANTILES)

MAX_LABEL_CHARS = 100
"""Longest ``error_type`` label value; longer categories are truncated (and merged if they collide)."""

_HISTOGRAMS = (
    ("ttft_s", "time_to_first_token_seconds", "Time from send to the first generated token (TTFT), successes"),
    ("itl_s", "inter_token_latency_seconds", "Gaps between consecutive tokens, TTFT excluded (ITL), successes"),
    ("tpot_s", "time_per_output_token_seconds", "(last token - first token) / (completion tokens - 1), successes"),
    ("e2e_s", "request_duration_seconds", "Time from send to the end of the reply (E2E), successes"),
)
_READ_LAG = (
    "read_lag_s",
    "client_read_lag_seconds",
    "How long reply bytes waited in the kernel before the client read them (client delay), every read",
)
_KEY_LABELS = ("endpoint", "model")
_TOKEN_SOURCES = (TokenSource.SERVER, TokenSource.TOKENIZER, TokenSource.CHUNKS)
_METRICS_PATH = "/metrics"
_REQUEST_TIMEOUT_S = 10.0  # a scraper that stalls mid-request cannot pin a handler forever
_POLL_INTERVAL_S = 0.1  # how fast stop() is noticed by the serving loop


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


@dataclass(frozen=True, slots=True)
class RunView:
    """Everything one scrape reports, read from the master's state at scrape time.

    Attributes:
        stats: merged statistics of the current (or last) run; read, never modified.
        window: the live window, or None when there is none (no window gauges).
        users: simulated users running now, over all workers.
        in_flight_requests: requests sent and not finished, over all workers
            (workers' counts are as of their latest report).
        workers: connected workers (0 for a single process).
        run_id: identifier of the current run ("" before the first run).
        host: target base URL.
        model: served model name ("" before it is known).
        version: llmload version.
        started_at_unix: wall-clock start of the run; None before the first run.
        client_saturated: a load-generating process ran above 90% CPU for 5 s or more (BC-25).
        lost_workers: workers lost mid-run.
    """

    stats: LLMStats
    window: WindowView | None
    users: int
    in_flight_requests: int
    workers: int
    run_id: str
    host: str
    model: str
    version: str
    client_saturated: bool = False
    lost_workers: int = 0
    started_at_unix: float | None = None


class LLMLoadCollector:
    """prometheus_client Collector: turns a ``RunView`` into llmload's metric families."""

    def __init__(self, snapshot: Callable[[], RunView]) -> None:
        """Create a collector that calls ``snapshot`` once per scrape."""
        self._snapshot = snapshot

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
            "1 when a load-generating process ran above 90% CPU for 5 s or more: latencies are the client's",
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
        yield from self._histograms(view.stats)
        if view.window is not None:
            yield from self._window(view.window)

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
            by_source = s.completion_tokens_by_source
            for source in _TOKEN_SOURCES:
                completion.add_metric((endpoint, model, source.value), by_source.get(source, 0))
        yield from (requests, errors, prompt, completion)

    @staticmethod
    def _histograms(stats: LLMStats) -> Iterator[Metric]:
        items = list(stats.items())
        for attribute, suffix, doc in _HISTOGRAMS:
            family = HistogramMetricFamily(f"llmload_{suffix}", doc, labels=_KEY_LABELS)
            for key, s in items:
                hist: LatencyHistogram = getattr(s, attribute)
                family.add_metric(key, histogram_buckets(hist), hist.sum_s)
            yield family
        lag = HistogramMetricFamily(f"llmload_{_READ_LAG[1]}", _READ_LAG[2], labels=_KEY_LABELS)
        for key, s in items:
            lag.add_metric(key, histogram_buckets(s.read_lag_s, _LAG_EDGES), s.read_lag_s.sum_s)
        yield lag

    @staticmethod
    def _window(window: WindowView) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "llmload_window_length_seconds",
            "Length of the live window of llmload_window_*",
            value=window.length_s,
        )
        tokens = GaugeMetricFamily(
            "llmload_window_output_tokens_per_second",
            "Completion tokens of successes per second over the live window",
            labels=_KEY_LABELS,
        )
        for key, rate in sorted(window.output_tokens_per_s.items()):
            tokens.add_metric(key, rate)
        requests = GaugeMetricFamily(
            "llmload_window_requests_per_second",
            "Successful requests per second over the live window",
            labels=_KEY_LABELS,
        )
        for key, rate in sorted(window.requests_per_s.items()):
            requests.add_metric(key, rate)
        yield tokens
        yield requests
        items = list(window.stats.items())
        for attribute, suffix, doc in (*_HISTOGRAMS, _READ_LAG):
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


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread (a greenlet under Locust's monkey-patching) per request."""

    daemon_threads = True
    allow_reuse_address = True  # rebinding right after a previous run; a live listener still conflicts


class _QuietHandler(WSGIRequestHandler):
    """Request handler that does not log every scrape to stderr."""

    timeout = _REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class _ScrapeBody:
    """WSGI response body that reports when the server has written all of it."""

    def __init__(self, chunks: Iterable[bytes], on_close: Callable[[], None]) -> None:
        self._chunks = chunks
        self._on_close = on_close

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._chunks)

    def close(self) -> None:
        self._on_close()


class PrometheusExporter:
    """Serves ``GET /metrics`` from an ``LLMLoadCollector`` in its own registry.

    Also tracks scrapes, so the run can wait for one scrape of its final
    totals (``mark_final`` / ``wait_for_final_scrape``) before the process exits.
    """

    def __init__(
        self,
        snapshot: Callable[[], RunView],
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Register a collector over ``snapshot`` in ``registry``.

        Args:
            snapshot: called once per scrape; returns the current ``RunView``.
            registry: where the collector is registered; None = a new private
                registry (never prometheus_client's global one).
            clock: monotonic clock in seconds (injected by tests).
        """
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.registry.register(LLMLoadCollector(snapshot))
        self._metrics_app = make_wsgi_app(self.registry)
        self._clock = clock
        self._cond = threading.Condition()
        self._scrapes = 0
        self._final_at_s: float | None = None
        self._last_scrape_start_s = float("-inf")  # start of the latest scrape fully written
        self._server: _ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    # ── serving ─────────────────────────────────────────────────────────
    def start(self, port: int, host: str = "") -> int:
        """Listen on ``host:port`` (``""``: all interfaces; port 0: any free port) and serve in a thread.

        Returns:
            The port actually bound.

        Raises:
            ConfigError: the address cannot be bound (port in use, no permission,
                unknown host), with the fix in the message.
        """
        if self._server is not None:
            raise RuntimeError("the Prometheus exporter is already serving; call stop() first")
        try:
            server = make_server(
                host, port, self.wsgi_app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
            )
        except OSError as exc:
            where = f"{host or '0.0.0.0'}:{port}"
            raise ConfigError(
                f"cannot serve Prometheus metrics on {where}: {exc.strerror or exc}. "
                "Another llmload run or exporter may hold the port: pass --prometheus-port with a free "
                "port, or --prometheus-port 0 to disable the exporter."
            ) from exc
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(_POLL_INTERVAL_S,), name="llmload-prometheus", daemon=True
        )
        self._thread.start()
        return int(server.server_address[1])

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=_REQUEST_TIMEOUT_S)
            self._thread = None

    def wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """WSGI application: metrics at ``/metrics`` (text format 0.0.4, gzip if asked), 404 elsewhere."""
        if environ.get("PATH_INFO") != _METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"llmload serves Prometheus metrics at /metrics\n"]
        started_s = self._clock()
        # Always the text format 0.0.4 (Prometheus accepts it): prometheus_client's OpenMetrics
        # writer escapes label values character by character and doubles the scrape's CPU time.
        environ.pop("HTTP_ACCEPT", None)
        body = self._metrics_app(environ, start_response)
        return _ScrapeBody(body, lambda: self._scrape_done(started_s))

    # ── final flush ─────────────────────────────────────────────────────
    @property
    def scrapes(self) -> int:
        """Number of ``/metrics`` responses written in full since creation."""
        return self._scrapes

    def mark_running(self) -> None:
        """A run started: the statistics are live again."""
        with self._cond:
            self._final_at_s = None

    def mark_final(self) -> None:
        """The run ended: from now on scrapes report its final totals."""
        with self._cond:
            self._final_at_s = self._clock()

    def wait_for_final_scrape(self, timeout_s: float) -> bool:
        """Wait until a scrape that began after ``mark_final`` has been written in full.

        Calls ``mark_final`` first if it was not called. Returns at once when
        nothing has scraped this exporter yet: no scraper is configured, so
        there is no one to wait for.

        Returns:
            True when such a scrape was served; False when none has ever
            scraped or ``timeout_s`` seconds passed first.
        """
        with self._cond:
            if self._final_at_s is None:
                self._final_at_s = self._clock()
            final_at_s = self._final_at_s
            if self._scrapes == 0:
                return False
            deadline_s = self._clock() + timeout_s
            while self._last_scrape_start_s < final_at_s:
                remaining_s = deadline_s - self._clock()
                if remaining_s <= 0:
                    return False
                self._cond.wait(remaining_s)
            return True

    def _scrape_done(self, started_s: float) -> None:
        with self._cond:
            self._scrapes += 1
            self._last_scrape_start_s = max(self._last_scrape_start_s, started_s)
            self._cond.notify_all()
