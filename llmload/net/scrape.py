"""Scrape inference-server ``/metrics`` endpoints during a run (the master or the single process; never workers).

Each endpoint is read before the load starts, at the end of every time-series
interval while it runs (its own gevent greenlet; each read bounded by a quarter
of the interval, at most ``SCRAPE_TIMEOUT_S``) and once after it ends (bounded
by ``SCRAPE_TIMEOUT_S``). A slow or failing endpoint costs at most that at the
start and at the end, never delays the time series' ticks or the load, never
fails the run, and is reported (``server.endpoints[]``, the intervals'
``server_scrape_failures``).
Each URL goes the way the load would go to it (``llmload.settings.proxies.route``: the
proxy variables, ``NO_PROXY`` and ``--ignore-proxy-env``), never by urllib's
own reading of the environment. Parsing and mapping are
``llmload.servermetrics`` (pure); this module only does the I/O and the timing.
"""

from __future__ import annotations

import base64
import logging
import math
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import gevent
import gevent.event
import gevent.lock

from llmload.errors import ConfigError, ServerMetricsError
from llmload.servermetrics import (
    Endpoint,
    Reading,
    ServerIntervals,
    ServerRun,
    ServerSnapshot,
    parse_snapshot,
    summarise,
)
from llmload.settings.credentials import public_url
from llmload.settings.proxies import ProxyChoice, route

__all__ = [
    "PERIODIC_TIMEOUT_SHARE",
    "SCRAPE_INTERVAL_S",
    "SCRAPE_TIMEOUT_S",
    "Fetch",
    "IntervalSink",
    "ServerScraper",
    "fetch_failure",
    "fetch_text",
    "metrics_urls",
    "routed_fetch",
]

log = logging.getLogger(__name__)

SCRAPE_INTERVAL_S = 10.0
PARSE_SLICE_S = 0.002  # longest stretch a page's parsing holds the event loop
_TURN_S = 1e-4  # the parse's pause: one turn of the loop (its timers and sockets), then on
"""Default seconds between scrapes while the load runs (the run passes ``--timeseries-interval``)."""
SCRAPE_TIMEOUT_S = 2.0
"""Longest wait for one scrape (connect + whole answer) before and after the load."""
PERIODIC_TIMEOUT_SHARE = 0.25
"""A periodic scrape waits at most this share of the interval (and at most ``SCRAPE_TIMEOUT_S``)."""
_MAX_BODY_BYTES = 32 << 20

Fetch = Callable[[str, Mapping[str, str], float], str]
"""``(url, headers, timeout_s) → body text``; raises ``OSError``, ``gevent.Timeout`` or ``ServerMetricsError``."""
IntervalSink = Callable[[int, dict[str, float | int | None]], None]
"""``(interval index, server columns)``: where each interval's server columns go (the timeline)."""


def metrics_urls(host: str, setting: str) -> tuple[str | None, tuple[str, ...]]:
    """The target's ``/metrics`` URL (``auto``) and the extra URLs of ``--server-metrics``.

    Args:
        host: the target (``-H``), credentials allowed (they are removed here).
        setting: ``auto``, ``off``, or comma-separated URLs, optionally with
            ``auto`` among them (``auto,http://dcgm:9400/metrics``).

    Returns:
        ``(auto_url or None, extra_urls)``.
    """
    parts = [p.strip() for p in setting.split(",") if p.strip()]
    if not parts or parts == ["off"]:
        return None, ()
    auto = None
    if "auto" in parts and host:
        split = urlsplit(public_url(host))
        auto = urlunsplit((split.scheme, split.netloc, "/metrics", "", ""))
    return auto, tuple(p for p in parts if p not in ("auto", "off"))


