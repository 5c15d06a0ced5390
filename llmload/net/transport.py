"""Production transport: one keep-alive HTTP/1.1 connection over geventhttpclient.

Each Locust user owns one ``GeventHTTPTransport`` (``concurrency=1``: one
connection, reused while the server keeps it alive), the same client Locust's
``FastHttpUser`` uses, so thousands of users per worker stay cheap.

Why this reaches into geventhttpclient internals: ``HTTPSocketResponse.read(n)``
and its iterator block until ``n`` bytes (default 4 KiB) have arrived or the
body ends, so SSE events would be held back and timestamped late; that
defeats TTFT/ITL measurement. ``GeventResponse`` therefore receives the body
itself and feeds each receive to the response parser, taking the body bytes
from the parser: the llhttp ``_on_body`` callback, which the transport points
at a list of its own once the headers are read (``_body_buffer`` before).
Only ``_body_buffer``, ``_sock``, ``message_complete``, ``feed`` (the C
parser's ``HTTPResponseParser.feed``), ``_on_body`` (set per response to a
list's ``append``) and ``release`` are used; the dependency is pinned to
geventhttpclient 2.x in ``pyproject.toml`` and covered by the integration
tests in ``tests/integration``. On plain TCP the
body is received by the loop (the hub), not by the user greenlet: an I/O
watcher on the OS socket (gevent's socket's ``_sock`` and ``hub``) calls
``GeventResponse._on_readable`` as soon as a poll finds bytes, which does one
``recvmsg``, feeds the parser and queues the body bytes with the times of
their receive (or hands them to the reader's ``consumer``, which accounts a
plain token event there and then); ``read_some`` hands them to the user
greenlet, which is woken at the end of the body, after ``BATCH_READS``
receives or ``BATCH_S`` after the first that waits (``llmload.net.turns``).
So a receive never waits behind another user's work, and a token costs no
greenlet switch: at 256 users and 10 ms ITL the client's CPU per token fell
by a third (``docs/benchmarks.md``). While users
wait for bytes, the loop holds each poll 0.5 to 2 ms after the last
(``PACE_NS``, ``PACE_MAX_NS``: a quarter of the shortest time between two
receives of one reply), so that one wake-up collects the segments of that time
instead of one each; the receive stamps keep their times.

Receive stamps (Linux): the transport turns on ``SO_TIMESTAMPNS`` on each
plain-TCP socket (``llmload.net.sockets.StampedSocket``) and reads with
``recvmsg``, so every read carries the kernel's receive time of the newest
segment in the last buffer it copied from. That stamp is never older than
any byte the read returned (Linux keeps the appended segment's stamp when it
merges queued segments: commit 98aaa913b4ed, "tcp: Extend
SOF_TIMESTAMPING_RX_SOFTWARE to TCP recvmsg"; held by
``tests/integration/test_receive_stamps.py``), so a read's time is late at
worst, never early. ``read_age_s`` is how long ago that was when
``read_some`` returned: the client subtracts it from its own clock, so a
reply that arrived while the process was busy elsewhere is still timed when
it arrived. Segments that queue behind an unread one are merged by the
kernel into one buffer stamped with the newest (at once on a fresh
connection, which acknowledges every segment; on a warm one that delays its
ACKs, once the older segment is acknowledged), and one read of them all
carries the newest stamp either way, so the stamp is exact only when the
client keeps up; events that piled up are timed late. ``read_lag_s`` bounds
how far off: how long before the stamp the oldest bytes of the read may have
arrived, i.e. since the socket was last known empty (the start of the
receive that last emptied it, or the last poll that watched the socket and
did not report it, ``LoopTurns``; for body bytes that came with the headers
too, ``Stamps.earliest_ns``; while a user waits no poll blocks beyond
``POLL_TICK_S``). How long the read then
waited for the client is no error (the stamp says when the bytes came) and
does not count. The client keeps 0 instead for a read that completes one
event and carries no bytes past it, whose stamp is that event's own (bytes
of a later event may be a later segment's, which then owns the stamp).
``read_first_age_s`` is
how long ago the oldest bytes of the read had arrived at the latest: the
poll that found the socket readable returned after them (``LoopTurns``,
``check_ns``), so when that was before the stamp, a first event that begins
the read is timed by it (``StreamingClient``). Elsewhere
(TLS, other platforms, bytes that came with the headers on TLS)
``read_stamped`` is False and both are measured from when the bytes reached
user space (monotonic clock).

``connect`` opens the connection before the client takes its send time, so
connection set-up (and the loop turns it waits for) is timed apart from TTFT.

Through a forward proxy (``proxy``), geventhttpclient connects to the proxy:
plain http keeps the stamping socket (stamps are when the proxy's bytes
arrived here), https is a ``CONNECT`` tunnel with TLS inside (monotonic clock).

Three methods of geventhttpclient's ``ConnectionPool`` are replaced on each
transport's own pool (``HTTPClient._connection_pool``): ``_create_tcp_socket``
(the stamping socket), ``_is_socket_alive`` (a check that does not yield to
the loop between the send time and the send, and that does not take a TLS 1.3
session ticket for a sign of a dead connection) and ``_resolve`` (the shared
``AddressCache``). ``tests/integration/test_transport.py`` fails if a new
geventhttpclient no longer calls them. After an interim 1xx reply the
connection is taken back from the pool's ``_socket_queue`` (and its
``_semaphore``) for the final reply's body (``_take_back``;
``tests/integration/test_interim_replies.py``).

End of body: ``read_some`` returns ``b""`` only at the clean end of the HTTP
message (last chunk, full Content-Length, or close of a read-until-close
body). A connection closed before that raises ``ConnectionClosedError``;
the client reports it as "stream ended before completion". A connection
whose body was not read to the end is closed, never reused; ``drain``
reads the rest for a bounded time (``gevent.Timeout`` around the waits), so
a body held open after the reply is complete costs the connection, not the
user's time.

A reply that is not HTTP/1.1 at all (HTTP/2 frames from an h2c-only or gRPC
port, a TLS record on an https port) raises ``WrongProtocolError`` naming it:
the first bytes received (``Stamps.first``) are read by
``llmload.net.protocols``.
"""

