"""The loop-iteration clock of a process's users: when its gevent loop polls, and what runs between polls.

``LoopTurns`` notes when each iteration of the loop returned from its poll
(the bounds of when a reply's bytes arrived: ``llmload.net.transport``),
holds polls apart while users wait for bytes (``PACE_NS``), looks at the
reply sockets between polls (``LOOK_NS``), wakes users in batches to decode
what the loop received (``BATCH_S``), and keeps each iteration's work short
(``TURN_BUDGET_NS``). One per process, shared by its users' transports.
"""

from __future__ import annotations

import contextlib
import heapq
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
import gevent.monkey
from gevent.hub import Waiter

__all__ = [
    "BATCH_READS",
    "BATCH_S",
    "GAP_WINDOW_NS",
    "LOOK_NS",
    "PACE_GAP_SHARE",
    "PACE_MAX_NS",
    "PACE_NS",
    "POLL_TICK_S",
    "TURN_BUDGET_NS",
    "LoopTurns",
]

_EPOLL = sys.platform.startswith("linux")  # select.epoll exists (the looks between polls)


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
the next poll collects the segments of that time into one wake-up. Bytes that wait are still timed by their kernel
stamps; only segments of one stream that come closer together than the hold can then share a read (and its
stamp), which the read lag bounds. So the hold follows the streams (``PACE_MAX_NS``)."""

PACE_MAX_NS = 2_000_000
"""The longest hold between polls: 2 ms, taken while no stream's receives come closer than ``PACE_GAP_SHARE`` times it.

The hold is a quarter of the shortest time between two stamped receives of one reply seen in the last
``GAP_WINDOW_NS`` to ``2 * GAP_WINDOW_NS`` (``gap_ns``; ``GeventResponse`` notes every receive), between
``PACE_NS`` and this, so one stream's segments keep a poll each; ``PACE_NS`` while no gap was seen. Every hold
is a blocking sleep, which on a virtual machine costs about 20 us of CPU (``docs/benchmarks.md``): at 256 users
and 10 ms ITL this hold takes a quarter of the polls of a fixed 0.5 ms one. A stream that speeds up is caught
within a poll: its segments merge into one read, whose gap from the last is shorter than that poll's hold, and
the next hold shortens. A process behind (users at the turn gate, ``queued``) holds ``PACE_NS``, so does one
whose last iteration worked longer than ``PACE_NS`` since its poll (the longer hold is for a loop with little to
do), one whose reader found several events in one read in the last 1 to 2 s
(``GeventResponse.note_several_events``), and no hold runs past a time a user is due to send (``due``). A stream
faster than a quarter of the others' gaps can share the first hold's read with its next event; the read lag
covers it, as for a merge under ``PACE_NS``."""

PACE_GAP_SHARE = 4
"""The hold is at most the shortest receive gap of one reply divided by this (``PACE_MAX_NS``)."""

GAP_WINDOW_NS = 1_000_000_000
"""How long a receive gap counts for the hold (``PACE_MAX_NS``): from 1 to 2 s after it was seen.