def fetch_text(
    url: str, headers: Mapping[str, str], timeout_s: float, *, insecure: bool = False, proxy: ProxyChoice | None = None
) -> str:
    """GET ``url`` and return its body, the whole exchange bounded by ``timeout_s``.

    Args:
        url: the ``/metrics`` URL.
        headers: extra request headers.
        timeout_s: bound of the whole exchange (s).
        insecure: do not verify an https certificate.
        proxy: the forward proxy to go through (absolute form for http, ``CONNECT``
            for https, ``Proxy-Authorization`` from its credentials), or None to
            connect directly; the environment's proxy variables are not read here.

    Raises:
        OSError: connection failure or a non-2xx status (``urllib.error.HTTPError``).
        gevent.Timeout: the answer took longer than ``timeout_s``.
        ServerMetricsError: the body is larger than 32 MiB.
    """
    request = urllib.request.Request(url, headers={"Accept": "text/plain", **headers})
    proxies: dict[str, str] = {}
    if proxy is not None:
        host = f"[{proxy.host}]" if ":" in proxy.host else proxy.host
        proxies[request.type] = f"http://{host}:{proxy.port}"
        if proxy.user is not None or proxy.password is not None:
            # urllib moves it into the CONNECT of an https tunnel; not kept on a redirect to elsewhere
            token = base64.b64encode(f"{proxy.user or ''}:{proxy.password or ''}".encode()).decode("ascii")
            request.add_unredirected_header("Proxy-Authorization", f"Basic {token}")
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler(proxies)]
    if insecure:
        handlers.append(urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))
    opener = urllib.request.build_opener(*handlers)
    with gevent.Timeout(timeout_s), opener.open(request, timeout=timeout_s) as response:
        body = response.read(_MAX_BODY_BYTES + 1)
    if len(body) > _MAX_BODY_BYTES:
        raise ServerMetricsError(f"{url} answered more than {_MAX_BODY_BYTES >> 20} MiB; not a /metrics page")
    return str(body.decode("utf-8", errors="replace"))


def fetch_failure(url: str, exc: OSError) -> str:
    """One sentence for a scrape of ``url`` that failed with ``exc`` (no ``<urlopen error …>`` wrapper)."""
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return f"connection refused at {url}: is the server's metrics port right?"
    if isinstance(reason, socket.gaierror):
        return f"the host of {url} does not resolve ({reason.strerror or reason}): is the URL right?"
    if isinstance(reason, OSError) and reason.strerror:
        return f"{url}: {reason.strerror}"
    return f"{url}: {reason}" if str(reason) else f"{url}: {type(reason).__name__}"


def _connect_failure(reason: OSError) -> str:
    """``connection refused`` / ``name does not resolve: …`` for a connect failure."""
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return f"name does not resolve: {reason.strerror or reason}"


def routed_fetch(urls: tuple[str, ...], proxies: Mapping[str, str], *, ignore: bool, insecure: bool) -> Fetch:
    """A ``Fetch`` that reads each of ``urls`` the way ``llmload.settings.proxies.route`` decides for it.

    Args:
        urls: every URL the scraper will read (decided once, here).
        proxies: the environment's proxy settings (``urllib.request.getproxies_environment()``).
        ignore: ``--ignore-proxy-env``: connect directly whatever the variables say.
        insecure: do not verify https certificates.

    A proxy variable that cannot be used for a URL (``ConfigError``) makes that
    URL's every scrape fail with the message (reported, never fatal); a URL
    sent through a proxy is logged once, without the proxy's credentials.
    """
    choices: dict[str, ProxyChoice | None] = {}
    refused: dict[str, str] = {}
    for url in urls:
        try:
            choices[url] = route(url, proxies, ignore=ignore).proxy
        except ConfigError as exc:
            refused[url] = str(exc)
            continue
        proxy = choices[url]
        if proxy is not None:
            note = f"server metrics from {public_url(url)} go through the proxy {proxy.public} (from {proxy.variable})"
            log.info("llmload: %s", note)

    def fetch(url: str, headers: Mapping[str, str], timeout_s: float) -> str:
        if url in refused:
            raise ServerMetricsError(refused[url])
        proxy = choices.get(url)
        try:
            return fetch_text(url, headers, timeout_s, insecure=insecure, proxy=proxy)
        except OSError as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if proxy is None or not isinstance(reason, ConnectionRefusedError | socket.gaierror):
                raise
            # the connection goes to the proxy: its refusal or unknown name is the proxy's, not the server's
            raise ServerMetricsError(
                f"the proxy {proxy.public} (from {proxy.variable}) for {public_url(url)} is not reachable "
                f"({_connect_failure(reason)}); start it or fix {proxy.variable}, add the host to NO_PROXY, "
                "or pass --ignore-proxy-env"
            ) from exc

    return fetch


@dataclass(frozen=True, slots=True)
class _Answer:
    """One endpoint's answer to a scrape: its page (None when it failed: ``error``), when asked and when it came."""

    url: str
    text: str | None
    began_s: float
    ended_s: float
    error: str | None


