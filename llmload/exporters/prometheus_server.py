"""The HTTP side of the Prometheus exporter: ``GET /metrics`` and the wait for a scrape of the final totals.

``PrometheusExporter`` registers an ``LLMLoadCollector`` (``llmload.exporters.prometheus``)
in its own ``CollectorRegistry`` (never the global one), serves it from a
thread, and counts the scrapes it has written in full, so the run can keep
serving until one scrape has read its final totals (``mark_final`` /
``wait_for_final_scrape``) before the process exits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from llmload.errors import ConfigError
from llmload.exporters.prometheus import LLMLoadCollector
from llmload.exporters.window import RunView

__all__ = ["PrometheusExporter"]

_METRICS_PATH = "/metrics"
_REQUEST_TIMEOUT_S = 10.0  # a scraper that stalls mid-request cannot pin a handler forever
_POLL_INTERVAL_S = 0.1  # how fast stop() is noticed by the serving loop
_OVERDUE_FACTOR = 2.0  # a scraper is gone when its next scrape is this many intervals late
_OVERDUE_SLACK_S = 1.0  # plus this (jitter of Prometheus's scrape offsets, a slow scrape)


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
        pause: Callable[[], None] | None = None,
    ) -> None:
        """Register a collector over ``snapshot`` in ``registry``.

        Args:
            snapshot: called once per scrape; returns the current ``RunView``.
            registry: where the collector is registered; None = a new private
                registry (never prometheus_client's global one).
            clock: monotonic clock in seconds (injected by tests).
            pause: called between the scrape's large families (``LLMLoadCollector``); None: none.
        """
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.registry.register(LLMLoadCollector(snapshot, pause=pause))
        self._metrics_app = make_wsgi_app(self.registry)
        self._clock = clock
        self._cond = threading.Condition()
        self._scrapes = 0
        self._final_at_s: float | None = None
        self._last_scrape_start_s = float("-inf")  # start of the latest scrape fully written
        self._previous_scrape_start_s = float("-inf")  # start of the one before it
        self._server: _ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    # ── serving ─────────────────────────────────────────────────────────
    def start(self, port: int, host: str = "127.0.0.1") -> int:
        """Listen on ``host:port`` (``""`` or ``0.0.0.0``: all interfaces; port 0: any free port) and serve in a thread.

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

    def final_scrape_wait_s(self, grace_s: float) -> float:
        """How long it is worth waiting for a scrape of the final totals (at most ``grace_s``); 0 = not at all.

        Only a scraper that scrapes regularly is waited for: two scrapes give
        its interval, and the wait ends when the next one would be overdue
        (twice the interval after the last scrape, plus a second). No scrape, a
        single one (a stray ``curl``) or an overdue scraper: 0, and the run
        ends at once. A Prometheus whose interval is longer than the run has
        scraped at most once, so it misses the final totals (README).
        """
        with self._cond:
            if self._scrapes < 2 or grace_s <= 0:
                return 0.0
            interval_s = self._last_scrape_start_s - self._previous_scrape_start_s
            due_by_s = self._last_scrape_start_s + _OVERDUE_FACTOR * interval_s + _OVERDUE_SLACK_S
            return max(0.0, min(grace_s, due_by_s - self._clock()))

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
            if started_s > self._last_scrape_start_s:
                self._previous_scrape_start_s, self._last_scrape_start_s = self._last_scrape_start_s, started_s
            else:  # two scrapes overlapped and the later one finished first
                self._previous_scrape_start_s = max(self._previous_scrape_start_s, started_s)
            self._cond.notify_all()
