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
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
import gevent.lock
import gevent.monkey
import gevent.socket
import gevent.ssl
from gevent.hub import Waiter

__all__ = [
    "BATCH_READS",
    "BATCH_S",
    "CMSG_BYTES",
    "KERNEL_STAMPS",
    "LOOK_NS",
    "PACE_NS",
    "POLL_TICK_S",
    "TURN_BUDGET_NS",
    "AddressCache",
    "LoopTurns",
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


class Stamps:
    """One transport's connection, the kernel stamp of the newest bytes it received there, and the first bytes."""

    __slots__ = ("drained_ns", "earliest_ns", "first", "ns", "sent_s", "sock", "turns")

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
        # time.perf_counter() when the request was handed to the kernel (its first sendall since the
        # transport reset it); 0 = not sent yet
        self.sent_s = 0.0
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
        """``sendall`` as gevent does it, noting when the request's first bytes went to the kernel (``Stamps.sent_s``).

        geventhttpclient writes a request (head and body) with one ``sendall``
        after building it: the note is taken right before the system call, so
        the request's clock does not include the building (or a garbage
        collection during it).
        """
        stamps = self._stamps
        if stamps.turns is not None:
            stamps.turns.observe()
        if not stamps.sent_s:
            stamps.sent_s = time.perf_counter()
        super().sendall(data, flags)

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


TURN_BUDGET_NS = 2_000_000
"""How long a loop iteration may run since its poll before users wait for a later one to read a reply or send a
request (``LoopTurns.yield_if_turn_over``): 2 ms, well under a token interval."""

POLL_TICK_S = 0.001
"""While a user waits for a reply's bytes, the longest the loop blocks in one poll (``LoopTurns.waits_begin``): 1 ms,
half the read lag's P99 limit (``llmload.exporters.sections.READ_LAG_LIMIT_S``)."""

PACE_NS = 500_000
"""While users wait for reply bytes, the shortest time from one poll's return to the next poll (``LoopTurns``): 0.5 ms.

A process that keeps up is otherwise woken by nearly every segment that arrives, one context switch each (on a
2-core VM at 256 users and 10 ms ITL, 0.7 polls per token, a sixth of the client's CPU in the switches). Holding
the next poll collects the segments of that half millisecond into one wake-up. Bytes that wait are still timed by
their kernel stamps; only events of one stream less than 0.5 ms apart can then share a read (and its stamp), which
the read lag bounds."""

BATCH_S = 0.1
"""How long a reply's bytes, received and stamped, may wait before its user is woken to decode them: 100 ms.

Bytes are received by the loop as they arrive (``GeventResponse``); the user, who decodes them, is woken at the
end of the body, after ``BATCH_READS`` reads, or ``BATCH_S`` after the first waiting read, whichever comes
first, not for every token. Every read keeps its own times, so this moves no measured time; it delays only
what the user does with the bytes (a total-timeout check, the start of a finish wait)."""

BATCH_READS = 32
"""The number of waiting reads that wakes a reply's user at once (``BATCH_S``)."""

LOOK_NS = 1_000_000
"""How long after the loop last looked at the reply sockets a checkpoint looks again (``LoopTurns.observe``): 1 ms.

An iteration can run long before the next poll: at a spawn, 40 connections that complete in one poll each build and
send a request (0.1-1.4 ms each), 20 ms in all. Replies that arrive meanwhile would wait for that poll, and a first
token still unread when the next one comes is merged with it under the later stamp (a whole token interval late).
Every waiting point of a user (a send, a connect, a wait for headers or bytes) is a checkpoint: past this time it
asks the kernel which reply sockets are readable (one ``epoll_wait`` with no timeout) and receives them at once, so
no reply waits longer than about this plus the longest single step of a user."""


_PACE_MIN_SLEEP_NS = 50_000  # a shorter sleep than this costs more than the wake-ups it saves
_EPOLLIN = 0x001  # select.EPOLLIN (Linux)


def _epoll_class() -> Any:
    """The standard library's ``select.epoll`` (gevent leaves it unpatched; Linux only)."""
    return gevent.monkey.get_original("select", "epoll")


class LoopTurns:
    """When this process's gevent loop last returned from a poll, for the read lag (``GeventResponse``).

    A check watcher notes, in CLOCK_REALTIME ns, when each loop iteration
    returned from its poll (libev runs check watchers before the iteration's
    I/O callbacks): ``check_ns`` for the current iteration, ``prev_check_ns``
    for the one before. A greenlet that began waiting for a socket before the
    previous poll returned, and is woken now, knows that poll did not find the
    socket readable: its bytes arrived after ``prev_check_ns``. (A poll that
    blocked says nothing safer: the process may have been descheduled between
    its start and the system call.) So that an idle process still learns
    this often, a repeating timer ends any poll after ``POLL_TICK_S`` while a
    user waits for bytes (``waits_begin``): the first reply bytes after a long
    wait then count from the last empty poll, not from the headers, and one
    user on an idle machine is not called a late client. One short callback
    per loop iteration, shared by the process's transports; started on first
    use, on the current hub; neither keeps the loop alive.

    While users wait for bytes, a prepare watcher of the lowest priority (it
    runs after gevent's callbacks, right before the poll) holds the next poll
    until ``PACE_NS`` after the last one returned (``PACE_NS`` says why), and
    ``wake_later`` wakes a reply's user ``BATCH_S`` after its first waiting read.

    Between polls, ``observe`` looks at the reply sockets registered with
    ``watch`` when the loop has not for ``LOOK_NS`` (``look_ns``: when it last
    did; ``prev_look_ns``: the time before): a look, like a poll, tells which
    were empty then and receives the others at once.
    """

    __slots__ = (
        "_epoll",
        "_flush",
        "_gate",
        "_later",
        "_loop",
        "_pacer",
        "_queued",
        "_readers",
        "_sleep",
        "_tick",
        "_watcher",
        "check_ns",
        "look_ns",
        "observed_ns",
        "prev_check_ns",
        "prev_look_ns",
        "waiting",
    )

    def __init__(self) -> None:
        """Create the clock; no watcher runs until ``start``."""
        self._watcher: Any = None
        self._gate: Any = None  # the timer that resumes queued greenlets (yield_if_turn_over)
        self._queued: deque[tuple[Callable[[Any], Any], int]] = deque()
        self.check_ns = 0  # the current iteration returned from its poll; 0 = unknown
        self.prev_check_ns = 0  # the iteration before returned from its poll
        self._tick: Any = None  # the repeating timer that bounds a poll while users wait (waits_begin)
        self.waiting = 0  # users waiting for a socket now (waits_begin: +1; the wait's end: -1)
        self._loop: Any = None  # the hub's loop, once started
        self._pacer: Any = None  # the prepare watcher that holds a poll until PACE_NS after the last
        self._sleep: Callable[[float], None] = time.sleep  # the unpatched sleep, set by start
        self._later: list[Any] = []  # waiters to wake when the flush timer fires (wake_later)
        self._flush: Any = None  # that one-shot timer, while waiters are listed
        self._epoll: Any = None  # the reply sockets to look at between polls (observe), made on first watch
        self._readers: dict[int, Callable[[int], None]] = {}  # fd -> what receives its bytes, given the look's time
        self.look_ns = 0  # the last look returned (CLOCK_REALTIME ns); 0 = none
        self.prev_look_ns = 0  # the look before it
        self.observed_ns = 0  # the later of check_ns and look_ns: when the loop last learned which sockets held bytes

    def start(self) -> None:
        """Start noting loop iterations on the current hub (idempotent)."""
        if self._watcher is None:
            loop = self._loop = gevent.get_hub().loop
            watcher = loop.check(ref=False)
            watcher.start(self._checked)
            self._watcher = watcher
            # the OS sleep, not gevent's (Locust patches time.sleep): it must block the whole loop
            self._sleep = gevent.monkey.get_original("time", "sleep")
            pacer = self._pacer = loop.prepare(ref=False, priority=loop.MINPRI)
            pacer.start(self._pace)

    def close(self) -> None:
        """Stop noting loop iterations and let every queued greenlet go on (idempotent)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()
            watcher.close()
        pacer, self._pacer = self._pacer, None
        if pacer is not None:
            pacer.stop()
            pacer.close()
        flush, self._flush = self._flush, None
        if flush is not None:
            flush.close()
        later, self._later = self._later, []
        for waiter in later:
            gevent.get_hub().loop.run_callback(waiter.switch, None)
        self.check_ns = self.prev_check_ns = self.observed_ns = 0
        self._readers.clear()
        epoll, self._epoll = self._epoll, None
        if epoll is not None:
            epoll.close()
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.close()
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.close()
        hub = gevent.get_hub()
        while self._queued:
            resume, _budget_ns = self._queued.popleft()
            hub.loop.run_callback(resume, None)

    def floor_ns(self, wait_ns: int) -> int:
        """The time after which bytes arrived on a socket watched since ``wait_ns`` and readable now; 0 = unknown.

        Call from the woken greenlet, before it yields to the loop again.
        """
        prev = self.prev_check_ns
        return prev if wait_ns < prev else 0

    def waits_begin(self) -> None:
        """Note that a user begins waiting for a socket (the wait's end: ``waiting -= 1``); keeps the poll tick on.

        The tick stops itself at the first tick with no user waiting. No-op until ``start``.
        """
        self.waiting += 1
        if self._tick is None and self._watcher is not None:
            tick = self._tick = gevent.get_hub().loop.timer(POLL_TICK_S, POLL_TICK_S, ref=False)
            tick.start(self._ticked)

    def yield_if_turn_over(self, budget_ns: int) -> None:
        """Wait for a later loop iteration when this one has run ``budget_ns`` since its poll.

        Replies that a server streams together (a batch it started together)
        make every socket readable in one poll, and their reads, request ends
        and next sends would all run in that one iteration: sockets that turn
        readable meanwhile wait for the next poll, and a first token waiting
        behind more merges into their buffer and is timed late. A greenlet
        past the budget queues instead; after each later poll, a timer (libev
        runs the iteration's timers after its poll) lets queued greenlets go
        on in order while that iteration is within the budget, at least one
        per iteration, so none starves. No-op until ``start``.
        """
        self.observe()
        check_ns = self.check_ns
        if not check_ns or time.time_ns() - check_ns <= budget_ns:
            return
        waiter: Any = Waiter()
        entry = (waiter.switch, budget_ns)
        self._queued.append(entry)
        if self._gate is None:
            gate = self._gate = gevent.get_hub().loop.timer(0.0)
            gate.start(self._let_go)
        try:
            waiter.get()
        except BaseException:  # killed while queued (the stop): never resumed later
            with contextlib.suppress(ValueError):
                self._queued.remove(entry)
            raise

    def _let_go(self) -> None:
        """Timer callback, after a poll: resume queued greenlets in order while the iteration is within budget."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.close()
        queued = self._queued
        first = True
        while queued:
            resume, budget_ns = queued[0]
            if not first and time.time_ns() - self.check_ns > budget_ns:
                break
            queued.popleft()
            first = False
            resume(None)
            self.observe()
        if queued:
            gate = self._gate = gevent.get_hub().loop.timer(0.0)
            gate.start(self._let_go)

    def watch(self, fd: int, reader: Callable[[int], None]) -> None:
        """Look at socket ``fd`` between polls (``observe``): ``reader(look_ns)`` receives its bytes when it holds some.

        Raises:
            OSError: the kernel refused the registration (``epoll_ctl``).
        """
        epoll = self._epoll
        if epoll is None:
            if not KERNEL_STAMPS:  # no epoll: replies wait for the next poll
                return
            epoll = self._epoll = _epoll_class()()
        epoll.register(fd, _EPOLLIN)
        self._readers[fd] = reader

    def unwatch(self, fd: int) -> None:
        """Stop looking at socket ``fd`` (before it is closed; a closed one has left the kernel's set already)."""
        if self._readers.pop(fd, None) is not None and self._epoll is not None:
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)

    def observe(self) -> None:
        """A checkpoint: look at the watched sockets if the loop has not for ``LOOK_NS`` (a no-op otherwise).

        Call only where no reply's receive is under way (a user's waiting point, or the hub between callbacks).
        """
        if self._readers and time.time_ns() - self.observed_ns >= LOOK_NS:
            self._look()

    def _look(self) -> None:
        """Ask the kernel which watched sockets are readable now and have each one's reader receive its bytes."""
        readers = self._readers
        epoll = self._epoll
        if epoll is None:
            return
        ready = epoll.poll(0, len(readers))  # at most one event per socket: never cut short
        look_ns = time.time_ns()
        self.prev_look_ns, self.look_ns = self.look_ns, look_ns
        self.observed_ns = look_ns
        for fd, _events in ready:
            reader = readers.get(fd)
            if reader is not None:
                try:
                    reader(look_ns)
                except Exception:  # a receive's fault must not land in the user that happened to look
                    gevent.get_hub().handle_error(reader, *sys.exc_info())

    @property
    def behind(self) -> bool:
        """True while users wait at the turn gate for a later iteration: the process cannot keep up just now."""
        return bool(self._queued)

    def wake_later(self, waiter: Any) -> None:
        """Wake ``waiter`` (a ``gevent.hub.Waiter``; with None) ``BATCH_S`` from now at the latest, after the reads.

        One timer for all listed waiters; the wake-ups are loop callbacks, so
        the reads of the iteration in which the timer fires come first. A
        waiter that was woken meanwhile, or whose greenlet left, ignores it.
        """
        self._later.append(waiter)
        if self._flush is None and self._loop is not None:
            flush = self._flush = self._loop.timer(BATCH_S)
            flush.start(self._flushed)

    def _flushed(self) -> None:
        """Timer callback: wake the waiters ``wake_later`` listed."""
        flush, self._flush = self._flush, None
        if flush is not None:
            flush.close()
        later, self._later = self._later, []
        run_callback = self._loop.run_callback
        for waiter in later:
            if waiter.greenlet is not None:  # still waiting (None: woken meanwhile, or left)
                run_callback(waiter.switch, None)

    def _pace(self) -> None:
        """Prepare watcher, before the poll: while users wait for bytes, sleep until ``PACE_NS`` after the last poll."""
        if self.waiting > 0:
            left_ns = self.check_ns + PACE_NS - time.time_ns()
            if left_ns > _PACE_MIN_SLEEP_NS:
                self._sleep((left_ns if left_ns < PACE_NS else PACE_NS) * 1e-9)

    def _checked(self) -> None:
        self.prev_check_ns = self.check_ns
        self.check_ns = self.observed_ns = time.time_ns()

    def _ticked(self) -> None:
        """Timer callback: nothing to do (the poll it ended is noted by ``_checked``); stops when no user waits."""
        if not self.waiting:
            tick, self._tick = self._tick, None
            if tick is not None:
                tick.close()


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
    """An OS error as text that names its errno symbol (``ECONNREFUSED [Errno 111] ...``)."""
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