class _Yield:
    """``parse_snapshot``'s pause: lets the event loop run once ``slice_s`` of parsing has passed since the last turn.

    Parsing a whole page in one go would leave every socket unread and every due
    send waiting for its tens of milliseconds, once per interval (seen as a
    dispatch delay and a late TTFT at each interval's end).
    """

    __slots__ = ("_last_s", "_slice_s")

    def __init__(self, slice_s: float) -> None:
        self._slice_s = slice_s
        self._last_s = time.perf_counter()

    def __call__(self) -> None:
        now_s = time.perf_counter()
        if now_s - self._last_s >= self._slice_s:
            gevent.sleep(_TURN_S)  # a timer, not sleep(0): sleep(0) resumes before the loop polls sockets or timers
            self._last_s = time.perf_counter()


class ServerScraper:
    """Scrapes one run's endpoints: ``start()`` before the load, at each interval's end, ``finish()`` after it.

    The periodic reads run in their own greenlet, at each end of a time-series
    interval (``origin_s + k * interval_s``), each bounded by
    ``periodic_timeout_s`` (a quarter of the interval, at most ``timeout_s``):
    a slow endpoint never delays the timeline's ticks or the load, and a read
    that fails is counted (``failed_scrapes``, ``server_scrape_failures``),
    never raised. Each round becomes that interval's server columns
    (``llmload.servermetrics.ServerIntervals``), handed to the ``follow`` sink.

    Args:
        auto_url: the target's own ``/metrics`` (kept only if it answers Prometheus text at the start).
        extra_urls: further endpoints (a DCGM exporter, a router); kept even when they fail.
        model: served model name, to pick series labelled ``model_name``.
        headers: sent to ``auto_url`` only (the target's credentials), never to extra URLs.
        fetch: the HTTP read (tests pass a fake).
        interval_s: seconds between periodic reads (the time-series interval).
        timeout_s: bound of the reads before and after the load.
        origin_s: ``clock()`` at the run's start (intervals count from it); None: when ``start`` is called.
        clock: monotonic seconds (``time.perf_counter``).
    """

    def __init__(
        self,
        auto_url: str | None,
        extra_urls: tuple[str, ...],
        *,
        model: str | None,
        headers: Mapping[str, str] | None = None,
        fetch: Fetch = fetch_text,
        interval_s: float = SCRAPE_INTERVAL_S,
        timeout_s: float = SCRAPE_TIMEOUT_S,
        origin_s: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._auto_url = auto_url
        self._endpoints = [Endpoint(url=u) for u in ((auto_url,) if auto_url else ()) + extra_urls]
        self._model = model
        self._headers = dict(headers or {})
        self._fetch = fetch
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self.periodic_timeout_s = min(timeout_s, interval_s * PERIODIC_TIMEOUT_SHARE)
        """Bound of each periodic read (s)."""
        self._origin_s = origin_s
        self._clock = clock
        self._greenlet: gevent.Greenlet[[], None] | None = None
        self._round_under_way = gevent.event.Event()
        self._round_index: int | None = None
        # one round at a time: a RESET's read never interleaves a periodic one
        self._reads = gevent.lock.BoundedSemaphore()
        self._round_ended = gevent.event.Event()
        self._sink: IntervalSink | None = None
        self.intervals = ServerIntervals()
        """The server columns per interval index."""
        self.notes: list[str] = []
        """What happened to endpoints that were dropped (e.g. no ``/metrics`` on the target)."""
        self.reset: dict[str, float | int] | None = None
        """The last RESET's window (``note_reset``), the results' ``server.reset``; None without a RESET."""

    @property
    def active(self) -> bool:
        """Whether any endpoint is still scraped."""
        return bool(self._endpoints)

    def reading(self, index: int) -> bool:
        """Whether interval ``index``'s columns may still come: its periodic round, or an earlier one, is under way.

        A round that runs long (a big page parsed on a busy process) delays the next
        interval's round; that interval is read next (or skipped when its time has passed).
        """
        under_way = self._round_index
        return under_way is not None and under_way <= index and self._round_under_way.is_set()

    def warnings(self) -> list[str]:
        """One line per URL given to ``--server-metrics`` (not ``auto``) that never answered Prometheus text."""
        return [
            f"--server-metrics {e.url} never answered with Prometheus text ({e.failed_scrapes} scrape(s) failed, "
            f"last: {e.error}); no server metrics from it: check the URL is a /metrics page the master can reach"
            for e in self._endpoints
            if e.url != self._auto_url and e.run.snapshots == 0 and e.failed_scrapes
        ]

    def follow(self, sink: IntervalSink | None, origin_s: float | None = None) -> None:
        """Hand each interval's server columns to ``sink(index, columns)`` as they are read (None: stop).

        Args:
            sink: where the columns go.
            origin_s: ``clock()`` at the run's start, when it differs from the
                constructor's: the periodic reads are aligned to it from now on.
        """
        self._sink = sink
        if origin_s is None or origin_s == self._origin_s:
            return
        self._origin_s = origin_s
        if self._greenlet is not None and not self._round_under_way.is_set():
            self._greenlet.kill(block=False)
            self._greenlet = gevent.spawn(self._run_periodically)

    def start(self) -> None:
        """Read every endpoint once (concurrently, bounded) and start the periodic greenlet."""
        if self._origin_s is None:
            self._origin_s = self._clock()
        readings = self._scrape_all(self._timeout_s)
        for endpoint, reading in zip(list(self._endpoints), readings, strict=True):
            endpoint.start_ok = reading.snapshot is not None
            if endpoint.url == self._auto_url and not endpoint.start_ok:
                note = f"no Prometheus metrics at {endpoint.url} ({endpoint.error}); server metrics off for it"
                self.notes.append(note)
                log.info("llmload: %s", note)
                self._endpoints.remove(endpoint)
        self.intervals.baseline(readings)
        if self._endpoints:
            self._greenlet = gevent.spawn(self._run_periodically)

    def restart(self) -> None:
        """RESET: the server's figures count from now, like the client's.

        Every endpoint is read once more (bounded by ``timeout_s``, like the read
        before the load); that read is the new baseline of the run's deltas,
        gauges and histograms and of the next interval's columns. The interval
        columns read so far are dropped (the client's time series restarts at a
        RESET too). A periodic round under way ends first: a page answered
        before the RESET never becomes the new baseline.
        """
        with self._reads:
            for endpoint in self._endpoints:
                endpoint.run = ServerRun()
                endpoint.failed_scrapes = 0
                endpoint.error = None
            readings = self._scrape_all(self._timeout_s)
            for endpoint, reading in zip(self._endpoints, readings, strict=True):
                endpoint.start_ok = reading.snapshot is not None
            self.intervals = ServerIntervals()
            self.intervals.baseline(readings)

    def note_reset(self, baseline_after_s: float, client_succeeded: int) -> None:
        """Record how far the server's new baseline came after a RESET cleared the client's figures.

        The baseline read waits on the network, so requests that finish on the
        client between the RESET and the read's answer count on the client
        only: the cross-check's token difference and a client − server request
        difference up to ``client_succeeded`` come from that window, not from
        the server.

        Args:
            baseline_after_s: seconds from the RESET to the baseline read's answer.
            client_succeeded: successful requests the client had counted since
                the RESET when the answer came (a master: as far as its workers
                had reported then).
        """
        self.reset = {"baseline_after_s": baseline_after_s, "client_succeeded_before_baseline": client_succeeded}

    def finish(self, final_index: int | None = None) -> dict[str, object] | None:
        """Stop the periodic scrapes, read every endpoint once more, and return the ``server`` section.

        Args:
            final_index: the run's last interval, which the last read's deltas
                are added to; None: when the read is taken.

        None when no endpoint ever answered (or none was configured).
        """
        if self._greenlet is not None:
            if self._round_under_way.is_set():  # a periodic round ends within its bound: keep its reads
                self._round_ended.wait(self._round_bound_s(self.periodic_timeout_s))
            self._greenlet.kill(block=True, timeout=self._timeout_s)
            self._greenlet = None
        if not self._endpoints:
            return None
        index = self._current_index() if final_index is None else final_index
        with self._reads:  # after a RESET's read under way
            readings = self._scrape_all(self._timeout_s)
            for endpoint, reading in zip(self._endpoints, readings, strict=True):
                endpoint.end_ok = reading.snapshot is not None
            self._emit(index, readings)
        section = summarise(self._endpoints)
        if section is not None:
            notes = section.get("notes")
            section["notes"] = [*self.notes, *(notes if isinstance(notes, list) else [])]
            section["reset"] = self.reset
        for endpoint in self._endpoints:
            if endpoint.failed_scrapes:
                log.warning(
                    "llmload: %d of %d scrapes of %s failed (last: %s)",
                    endpoint.failed_scrapes,
                    endpoint.failed_scrapes + endpoint.run.snapshots,
                    endpoint.url,
                    endpoint.error,
                )
        return section

    def _elapsed_s(self) -> float:
        return self._clock() - (self._origin_s or 0.0)

    def _current_index(self) -> int:
        return max(0, math.floor(self._elapsed_s() / self._interval_s))

    def _run_periodically(self) -> None:
        """Read every endpoint at each interval's end; interval k ends at ``(k + 1) * interval_s``."""
        index = self._current_index()
        while True:
            gevent.sleep(max(0.0, (index + 1) * self._interval_s - self._elapsed_s()))
            with self._reads:
                self._round_ended.clear()
                self._round_index = index
                self._round_under_way.set()
                try:
                    self._emit(index, self._scrape_all(self.periodic_timeout_s, sample_gauges=True))
                finally:
                    self._round_under_way.clear()
                    self._round_index = None
                    self._round_ended.set()
            index = max(index + 1, self._current_index())

    @staticmethod
    def _round_bound_s(timeout_s: float) -> float:
        """Longest a round of reads bounded by ``timeout_s`` takes (its reads run concurrently)."""
        return timeout_s + min(1.0, timeout_s / 2)

    def _emit(self, index: int, readings: list[Reading]) -> None:
        columns = self.intervals.add(index, readings)
        if self._sink is not None:
            self._sink(index, columns)

    def _scrape_all(self, timeout_s: float, *, sample_gauges: bool = False) -> list[Reading]:
        """Read every endpoint concurrently, all answered within about ``timeout_s``; failures are counted.

        The bound is on the answers (the network and the server); each page is parsed after it,
        unbounded, yielding to the event loop as it goes (a slow parse is this process's time, not
        a late endpoint).
        """
        began_s = self._elapsed_s()
        jobs = [gevent.spawn(self._read, e.url, timeout_s) for e in self._endpoints]
        gevent.joinall(jobs, timeout=self._round_bound_s(timeout_s))
        readings: list[Reading] = []
        for endpoint, job in zip(self._endpoints, jobs, strict=True):
            answer = job.value if job.successful() else None
            if not job.ready():
                job.kill(block=False)
                answer = None
            result = self._parsed(answer) if isinstance(answer, _Answer) else None
            if result is not None and result.snapshot is not None:
                endpoint.run.add(result.snapshot, sample_gauges=sample_gauges)
                readings.append(result)
                continue
            endpoint.failed_scrapes += 1
            if result is not None:
                endpoint.error = result.error
                readings.append(result)
            else:
                endpoint.error = "timed out" if job.exception is None else str(job.exception)
                waited_s = self._elapsed_s() - began_s
                readings.append(Reading(endpoint.url, None, began_s + waited_s / 2, waited_s, endpoint.error))
        return readings

    def _read(self, url: str, timeout_s: float) -> _Answer:
        """One endpoint's answer (bounded by ``timeout_s``), not yet parsed; timed at the answer."""
        headers = self._headers if url == self._auto_url else {}
        began_s = self._elapsed_s()
        try:
            text = self._fetch(url, headers, timeout_s)
        except gevent.Timeout:
            return _Answer(url, None, began_s, self._elapsed_s(), f"no answer within {timeout_s:g} s")
        except urllib.error.HTTPError as exc:
            return _Answer(url, None, began_s, self._elapsed_s(), f"HTTP {exc.code}")
        except OSError as exc:
            return _Answer(url, None, began_s, self._elapsed_s(), fetch_failure(url, exc))
        except UnicodeError as exc:
            return _Answer(url, None, began_s, self._elapsed_s(), str(exc) or type(exc).__name__)
        return _Answer(url, text, began_s, self._elapsed_s(), None)

    def _parsed(self, answer: _Answer) -> Reading:
        """The answer's page in the common vocabulary (``parse_snapshot``, paced), or its error."""
        snapshot: ServerSnapshot | None = None
        error = answer.error
        if answer.text is not None:
            try:
                snapshot = parse_snapshot(answer.text, self._model, pause=_Yield(PARSE_SLICE_S))
            except (ServerMetricsError, UnicodeError) as exc:
                error = str(exc) or type(exc).__name__
        began_s, ended_s = answer.began_s, answer.ended_s
        return Reading(answer.url, snapshot, (began_s + ended_s) / 2, ended_s - began_s, error)
