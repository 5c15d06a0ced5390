"""The socket layer under the transport: kernel receive stamps, name resolution, connection liveness.

- ``StampedSocket`` (Linux): a gevent TCP socket with ``SO_TIMESTAMPNS`` on,
  read with ``recvmsg``, so each receive keeps the kernel's receive time of the
  newest segment it consumed (``Stamps``), never older than any byte it
  returned; ``llmload.net.transport`` turns that into each read's lag.
- ``AddressCache``: one name look-up per host and port for all of a process's
  users' connections.
- ``idle_and_open`` / ``tls_idle_and_open``: whether a pooled connection can
  carry the next request without yielding to the loop (plain TCP: a peek;
  TLS: session tickets are not a sign of a dead connection).

``StampedSocket.recv`` uses three attributes of gevent's socket (``_sock``,
``_read_event``, ``_wait``); ``llmload.net.transport`` documents why and which
geventhttpclient internals it replaces with these functions.
"""

from __future__ import annotations

import _socket
import contextlib
import errno
import ssl
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.lock
import gevent.socket
import gevent.ssl

from llmload.net.turns import LoopTurns

__all__ = [
    "CMSG_BYTES",
    "KERNEL_STAMPS",
    "AddressCache",
    "StampedSocket",
    "Stamps",
    "describe",
    "idle_and_open",
    "never_known_open",
    "stamp_ns",
    "tls_idle_and_open",
    "unverified_context",
]

# SO_TIMESTAMPNS (Linux asm-generic/socket.h; the same value on x86 and arm): receive
# stamps as a struct timespec in an SCM_TIMESTAMPNS control message. Python does not
# export the constant.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_TIMESPEC_BYTES = _TIMESPEC.size
_unpack_timespec = _TIMESPEC.unpack_from
CMSG_BYTES = 64  # room for one timespec control message
KERNEL_STAMPS = sys.platform.startswith("linux")
# the clock around a request's hand-over to the kernel (StampedSocket.sendall); a module name, so a
# test can play a hand-over the kernel held
_perf_counter = time.perf_counter
# the most the timed send(2) of a request hands over: copying an 8 MB prompt takes the kernel
# milliseconds, and the first segment leaves after the first ~64 KiB (one loopback segment, dozens
# of Ethernet ones). The rest follows at once, so the segments are the same as one write's.
_TIMED_SEND_BYTES = 64 * 1024


class Stamps:
    """One transport's connection, the kernel stamp of the newest bytes it received there, and the first bytes."""

    __slots__ = ("drained_ns", "earliest_ns", "first", "ns", "send_s", "sent_s", "sock", "turns")

    def __init__(self, turns: LoopTurns | None = None) -> None:
        """Create the record; ``turns``: the process's loop-iteration clock that narrows ``earliest_ns``, or None."""
        self.ns = 0  # CLOCK_REALTIME ns of the last receive through ``StampedSocket.recv``; 0 = none
        # CLOCK_REALTIME ns after which the bytes not yet received arrived: set to the send time by the
        # transport, then to the start of each receive that emptied the socket; 0 = unknown
        self.drained_ns = 0
        # CLOCK_REALTIME ns after which the bytes of the last receive arrived: the later of drained_ns
        # before it and, when it waited, the loop's last poll that did not find the socket readable
        # (LoopTurns.floor_ns); 0 = unknown
        self.earliest_ns = 0
        # time.perf_counter() right before the request was handed to the kernel (its first sendall since
        # the transport reset it); 0 = not sent yet
        self.sent_s = 0.0
        # seconds that hand-over took (its send(2) call): the request left within them; 0 = not timed
        self.send_s = 0.0
        self.turns = turns
        # the bytes of the first receive since the transport reset it before a request (a reference,
        # not a copy): what a reply that is not HTTP/1.1 began with
        self.first = b""
        self.sock: StampedSocket | None = None  # the transport's newest connection