from __future__ import annotations

import _socket
import functools
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.lock
import gevent.queue
import gevent.socket
import gevent.ssl
from gevent.hub import Waiter
from geventhttpclient import HTTPClient
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPResponse, HTTPSocketPoolResponse

from llmload.errors import (
    ConfigError,
    ConnectionClosedError,
    ProxyUnreachableError,
    RequestTimeout,
    TransportError,
    WrongProtocolError,
)
from llmload.net.protocols import foreign_protocol, not_http1_message, not_tls_message, starts_like_http1
from llmload.net.sockets import (
    CMSG_BYTES,
    AddressCache,
    StampedSocket,
    Stamps,
    describe,
    idle_and_open,
    never_known_open,
    stamp_ns,
    unverified_context,
)
from llmload.net.turns import BATCH_READS, TURN_BUDGET_NS, LoopTurns
from llmload.settings.config import Timeouts
from llmload.settings.credentials import public_query, public_url
from llmload.settings.proxies import ProxyChoice

__all__ = ["GeventHTTPTransport", "GeventResponse", "HTTPResult"]

_time_ns = time.time_ns  # module aliases: the receive runs once per token
_monotonic = time.monotonic
# The parser's own feed: geventhttpclient's HTTPResponse.feed wraps it only to forgive a body after the headers
# of a reply to HEAD, a method this transport never sends (one Python frame less per receive).
_parse = HTTPResponseParser.feed
_RECV_BYTES = 16 * 1024  # the most one receive takes; SSE events are ~100-500 bytes
_EOF_IN_HEADERS = "Invalid EOF state"  # llhttp's reason (HPE_INVALID_EOF_STATE) for a close inside the headers


class _BufferParts:
    """The parser's ``_body_buffer`` seen as the list of body spans ``GeventResponse`` reads (one span or none).

    For a geventhttpclient whose parser does not call an ``_on_body`` set on
    the response (``_INSTANCE_BODY_HOOK`` false): receives then read the
    library's buffer, as the transport did before it set the hook.
    """

    __slots__ = ("_buf",)

    def __init__(self, buf: bytearray) -> None:
        self._buf = buf

    def __bool__(self) -> bool:
        return bool(self._buf)

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> bytearray:
        return self._buf

    def __iter__(self) -> Iterator[bytearray]:
        return iter((self._buf,))

    def clear(self) -> None:
        self._buf.clear()