Long enough that a stream whose tokens now and then come in close pairs (every 250 ms, say) keeps the hold under
them, short enough that a burst of short gaps at a spawn does not keep the hold short for the run."""

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
_NO_GAP_NS = 1 << 62  # no receive gap seen in a window
_DUE_PAST_NS = 50_000  # a hold for a due time ends this long past it: the user's timer (started after due()) expired
_DUE_KEEP_NS = 1_000_000  # a due time is kept this long after it, in case its timer had not expired at the first poll
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
    until ``PACE_NS`` to ``PACE_MAX_NS`` after the last one returned
    (``PACE_NS`` says why, ``PACE_MAX_NS`` how long: ``gap_ns`` is the
    shortest time between two receives of one reply, noted by the
    transports; ``due`` notes when a user is due to send), and
    ``wake_later`` wakes a reply's user ``BATCH_S`` after its first waiting read.

    Between polls, ``observe`` looks at the reply sockets registered with
    ``watch`` when the loop has not for ``LOOK_NS`` (``look_ns``: when it last
    did; ``prev_look_ns``: the time before): a look, like a poll, tells which
    were empty then and receives the others at once.
    """

    __slots__ = (
        "_due",
        "_epoll",
        "_flush",
        "_gap_window_ns",
        "_gate",
        "_later",
        "_loop",
        "_pacer",
        "_prev_gap_ns",
        "_readers",
        "_sleep",
        "_tick",
        "_watcher",
        "check_ns",
        "gap_ns",
        "look_ns",
        "observed_ns",
        "prev_check_ns",
        "prev_look_ns",
        "queued",
        "waiting",
    )

    def __init__(self) -> None:
        """Create the clock; no watcher runs until ``start``."""
        self._watcher: Any = None
        self._gate: Any = None  # the timer that resumes queued greenlets (yield_if_turn_over)
        # greenlets waiting at the turn gate for a later iteration, with their budgets; non-empty: the process
        # cannot keep up just now (read it, never change it)
        self.queued: deque[tuple[Callable[[Any], Any], int]] = deque()
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
        self.gap_ns = _NO_GAP_NS  # the shortest time between two stamped receives of one reply in this gap window
        self._prev_gap_ns = _NO_GAP_NS  # the same in the window before
        self._gap_window_ns = 0  # when this gap window ends (CLOCK_REALTIME ns); 0 = none begun
        self._due: list[int] = []  # a heap of times (CLOCK_REALTIME ns) users are due to send (due)

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
        self.gap_ns = self._prev_gap_ns = _NO_GAP_NS
        self._gap_window_ns = 0
        self._due.clear()
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
        while self.queued:
            resume, _budget_ns = self.queued.popleft()
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
        self.queued.append(entry)
        if self._gate is None:
            gate = self._gate = gevent.get_hub().loop.timer(0.0)
            gate.start(self._let_go)
        try:
            waiter.get()
        except BaseException:  # killed while queued (the stop): never resumed later
            with contextlib.suppress(ValueError):
                self.queued.remove(entry)
            raise

    def _let_go(self) -> None:
        """Timer callback, after a poll: resume queued greenlets in order while the iteration is within budget."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.close()
        queued = self.queued
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
            if not _EPOLL:  # no epoll: replies wait for the next poll
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

    def due(self, at_ns: int) -> None:
        """Note that a user is due to send at ``at_ns`` (CLOCK_REALTIME ns), right before it sleeps until then.

        The loop then holds no poll past it: a hold that would end later ends
        ``_DUE_PAST_NS`` after it, and while no user waits for bytes the
        last hold before it does the same (``_pace``), so the poll after it
        runs the user's timer on time (libev rounds a poll's timeout up to
        whole milliseconds).
        """
        heapq.heappush(self._due, at_ns)  # dropped once past by _pace, which runs every loop iteration

    def _pace(self) -> None:
        """Prepare watcher, before the poll: while users wait for bytes, hold it (``PACE_NS``, ``PACE_MAX_NS``)."""
        now_ns = time.time_ns()
        due = self._due
        while due and due[0] + _DUE_KEEP_NS <= now_ns:  # the user due then has been woken
            heapq.heappop(due)
        until_due_ns = due[0] + _DUE_PAST_NS - now_ns if due else _NO_GAP_NS  # <= 0: due just now
        if now_ns >= self._gap_window_ns:  # a new gap window; the last one counts unless it ended a window ago
            recent = not self._gap_window_ns or now_ns < self._gap_window_ns + GAP_WINDOW_NS
            self._prev_gap_ns, self.gap_ns = self.gap_ns if recent else _NO_GAP_NS, _NO_GAP_NS
            self._gap_window_ns = now_ns + GAP_WINDOW_NS
        if self.waiting > 0:
            gap_ns = self.gap_ns if self.gap_ns < self._prev_gap_ns else self._prev_gap_ns
            # PACE_NS also while behind, with no gap seen (say, streams' first tokens), and after an iteration that
            # worked longer than PACE_NS since its poll: a longer hold would only stretch a busy loop's turns
            pace_ns = PACE_NS
            if gap_ns != _NO_GAP_NS and not self.queued and now_ns - self.check_ns < PACE_NS:
                pace_ns = gap_ns // PACE_GAP_SHARE
                if pace_ns > PACE_MAX_NS:
                    pace_ns = PACE_MAX_NS
                elif pace_ns < PACE_NS:
                    pace_ns = PACE_NS
            left_ns = self.check_ns + pace_ns - now_ns
            if left_ns > pace_ns:  # noqa: PLR1730 - a plain comparison, once per poll
                left_ns = pace_ns
            if until_due_ns < left_ns:  # a user is due first: hold until just past it, however short
                if until_due_ns > 0:
                    self._sleep(until_due_ns * 1e-9)
            elif left_ns > _PACE_MIN_SLEEP_NS:
                self._sleep(left_ns * 1e-9)
        elif 0 < until_due_ns <= PACE_MAX_NS:  # no hold, but a user is due within one: its timer on time
            self._sleep(until_due_ns * 1e-9)

    def _checked(self) -> None:
        self.prev_check_ns = self.check_ns
        self.check_ns = self.observed_ns = time.time_ns()

    def _ticked(self) -> None:
        """Timer callback: nothing to do (the poll it ended is noted by ``_checked``); stops when no user waits."""
        if not self.waiting:
            tick, self._tick = self._tick, None
            if tick is not None:
                tick.close()