class StampedSocket(gevent.socket.socket):  # type: ignore[misc]
    """A gevent TCP socket whose receives keep the kernel's receive stamp (Linux ``SO_TIMESTAMPNS``).

    geventhttpclient reads the status line and headers through ``recv``, and
    may release the connection before the response object exists (when the
    whole reply came with the headers); the stamp is kept on the transport's
    ``Stamps``, so body bytes that arrived with the headers are stamped too.
    """

    __slots__ = ("_stamps",)

    def __init__(self, *args: Any, stamps: Stamps, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stamps = stamps
        stamps.sock = self
        if KERNEL_STAMPS:
            with contextlib.suppress(OSError):  # no stamps then: reads fall back to the monotonic clock
                self._sock.setsockopt(_socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)

    def sendall(self, data: Any, flags: int = 0) -> None:
        """``sendall`` as gevent does it, timing the hand-over of the request's first bytes to the kernel.

        geventhttpclient writes a request (head and body) with one ``sendall``
        after building it. For the first one since the transport reset
        ``Stamps``, the clock is read right before one direct ``send(2)`` and
        right after it returns, with no Python between that could run a
        garbage collection or switch greenlets: ``Stamps.sent_s`` is the first
        reading, ``Stamps.send_s`` the time between the two. The request went
        on the wire within it: about 20 µs, unless the kernel preempted the
        process inside the call (measured against a packet capture, 1.5-2.1 ms
        with one involuntary context switch, a few times in 10 runs of 2,000
        requests at 256 users), and the request's clock may then have started
        up to that much early. The timed call hands over at most
        ``_TIMED_SEND_BYTES``; the rest, and bytes the kernel did not take at
        once (a full send buffer), follow as gevent sends them, waiting for room.
        """
        stamps = self._stamps
        if stamps.turns is not None:
            stamps.turns.observe()
        if stamps.sent_s:
            super().sendall(data, flags)
            return
        raw = self._sock
        first = data if len(data) <= _TIMED_SEND_BYTES else memoryview(data)[:_TIMED_SEND_BYTES]
        before_s = _perf_counter()
        try:
            sent = raw.send(first, flags)
        except BlockingIOError:
            sent = 0
        after_s = _perf_counter()
        stamps.sent_s = before_s
        stamps.send_s = after_s - before_s
        if sent < len(data):
            super().sendall(memoryview(data)[sent:], flags)

    def recv(self, *args: Any) -> bytes:
        """``recv`` as gevent does it (wait for the socket, honour its timeout), keeping the stamp."""
        bufsize = args[0]
        flags = args[1] if len(args) > 1 else 0
        floor_ns = 0
        while True:
            before_ns = time.time_ns()
            try:
                data, ancillary, _flags, _address = self._sock.recvmsg(bufsize, CMSG_BYTES, flags)
            except BlockingIOError:
                if self.timeout == 0.0:
                    raise
                floor_ns = self._wait_readable()
                continue
            stamps = self._stamps
            stamps.ns = stamp_ns(ancillary)
            drained_ns = stamps.drained_ns
            stamps.earliest_ns = floor_ns if floor_ns > drained_ns else drained_ns
            if len(data) < bufsize:
                stamps.drained_ns = before_ns
            if not stamps.first:
                stamps.first = data
            received: bytes = data
            return received

    def _wait_readable(self) -> int:
        """Wait as gevent does (honouring the timeout); return ``LoopTurns.floor_ns`` for the wait, 0 = unknown."""
        turns = self._stamps.turns
        if turns is None:
            self._wait(self._read_event)
            return 0
        turns.observe()
        wait_ns = time.time_ns()
        turns.waits_begin()
        try:
            self._wait(self._read_event)
        finally:
            turns.waiting -= 1
        return turns.floor_ns(wait_ns)


def stamp_ns(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The SCM_TIMESTAMPNS stamp in ``ancillary`` as CLOCK_REALTIME nanoseconds; 0 if none."""
    for _level, kind, value in ancillary:
        if kind == _SO_TIMESTAMPNS and len(value) >= _TIMESPEC_BYTES:
            seconds, nanoseconds = _unpack_timespec(value)
            return seconds * 1_000_000_000 + nanoseconds  # type: ignore[no-any-return]
    return 0


class AddressCache:
    """This process's name resolutions, shared by all its users' transports.

    geventhttpclient resolves the host for every new connection, through
    gevent's thread pool: a burst of 1,024 first connections means 1,024 thread
    hand-offs while replies wait to be read. One look-up per host and port is
    kept for ``ttl_s`` seconds (so a soak run still follows DNS changes).
    """

    def __init__(self, ttl_s: float = 60.0) -> None:
        """Create an empty cache whose entries live ``ttl_s`` seconds."""
        self._ttl_s = ttl_s
        self._entries: dict[tuple[str, int, int], tuple[float, list[Any]]] = {}
        self._lock = gevent.lock.Semaphore()  # one name look-up at a time; the others then find it cached

    def resolve(self, host: str, port: int, family: int) -> list[Any]:
        """``getaddrinfo`` results for a TCP connection to ``host:port`` (cached).

        An IP address is converted at once (no look-up, no thread); a name is
        looked up through gevent's resolver by one greenlet while the others wait.

        Raises:
            OSError: the name does not resolve (``socket.gaierror``).
        """
        key = (host, port, family)
        infos = self._fresh(key)
        if infos is not None:
            return infos
        try:
            infos = _socket.getaddrinfo(
                host, port, family, _socket.SOCK_STREAM, _socket.SOL_TCP, _socket.AI_NUMERICHOST
            )
        except _socket.gaierror:
            with self._lock:
                infos = self._fresh(key)
                if infos is None:
                    infos = list(
                        gevent.socket.getaddrinfo(host, port, family, gevent.socket.SOCK_STREAM, gevent.socket.SOL_TCP)
                    )
        self._entries[key] = (time.monotonic(), infos)
        return infos

    def _fresh(self, key: tuple[str, int, int]) -> list[Any] | None:
        entry = self._entries.get(key)
        if entry is not None and time.monotonic() - entry[0] < self._ttl_s:
            return entry[1]
        return None


def idle_and_open(fallback: Callable[[Any], bool], sock: Any) -> bool:
    """True when a pooled connection is open and has nothing to read (a FIN or stray bytes: not reusable).

    Other sockets than these two kinds keep geventhttpclient's own check (``fallback``).
    """
    if isinstance(sock, gevent.ssl.SSLSocket | ssl.SSLSocket):  # gevent's, or the stdlib's when unpatched
        return tls_idle_and_open(sock)
    if type(sock) is not StampedSocket:
        return fallback(sock)
    raw = sock._sock
    try:
        raw.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def tls_idle_and_open(sock: Any) -> bool:
    """True when a pooled TLS connection is open and holds no application data.

    TLS 1.3 servers send session tickets just after the handshake: a fresh
    connection is then readable, and a readability check (geventhttpclient's)
    discards the connection ``connect`` opened, so the request opens another
    one inside its timed region. A non-blocking TLS read consumes such records:
    "want read" means nothing else was there.
    """
    if sock.fileno() < 0:
        return False
    try:
        raw = getattr(sock, "_sock", sock)  # gevent's SSL socket wraps the OS socket; the stdlib's is one
        peeked = _socket.socket.recv(raw, 1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)  # raw bytes, not decrypted
    except BlockingIOError:
        buffered: int = sock.pending()  # decrypted bytes already read from the socket
        return buffered == 0
    except OSError:
        return False
    if not peeked:
        return False  # FIN
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        sock.recv(1)
    except ssl.SSLWantReadError:
        return True  # only TLS records without application data (session tickets)
    except (OSError, ValueError):
        return False
    finally:
        sock.settimeout(timeout)
    return False  # application data or a clean TLS close


def never_known_open(_sock: Any) -> bool:
    """The verdict on a connection ``idle_and_open`` cannot peek at: not known open."""
    return False


def describe(exc: BaseException) -> str:
    """An OS error as text that names its errno symbol (``ECONNREFUSED [Errno 111] ...``).

    A TLS error (``ssl.SSLError``) keeps its own text: its errno is OpenSSL's
    error code, which would name an unrelated system error (1: EPERM).
    """
    if isinstance(exc, ssl.SSLError):
        return str(exc) or type(exc).__name__
    code = getattr(exc, "errno", None)
    name = errno.errorcode.get(code, "") if isinstance(code, int) else ""
    text = str(exc) or type(exc).__name__
    return f"{name} {text}" if name and name not in text else text


def unverified_context(**_: Any) -> gevent.ssl.SSLContext:
    """TLS context for ``insecure=True``: no certificate or host name check."""
    context = gevent.ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = gevent.ssl.CERT_NONE
    return context