def _parser_calls_instance_on_body() -> bool:
    """Whether the installed parser looks ``_on_body`` up on the response, so that one can be set per response.

    geventhttpclient 2.3 to 2.6 do (its C ``on_body`` calls
    ``getattr(response, "_on_body")`` for every span); a release that bound
    the method once would send the body to its own buffer instead, and the
    transport must then read that buffer (``_BufferParts``), or lose the body.
    """
    probe = HTTPResponse(method="GET")
    spans: list[bytearray] = []
    probe._on_body = spans.append  # type: ignore[method-assign,assignment]
    try:
        _parse(probe, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    except HTTPParseError:
        return False
    if spans != [bytearray(b"ok")] or probe._body_buffer:
        return False
    probe._on_message_begin = _another_message  # type: ignore[method-assign,assignment]
    try:  # the parser must refuse a message after the first through the response's own hook
        _parse(probe, b"HTTP/1.1 200 OK\r\n")
    except HTTPParseError:
        return probe.message_complete
    return False


def _another_message() -> bool:
    """Set as a reply's ``_on_message_begin`` once its headers are in: any message after it is refused.

    The server sent bytes past the end of the reply that no request asked
    for. A truthy return makes the parser fail there, before it resets the
    reply's state for a new message (and would hand that message's body to
    this reply): the reply keeps what came before, the transport drops the
    rest and closes the connection (``GeventResponse._parse_failed``).
    """
    return True


_INSTANCE_BODY_HOOK = _parser_calls_instance_on_body()
_BEHIND_READS = 4  # queued receives of a user behind in a saturated process that pause its receiving (_pause)
_GET_BODY_BYTES = 8 * 1024 * 1024
_USER_AGENT = "llmload"


@dataclass(frozen=True, slots=True)
class HTTPResult:
    """A small, fully read reply (for preflight checks such as ``GET /v1/models``)."""

    status: int
    content_type: str
    body: bytes


class _IdleTimeout(Exception):  # noqa: N818 - a signal thrown into the reading greenlet, never escapes
    """Thrown by the idle timer into a greenlet that waits for body bytes."""


class GeventResponse:
    """A ``client.Response`` over a geventhttpclient response whose headers have arrived.

    On plain TCP the body is received by the loop itself: an I/O watcher on
    the socket calls ``_on_readable`` in the hub as soon as a poll finds bytes,
    which does one ``recvmsg``, feeds the HTTP parser and queues the body bytes
    with the times of their receive (kernel stamp, the bounds of when they
    arrived). ``read_some`` hands out one queued receive at a time with those
    times; the user greenlet is woken at the end of the body, after
    ``BATCH_READS`` receives or ``BATCH_S`` after the first one that waits
    (``llmload.net.turns``), not for every token, and at once in
    ``read_within`` and ``drain``, which wait on time. So no receive waits for
    a busy user greenlet, and the token stream costs no greenlet switch per
    token. TLS is read by the user greenlet (``_receive_here``).

    A reader may also set ``consumer``: a callable given the body bytes of a
    kernel-stamped receive, its stamp (CLOCK_REALTIME ns) and whether earlier
    receives are queued (then it must leave the bytes to the reader), called
    in the hub while no ``read_within`` or ``drain`` waits and the process
    keeps up (``LoopTurns.queued`` is empty). When it returns True it has
    accounted those bytes, which are then not queued and wake no one (False:
    queued as usual; None: queued, and the user is woken at once). The
    streaming client accounts a whole plain token event this way
    (``llmload.request.stream.LoopTokens``), so such an event is neither
    queued, handed out nor decoded by the user greenlet. It must not switch
    greenlets or raise.
    """

    __slots__ = (
        "_drained_ns",
        "_eager",
        "_entries",
        "_error",
        "_fd",
        "_hub",
        "_idle_s",
        "_last_read_s",
        "_parts",
        "_paused",
        "_raw",
        "_resp",
        "_seen_ns",
        "_sent_s",
        "_stamp_ns",
        "_timer",
        "_turns",
        "_waiter",
        "_watch_ns",
        "_watcher",
        "_where",
        "consumer",
        "content_type",
        "on_close",
        "read_age_s",
        "read_first_age_s",
        "read_lag_s",
        "read_stamped",
        "retry_after",
        "send_lag_s",
        "status",
    )

    def __init__(
        self,
        resp: HTTPSocketPoolResponse,
        *,
        where: str,
        idle_s: float,
        stamp_ns: int = 0,
        sent_ns: int = 0,
        earliest_ns: int = 0,
        drained_ns: int = 0,
        turns: LoopTurns | None = None,
        sent_s: float = 0.0,
        send_s: float = 0.0,
    ) -> None:
        """Wrap ``resp`` and, on plain TCP, start receiving its body in the loop.

        Args:
            resp: the response, headers read.
            where: names the request in messages.
            idle_s: the read timeout.
            stamp_ns: kernel stamp (CLOCK_REALTIME ns) of the receive that
                completed the headers, for body bytes that came with them; 0 = none.
            sent_ns: when the request was written (CLOCK_REALTIME ns): no byte
                of the reply arrived before; 0 = unknown.
            earliest_ns: when the loop's polls say the bytes of the receive
                that completed the headers arrived at the earliest (CLOCK_REALTIME
                ns, ``Stamps.earliest_ns``); 0 = unknown; the later of it and
                ``sent_ns`` counts.
            drained_ns: the start of the last receive of the headers that
                emptied the socket (body bytes not yet received arrived after it); 0 = unknown.
            turns: the process's loop-iteration clock, which narrows when
                bytes could have arrived (``LoopTurns``); None: not used.
            sent_s: ``time.perf_counter()`` right before the request went to
                the kernel (``Stamps.sent_s``); 0 = not known.
            send_s: how long that hand-over took (``Stamps.send_s``): the
                request went on the wire within it; 0 = not timed.
        """
        self._resp = resp
        self._sent_s = sent_s
        self.send_lag_s = send_s if sent_s else 0.0
        self._where = where
        self._idle_s = idle_s
        self.on_close: Any = None  # called with True when the connection went back to the pool
        # set by the reader: accounts a stamped receive in the loop, as it comes (see the class docstring)
        self.consumer: Callable[[bytes, int, bool], bool | None] | None = None
        self.status: int = resp.status_code
        self.content_type = _media_type(resp.get("content-type"))
        retry_after = resp.get("retry-after")
        self.retry_after: str | None = retry_after[-1] if isinstance(retry_after, list) else retry_after
        self._turns = turns
        if turns is not None:
            turns.start()
        self._timer: Any = None  # the idle timer, armed lazily by _wait
        self._waiter: Any = None  # the user greenlet's Waiter while it waits for receives (_wait)
        self._eager = False  # True while read_within or drain wait: wake at the first receive
        self._error: BaseException | None = None  # raised once the queued receives are handed out
        self._last_read_s = time.monotonic()  # when bytes last arrived (headers included)
        # the receives not yet handed out: (body bytes, kernel stamp ns or 0, earliest ns or 0, ceiling ns
        # or 0, time.monotonic() of the receive), all CLOCK_REALTIME ns but the last (see read_some)
        self._entries: deque[tuple[bytes, int, int, int, float]] = deque()
        # bytes not yet received arrived after _drained_ns (the start of the last receive that emptied
        # the socket; before any, the send)
        self._drained_ns = drained_ns or sent_ns
        self._seen_ns = 0  # when the poll or look that found the bytes of the last receive returned
        self._stamp_ns = 0  # the kernel stamp of the last body receive (the loop's, LoopTurns.gap_ns); 0 = none
        self._watch_ns = 0  # when the watcher started (CLOCK_REALTIME ns)
        self._watcher: Any = None
        self._fd = -1  # the socket's file descriptor while watched
        self._paused = False  # receiving stopped while the user is behind in a saturated process (_pause)
        self._raw: _socket.socket | None = None
        self._hub: Any = None
        buf = resp._body_buffer
        if buf:  # body bytes that came with the headers, stamped with the headers' receive
            self._entries.append(
                (bytes(buf), stamp_ns, earliest_ns if earliest_ns > sent_ns else sent_ns, 0, self._last_read_s)
            )
            buf.clear()
        # From here the parser hands each body span (a bytearray) to this list's append, a C call, instead of
        # its Python _on_body, which appends to _body_buffer: one Python frame and one copy less per receive.
        if _INSTANCE_BODY_HOOK:
            parts: list[bytearray] = []
            self._parts: list[bytearray] | _BufferParts = parts
            resp._on_body = parts.append  # type: ignore[method-assign,assignment]
            resp._on_message_begin = _another_message  # type: ignore[method-assign,assignment]
        else:
            self._parts = _BufferParts(buf)
        sock: Any = resp._sock  # None if the whole message came with the headers
        if type(sock) is StampedSocket and not resp.message_complete:
            raw = self._raw = sock._sock
            hub = self._hub = sock.hub
            self._watch_ns = time.time_ns()
            fd = self._fd = raw.fileno()
            watcher = self._watcher = hub.loop.io(fd, 1)  # 1: EV_READ
            watcher.start(self._on_readable)
            if turns is not None:
                turns.waits_begin()
                turns.watch(fd, self._on_readable)
        self.read_age_s = 0.0
        self.read_first_age_s = 0.0
        self.read_lag_s = 0.0
        self.read_stamped = False

    @property
    def sent_age_s(self) -> float:
        """Seconds since the request was handed to the kernel (>= 0); 0 when not known (then: since ``post`` began)."""
        sent_s = self._sent_s
        if not sent_s:
            return 0.0
        age_s = time.perf_counter() - sent_s
        return age_s if age_s > 0.0 else 0.0

    def read_some(self) -> bytes:
        """Return the body bytes of the next receive, in order; b"" at the clean end of the body.

        The bytes may be handed out a little after they arrived (up to
        ``BATCH_S``; see the class docstring): the times set here are those of
        their receive. Sets, for every non-empty return, ``read_age_s``
        (seconds since the newest returned bytes arrived: the kernel stamp
        when ``read_stamped``, else when the receive returned),
        ``read_first_age_s`` (seconds since the oldest of them had arrived at
        the latest: the return of the poll that found the socket readable,
        when that was before the stamp; else ``read_age_s``) and
        ``read_lag_s``: how many seconds before the stamp the oldest of them
        may have arrived, a bound of how far any time given to them is off
        (>= 0). The kernel stamps a receive with its newest segment and
        merges segments that queue behind an unread one into one buffer
        carrying the newest stamp; a reader cannot see where they split, so
        the bytes may have queued one after another since the socket was last
        known empty (the start of the last receive that emptied it, or the
        last poll that did not find it readable), and the lag counts from
        then. When a read completes one event and holds nothing past it, its
        stamp is that event's arrival: the client, whose decoder counts the
        events, then keeps 0 (``StreamingClient``), so no byte is scanned
        here. Unstamped reads (TLS, other platforms) are timed when their
        receive returned, and their lag is the time since then.

        Raises:
            RequestTimeout: no bytes within the idle timeout.
            ConnectionClosedError: the peer closed the connection mid-body.
            TransportError: reset or malformed HTTP framing.
        """
        entries = self._entries
        while not entries:
            error = self._error
            if error is not None:
                raise error
            resp = self._resp
            if resp.message_complete:
                return b""
            if self._watcher is not None:
                if self._paused:
                    self._resume()
                self._wait()
            elif resp._sock is None:
                raise ConnectionClosedError(f"{self._where}: connection released before the end of the body")
            else:
                self._receive_here()
        data, stamp_ns, earliest_ns, ceiling_ns, received_s = entries.popleft()
        if stamp_ns:
            self.read_stamped = True
            now_ns = time.time_ns()
            age_ns = now_ns - stamp_ns
            self.read_age_s = age_ns * 1e-9 if age_ns > 0 else 0.0
            lag_ns = stamp_ns - earliest_ns if earliest_ns else 0
            self.read_lag_s = lag_ns * 1e-9 if lag_ns > 0 else 0.0
            first_ns = now_ns - ceiling_ns if ceiling_ns else 0
            self.read_first_age_s = first_ns * 1e-9 if first_ns > age_ns else self.read_age_s
        else:
            self.read_stamped = False
            lag_s = time.monotonic() - received_s
            self.read_age_s = self.read_lag_s = self.read_first_age_s = lag_s if lag_s > 0.0 else 0.0
        return data

    def header(self, name: str) -> str | None:
        """The value of the response header ``name`` (any case; the last one if repeated); None if absent."""
        value = self._resp.get(name)
        if isinstance(value, list):
            return value[-1] if value else None
        return value

    def note_several_events(self) -> None:
        """The reader found more than one event in the last read (or one cut short): hold the loop's polls the least.

        Such a read cannot be told from segments merged while the loop held
        its polls, and its lag spans a whole hold (``read_lag_s``): a server
        that writes several events at once (a role delta with the first
        token, several tokens per write) would get every such read's lag near
        ``PACE_MAX_NS``, over the read-lag limit, on an idle machine. So the
        loop holds ``PACE_NS`` for the next 1 to 2 s (``LoopTurns.gap_ns``).
        """
        if self._turns is not None:
            self._turns.gap_ns = 0

    def read_within(self, within_s: float) -> bytes | None:
        """As ``read_some``, but None when no bytes arrive within ``within_s`` seconds (the body stays open)."""
        # As in drain: gevent.Timeout interrupts only the wait (no bytes are lost).
        self._eager = True
        try:
            with gevent.Timeout(within_s, False):
                return self.read_some()
        finally:
            self._eager = False
        return None

    def drain(self, within_s: float, limit_bytes: int) -> bool:
        """Read and discard the rest of the body for at most ``within_s`` seconds and ``limit_bytes`` bytes.

        Returns True when the body ended (``close`` then keeps the connection
        for the next request); False when it had not ended in time (a server
        that holds the body open after ``[DONE]``, or sends ``: ping``
        keep-alives after it), failed, or was longer: ``close`` then closes the
        connection, and the next request opens a new one at once.
        """
        resp = self._resp
        if resp.message_complete and not self._entries:
            return self._error is None
        size = 0
        self._eager = True
        # gevent.Timeout interrupts the wait inside read_some (raised, then swallowed by the with
        # block); the idle timer then finds no waiter and is dropped.
        try:
            with gevent.Timeout(within_s, False):
                while size <= limit_bytes:
                    data = self.read_some()
                    if not data:
                        return True
                    size += len(data)
        except TransportError:
            return False
        finally:
            self._eager = False
        return False

    def close(self) -> None:
        """Return the connection to the pool if the message was complete, else close it. Idempotent."""
        self._unwatch()
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.stop()
            timer.close()
        self._entries.clear()
        resp = self._resp
        reusable = resp.message_complete and not resp.should_close() and self._error is None
        resp.release()
        if self.on_close is not None:
            self.on_close(reusable)
            self.on_close = None

    # ── receiving ────────────────────────────────────────────────────────
    # gevent's socket.recv tries recv(2) first and, on EAGAIN, waits for the fd under a new
    # gevent.Timeout (the socket timeout), then switches back to the greenlet: per token, a failed
    # system call, a Timeout object, a libev timer started and stopped and two greenlet switches. On
    # plain TCP the body is received in the hub instead (_on_readable, one recvmsg per poll that finds
    # bytes), and the idle timeout is one timer per request, re-armed only when it fires
    # (_on_idle_timer). TLS keeps gevent's recv in the user greenlet: its SSL layer may hold decrypted
    # bytes that the fd no longer signals.
    def _on_readable(self, look_ns: int = 0) -> None:
        """One recvmsg(2), fed to the parser, accounted by ``consumer`` or queued with its times; wake the user if due.

        Called in the hub by the socket's I/O watcher after a poll found it
        readable, or by ``LoopTurns.observe`` after a look (``look_ns``: when the
        look returned) found it readable between polls.
        """
        raw = self._raw
        if raw is None:
            return
        before_ns = _time_ns()
        try:
            data, ancillary, _flags, _address = raw.recvmsg(_RECV_BYTES, CMSG_BYTES)
        except BlockingIOError:
            return  # a spurious wake-up: nothing to read after all
        except OSError as exc:
            error = TransportError(f"{self._where}: read failed: {describe(exc)}")
            error.__cause__ = exc
            self._stop(error)
            return
        self._last_read_s = received_s = _monotonic()
        kernel_ns = stamp_ns(ancillary) if ancillary else 0
        # When the bytes arrived: by the poll or look that found them at the latest; at the earliest,
        # after the start of the last receive that emptied the socket, and after an earlier poll or look
        # that watched the socket and did not find it (the one before the latest poll: the latest may
        # have found it with its receive still to come; the latest look, or the one before a look that
        # found it), unless a receive came since. Worked out below only for bytes that are queued.
        drained_ns = self._drained_ns
        if len(data) < _RECV_BYTES:
            self._drained_ns = before_ns  # the socket was empty at some instant after this
        turns = self._turns
        seen_ns = found_ns = 0
        if turns is not None:
            found_ns = look_ns or turns.check_ns
            seen_ns = self._seen_ns
            self._seen_ns = found_ns
            # the time since this reply's last receive bounds how long the loop holds its polls (none for its
            # first; unstamped: the receive's time is the clock's, so the least hold)
            last_ns, self._stamp_ns = self._stamp_ns, kernel_ns
            if not kernel_ns:
                turns.gap_ns = 0
            elif last_ns and kernel_ns - last_ns < turns.gap_ns:
                turns.gap_ns = kernel_ns - last_ns
        resp = self._resp
        try:
            _parse(resp, data)  # b"" signals EOF: completes a read-until-close body, else raises
        except HTTPParseError as exc:
            if not self._parse_failed(data, exc, kernel_ns, drained_ns, received_s):
                return
        parts = self._parts
        consumed = hurry = False
        if parts:  # _take_body, inline: once per token
            body = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
            parts.clear()
            consumer = self.consumer
            # not while the process is behind (users wait at the turn gate): then the queue and _pause let
            # the kernel merge what this user is not there to take, fewer receives for the same bytes
            if consumer is not None and kernel_ns and not self._eager and not (turns is not None and turns.queued):
                verdict = consumer(body, kernel_ns, bool(self._entries))  # queued behind others: never accounted
                consumed = verdict is True
                hurry = verdict is None
            if not consumed:
                earliest_ns = drained_ns
                ceiling_ns = 0
                if turns is not None:
                    looked_ns = turns.prev_look_ns if look_ns else turns.look_ns
                    watch_ns = self._watch_ns
                    if seen_ns < watch_ns:  # noqa: PLR1730 - plain comparisons, once per receive
                        seen_ns = watch_ns
                    polled_ns = turns.prev_check_ns
                    if polled_ns > seen_ns and polled_ns > earliest_ns:
                        earliest_ns = polled_ns
                    if looked_ns > seen_ns and looked_ns > earliest_ns:
                        earliest_ns = looked_ns
                    if found_ns > watch_ns:
                        ceiling_ns = found_ns
                self._entries.append((body, kernel_ns, earliest_ns, ceiling_ns, received_s))
        if consumed and not resp.message_complete:
            return  # accounted in the loop: nothing for the user greenlet to do
        self._settle(data, consumed, hurry)

    def _take_body(self) -> bytes:
        """The body bytes the parser handed over since the last call (``_parts``), as one ``bytes``; empties it."""
        parts = self._parts
        body = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
        parts.clear()
        return body

    def _parse_failed(
        self, data: bytes, exc: HTTPParseError, stamp_ns: int, earliest_ns: int, received_s: float
    ) -> bool:
        """After a parser failure for ``data`` (b"": the peer closed mid-body): True when the reply had ended.

        Bytes past the end of the reply (``_another_message``): it keeps what
        came, its end is handled as any end (True), and the connection is
        closed, not reused. Else the body bytes the parser took before the
        failure are queued with this receive's times (``stamp_ns`` kernel
        stamp or 0, ``earliest_ns``, ``received_s`` as ``_entries``), and the
        error is raised once they are handed out (False).
        """
        resp = self._resp
        if resp.message_complete:
            resp._trailing_data_dropped = True  # geventhttpclient's own mark: release() closes the connection
            return True
        if self._parts:
            self._entries.append((self._take_body(), stamp_ns, earliest_ns, 0, received_s))
        if not data:
            error: TransportError = ConnectionClosedError(f"{self._where}: connection closed mid-body")
        else:
            error = TransportError(f"{self._where}: malformed HTTP body ({_parse_error(exc)})")
        error.__cause__ = exc
        self._stop(error)
        return False

    def _settle(self, data: bytes, consumed: bool, hurry: bool = False) -> None:
        """After a receive (``data``): stop at the body's end, else wake the user when due.

        ``consumed``: the ``consumer`` accounted its body bytes (none queued);
        ``hurry``: it left them to the user at once (queued; wake now).
        """
        if self._resp.message_complete:
            self._stop(None)
            return
        if not data:
            self._stop(ConnectionClosedError(f"{self._where}: connection closed mid-body"))
            return
        if consumed:
            return  # accounted in the loop: nothing for the user greenlet to do
        entries = self._entries
        waiter = self._waiter
        if waiter is not None:
            if self._eager or hurry or len(entries) >= BATCH_READS or _ends_a_reply(data):
                self._waiter = None
                self._hub.loop.run_callback(waiter.switch, None)
            elif len(entries) == 1 and self._turns is not None:
                self._turns.wake_later(waiter)
        elif len(entries) >= _BEHIND_READS and self._turns is not None and self._turns.queued:
            self._pause()  # the user was woken, or is busy, and has not come for them: it is behind

    def _pause(self) -> None:
        """Stop receiving until the user has taken every queued receive (``read_some`` resumes).

        Only while the process cannot keep up (users wait at the turn gate,
        ``LoopTurns.queued`` not empty): the times of a saturated process are flagged
        anyway (read lag, ``client_saturated``), and a receive per segment for
        a user who is not there to decode it costs the CPU that would let it
        catch up. The bytes wait in the kernel, which merges them into fewer
        receives; their lag says how far their times may be off.
        """
        watcher = self._watcher
        if watcher is not None and not self._paused:
            self._paused = True
            watcher.stop()
            if self._turns is not None:
                self._turns.unwatch(self._fd)

    def _resume(self) -> None:
        """Receive again after ``_pause``: polls and looks before now did not watch the socket."""
        watcher = self._watcher
        if watcher is not None and self._paused:
            self._paused = False
            self._watch_ns = _time_ns()
            watcher.start(self._on_readable)
            if self._turns is not None:
                self._turns.watch(self._fd, self._on_readable)

    def _stop(self, error: BaseException | None) -> None:
        """Stop receiving in the loop (end of the body, or ``error`` to raise after the queued bytes); wake the user."""
        self._unwatch()
        if error is not None:
            self._error = error
            self._resp.release()
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._hub.loop.run_callback(waiter.switch, None)

    def _unwatch(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()
            watcher.close()
            if self._turns is not None:
                self._turns.waiting -= 1
                self._turns.unwatch(self._fd)

    def _wait(self) -> None:
        """Block the user greenlet until receives are queued, the body ended or failed; raise RequestTimeout on idle.

        Then waits for a later loop iteration when this one has run its turn
        budget (``LoopTurns.yield_if_turn_over``).
        """
        turns = self._turns
        if turns is not None:
            turns.observe()  # may receive this reply's own bytes, its end or a failure: then no wait
            if self._entries or self._error is not None or self._watcher is None:
                return
        if self._timer is None:
            self._start_timer(self._idle_s - (time.monotonic() - self._last_read_s))
        waiter = self._waiter = Waiter(self._hub)
        try:
            waiter.get()
        except _IdleTimeout as exc:
            self._unwatch()  # before the release closes the socket
            self._resp.release()
            raise RequestTimeout(f"{self._where}: no bytes for {self._idle_s:g} s (read idle timeout)") from exc
        finally:
            self._waiter = None
        if turns is not None:
            turns.yield_if_turn_over(TURN_BUDGET_NS)

    def _start_timer(self, after_s: float) -> None:
        timer = self._timer = self._hub.loop.timer(max(after_s, 0.0))
        timer.start(self._on_idle_timer)

    def _on_idle_timer(self) -> None:
        """Runs in the hub when the idle timer expires: time out a stalled wait, else re-arm.

        Bytes that arrived since the timer was armed push the deadline to
        ``last read + idle_s``. If the greenlet is not waiting for bytes (it is
        processing them, or the body was left unread), the timer is dropped
        and the next wait arms a new one.
        """
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.close()
        waiter = self._waiter
        if waiter is None:
            return
        remaining_s = self._idle_s - (time.monotonic() - self._last_read_s)
        if remaining_s > 0:
            self._start_timer(remaining_s)
            return
        self._waiter = None
        waiter.throw(_IdleTimeout())

    def _receive_here(self) -> None:
        """One recv through gevent's socket in the user greenlet (TLS), fed and queued as ``_on_readable`` does."""
        sock = self._resp._sock
        assert sock is not None
        try:
            data: bytes = sock.recv(_RECV_BYTES)
        except TimeoutError as exc:
            self._resp.release()
            raise RequestTimeout(f"{self._where}: no bytes for {self._idle_s:g} s (read idle timeout)") from exc
        except OSError as exc:
            self._resp.release()
            raise TransportError(f"{self._where}: read failed: {describe(exc)}") from exc
        self._last_read_s = received_s = time.monotonic()
        if self._turns is not None:
            self._turns.gap_ns = 0  # timed by the clock when the user reads: the loop holds its polls the least
        resp = self._resp
        try:
            _parse(resp, data)
        except HTTPParseError as exc:
            if not self._parse_failed(data, exc, 0, 0, received_s):
                return
        if self._parts:
            self._entries.append((self._take_body(), 0, 0, 0, received_s))
        self._settle(data, False)


class GeventHTTPTransport:
    """Sends requests to one server over one keep-alive connection.

    Not safe for concurrent use by several greenlets: give each user its own.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        timeouts: Timeouts,
        insecure: bool = False,
        addresses: AddressCache | None = None,
        proxy: ProxyChoice | None = None,
        turns: LoopTurns | None = None,
    ) -> None:
        """Create the transport; no connection is opened until ``connect`` or the first request.

        Args:
            base_url: ``http://host[:port][/prefix][?query]`` or ``https://...``; request
                paths are appended to the prefix, and the query to every request.
            headers: sent with every request (e.g. ``Authorization``).
            timeouts: ``connect_s`` for TCP+TLS setup, ``idle_s`` for every
                send and read (headers included). ``total_s`` is enforced by
                the client, not here.
            insecure: skip TLS certificate and host name verification.
            addresses: name resolutions shared with the process's other
                transports; None resolves for every new connection.
            turns: the process's loop-iteration clock, shared with its other
                transports (it bounds the read lag of bytes that queued); None:
                this transport starts its own, stopped by ``close``.
            proxy: forward proxy to connect to instead of the target
                (``llmload.settings.proxies.route``); None connects directly.
                geventhttpclient's own proxy support sends plain-http
                requests in absolute form with ``Proxy-Authorization``, and
                opens a ``CONNECT`` tunnel (with it) for https.

        Raises:
            ConfigError: ``base_url`` is not an http(s) URL with a host.
        """
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
            raise ConfigError(
                f"base URL {base_url!r} must look like http://HOST[:PORT][/PREFIX][?QUERY] or https://...; "
                "e.g. --host http://127.0.0.1:8000"
            )
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"base URL {base_url!r} has an invalid port: {exc}") from exc
        self._prefix = parts.path.rstrip("/")
        self._query = parts.query  # kept on every request (e.g. ?api-version=...)
        self._shown_query = public_query(parts.query)  # in messages: credential values as ***
        self._origin = public_url(f"{parts.scheme}://{parts.netloc}")  # error messages never carry user:password
        self._via = "" if proxy is None else f" via proxy {proxy.public}"
        self._proxy = proxy
        self._timeouts = timeouts
        https = parts.scheme == "https"
        extra: dict[str, Any] = {}
        if https and insecure:
            extra["ssl_context_factory"] = unverified_context
        if proxy is not None:
            extra.update(
                proxy_host=proxy.host, proxy_port=proxy.port, proxy_user=proxy.user, proxy_password=proxy.password
            )
        self._reusable = False  # the pooled connection is kept alive from a complete reply
        self._own_turns = turns is None
        self._turns = LoopTurns() if turns is None else turns
        self._stamps = Stamps(self._turns)
        self._client = HTTPClient(
            parts.hostname,
            port=port,
            headers={"User-Agent": _USER_AGENT, **headers},
            block_size=_RECV_BYTES,
            connection_timeout=timeouts.connect_s,
            network_timeout=timeouts.idle_s,
            concurrency=1,
            ssl=https,
            insecure=insecure,
            **extra,
        )
        pool: Any = self._client._connection_pool  # private: see the module docstring
        # geventhttpclient checks a pooled connection with gevent's select(), which
        # sleeps(0) even with a zero timeout: the request would then be written
        # only after every other ready greenlet has run (tens of ms in a burst of
        # first requests), after the client took its send time. One non-blocking
        # peek answers the same question (idle keep-alive = nothing to read) at once.
        pool._is_socket_alive = functools.partial(idle_and_open, pool._is_socket_alive)
        if not https:
            pool._create_tcp_socket = functools.partial(StampedSocket, stamps=self._stamps)
        if addresses is not None:
            family = _socket.AF_INET if pool.disable_ipv6 else 0
            host_name, host_port = pool._connection_host, pool._connection_port
            pool._resolve = lambda: addresses.resolve(host_name, host_port, family)

    def connect(self) -> None:
        """Have a connection ready, so that the next ``post`` writes the request at once.

        Opens one unless the last reply left a kept-alive connection in the
        pool that is still open (one non-blocking peek; servers such as
        llama-server close it after every streamed reply). The client calls this before it takes
        the send time, so TTFT and E2E start when the request is written, not
        when connection set-up began.

        Raises:
            RequestTimeout: no connection within ``connect_s``.
            TransportError: refused, DNS or TLS failure.
        """
        self._turns.observe()
        kept = self._stamps.sock
        if self._reusable and kept is not None and idle_and_open(never_known_open, kept):
            return  # the kept-alive connection in the pool is still open: post() writes at once
        pool: Any = self._client._connection_pool
        try:
            sock = pool.get_socket()
        except TimeoutError as exc:
            raise RequestTimeout(
                f"connect to {self._origin}{self._via}: no connection within "
                f"{self._timeouts.connect_s:g} s (connect timeout{self._proxy_hint()})"
            ) from exc
        except (OSError, RuntimeError) as exc:
            # RuntimeError also carries a refused CONNECT ("Proxy CONNECT failed: HTTP/1.1 407 ...")
            where = f"connect to {self._origin}{self._via}"
            raise self._failed(where, exc) from exc
        pool.return_socket(sock)
        # Connections opened together (a spawn) complete in one poll, and every user would then build
        # and send its request in that one iteration (~0.3 ms each) while replies wait unread: past
        # the turn budget, a user waits for a later iteration first (counted in its connect_s).
        self._turns.yield_if_turn_over(TURN_BUDGET_NS)

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> GeventResponse:
        """POST ``body``; return once status and headers are in.

        Raises:
            RequestTimeout: no connection within ``connect_s`` or no headers within ``idle_s``.
            TransportError: refused, reset, DNS, TLS or HTTP framing failure.
        """
        return self._request("POST", path, body, headers)

    def get(self, path: str) -> HTTPResult:
        """GET ``path`` and read the whole body (at most 8 MiB), e.g. ``/v1/models``.

        Raises:
            RequestTimeout, TransportError: as for ``post``.
        """
        response = self._request("GET", path, None, {})
        try:
            parts: list[bytes] = []
            size = 0
            while size <= _GET_BODY_BYTES:
                data = response.read_some()
                if not data:
                    break
                parts.append(data)
                size += len(data)
            return HTTPResult(response.status, response.content_type, b"".join(parts)[:_GET_BODY_BYTES])
        finally:
            response.close()

    def close(self) -> None:
        """Close the pooled connection (and the loop-iteration clock, when this transport started it)."""
        self._client.close()
        if self._own_turns:
            self._turns.close()

    def _request(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]) -> GeventResponse:
        target = self._prefix + path
        if self._query:
            target += ("&" if "?" in target else "?") + self._query
        shown = target if self._query == self._shown_query else target.replace(self._query, self._shown_query)
        where = f"{method} {self._origin}{shown}{self._via}"
        reused, self._reusable = self._reusable, False
        self._stamps.ns = self._stamps.earliest_ns = 0
        self._stamps.sent_s = self._stamps.send_s = 0.0
        self._stamps.first = b""
        self._turns.start()  # idempotent: the loop's polls bound the arrival of the headers' bytes too
        sent_ns = self._stamps.drained_ns = time.time_ns()  # no byte of the reply comes before the request
        try:
            try:
                resp = self._client.request(method, target, body=body, headers=headers)
            except (HTTPParseError, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server closed while idle (llama-server closes after
                # every streamed reply despite announcing keep-alive) fails before any response
                # byte: the server never saw this request, so send it once more on a fresh
                # connection (the pool dropped the dead one). A fresh connection is never retried.
                if not reused:
                    raise
                self._stamps.sent_s = self._stamps.send_s = 0.0  # the request's clock starts at this second send
                resp = self._client.request(method, target, body=body, headers=headers)
        except TimeoutError as exc:
            raise RequestTimeout(
                f"{where}: no connection or response headers in time "
                f"(connect timeout {self._timeouts.connect_s:g} s, idle timeout {self._timeouts.idle_s:g} s"
                f"{self._proxy_hint()})"
            ) from exc
        except HTTPParseError as exc:
            # No HTTP/1.1 status line: say what came instead when the bytes tell (HTTP/2 frames, TLS).
            head = self._stamps.first
            if foreign_protocol(head) is not None or (head and not starts_like_http1(head)):
                raise WrongProtocolError(f"{where}: {not_http1_message(head)}") from exc
            # nothing malformed: the answer stopped (a close before any byte; llhttp's end-of-input error inside
            # the headers)
            if isinstance(exc, HTTPConnectionClosed) or _parse_error(exc) == _EOF_IN_HEADERS:
                said = "before any byte of an answer" if not head else "in the middle of the answer's headers"
                raise TransportError(
                    f"{where} failed: the server closed the connection {said} (the request was sent; "
                    "the server's log may say why)"
                ) from exc
            raise TransportError(f"{where} failed: malformed HTTP/1.1 answer ({_parse_error(exc)})") from exc
        except (OSError, HTTPException, RuntimeError, ValueError) as exc:
            # RuntimeError: name did not resolve to any address; ValueError: invalid path or header.
            raise self._failed(where, exc) from exc
        if resp._sock is None and not resp.message_complete:
            self._take_back(resp)
        stamps = self._stamps
        response = GeventResponse(
            resp,
            where=where,
            idle_s=self._timeouts.idle_s,
            stamp_ns=stamps.ns,
            sent_ns=sent_ns,
            earliest_ns=stamps.earliest_ns,
            drained_ns=stamps.drained_ns,
            turns=self._turns,
            sent_s=stamps.sent_s,
            send_s=stamps.send_s,
        )
        response.on_close = self._note_reusable
        return response

    def _take_back(self, resp: HTTPSocketPoolResponse) -> None:
        """Give ``resp`` back the connection geventhttpclient released while its body is still to come.

        An interim 1xx reply (``100 Continue``, ``103 Early Hints``) before
        the final one ends a message: geventhttpclient's response then returns
        the connection to the pool (``HTTPSocketResponse._on_message_complete``)
        and reads the final headers through a reference of its own, leaving
        the response without a socket for the body. The pool's queue holds
        that connection (one per transport: ``concurrency=1``); taking it out
        as ``ConnectionPool.get_socket`` would, without its check, which calls
        a connection with bytes to read dead and closes it.
        """
        pool: Any = self._client._connection_pool
        try:
            sock = pool._socket_queue.get(block=False)
        except gevent.queue.Empty:
            return  # not pooled: the body is read as cut short, and the reply fails as such
        pool._semaphore.acquire(blocking=False)  # return_socket released it
        resp._sock, resp._pool = sock, pool

    def _proxy_down(self, where: str, exc: BaseException) -> ProxyUnreachableError | None:
        """The error for a connection the forward proxy refused or whose name did not resolve; else None.

        Through a proxy the TCP connection goes to the proxy, so a refusal or
        an unresolved name is the proxy's, never the target's (a proxy that
        cannot reach the target answers with a status instead).
        """
        proxy = self._proxy
        refused = isinstance(exc, ConnectionRefusedError | _socket.gaierror)
        unresolved = isinstance(exc, RuntimeError) and "Proxy CONNECT failed" not in str(exc)
        if proxy is None or not (refused or unresolved):
            return None
        return ProxyUnreachableError(
            f"{where} failed: the proxy {proxy.public} (from {proxy.variable}) is not reachable: {describe(exc)}; "
            f"the target was never contacted. Start the proxy or fix {proxy.variable}, add the target to NO_PROXY, "
            "or pass --ignore-proxy-env"
        )

    def _proxy_hint(self) -> str:
        """``; the connection is to the proxy … (from HTTPS_PROXY)`` for a connect timeout through a proxy; else ""."""
        proxy = self._proxy
        if proxy is None:
            return ""
        return f"; the connection is to the proxy {proxy.public} (from {proxy.variable}): is it up?"

    def _failed(self, where: str, exc: BaseException) -> TransportError:
        """The error for a connection or request that failed with ``exc``: a non-TLS port, a proxy down, or else."""
        known = _not_tls(where, exc) or self._proxy_down(where, exc)
        return known or TransportError(f"{where} failed: {describe(exc)}")

    def _note_reusable(self, reusable: bool) -> None:
        self._reusable = reusable


def _not_tls(where: str, exc: BaseException) -> WrongProtocolError | None:
    """The error for a TLS handshake that met no TLS (an ``https://`` URL on a plain-HTTP port); else None."""
    if isinstance(exc, gevent.ssl.SSLError):
        message = not_tls_message(getattr(exc, "reason", None))
        if message is not None:
            return WrongProtocolError(f"{where}: {message}")
    return None


def _ends_a_reply(data: bytes) -> bool:
    """True when received bytes hold what ends a streamed reply: ``data: [DONE]`` or a final typed event.

    A server may hold the body open after it (the client then drains it for a
    bounded time): the user is woken at once for it, not at the batch time, so
    its next request is not held back.
    """
    return b"[DONE]" in data or b"message_stop" in data or b"response.completed" in data


def _parse_error(exc: HTTPParseError) -> str:
    """The HTTP parser's reason alone: its exceptions carry ``(reason, code)`` and print as that tuple."""
    reason = exc.args[0] if exc.args else None
    return reason if isinstance(reason, str) and reason else type(exc).__name__


def _media_type(value: str | list[str] | None) -> str:
    """Lower-cased media type of a Content-Type header without parameters; "" if absent."""
    if isinstance(value, list):
        value = value[0] if value else None
    if not value:
        return ""
    return value.split(";", 1)[0].strip().lower()
