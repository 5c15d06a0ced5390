"""Trace replay in a user: take this process's next trace line and sleep until it is due.

The schedule is absolute (``RunState.trace_start_s`` plus the line's scaled
offset), so a late wake-up never shifts later lines; a line that finds every
user busy is sent late by the next free user, and the wait is its dispatch
delay (the schedule lag), as for ``--request-rate``.

A session's lines (jsonl ``session_id``) all go to one worker
(``trace_rank``) and are sent in order there: a line is not sent before the
previous line of its session has completed (``SessionOrder``), as AIPerf's
fixed schedule sends a conversation's later turns only after the earlier
turn returned. The line is then sent at its time, or at once when that has
passed: the wait is in its schedule lag.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gevent
import gevent.event

from llmload.workload.prompts import Prompt

if TYPE_CHECKING:
    from llmload.edge.runtime import Runtime

__all__ = ["SessionOrder", "TracedRequest", "finish_trace_line", "take_trace_line"]

# A timer wakes up to ~1 ms late (libev rounds epoll's timeout up to whole ms): the sender sleeps until this
# much before the line is due, then for the rest. The loop knows the line's due time (LoopTurns.due) and holds
# its last poll before it until just past it, so that second timer fires on time (within ~0.1 ms; the loop's
# holds between polls would otherwise delay it by up to 2 ms). Before the loop knew due times, the sender
# yielded with gevent.idle() for the last 2 ms instead (send lag p50 0.9-1.2 ms -> 0.1-0.3 ms); an idle
# watcher runs only in an iteration with nothing else pending, which a loop that holds its polls 1 ms or more
# never has while users stream (a breaker run saw sends a second late).
_EARLY_S = 0.002


class SessionOrder:
    """Sends a session's trace lines one at a time, in turn order, on this worker.

    ``wait(session, turn)`` returns once turns ``0 .. turn - 1`` of the session
    have finished (``done``); lines without a session never wait.
    """

    def __init__(self) -> None:
        self._next_turn: dict[str, int] = {}
        self._changed = gevent.event.Event()

    def wait(self, session_id: str, turn: int) -> None:
        """Block this greenlet until ``turn`` is the session's next turn."""
        while self._next_turn.get(session_id, 0) < turn:
            self._changed.wait()

    def done(self, session_id: str, turn: int) -> None:
        """Turn ``turn`` of the session finished (sent and answered, failed, or skipped): the next may go."""
        if self._next_turn.get(session_id, 0) <= turn:
            self._next_turn[session_id] = turn + 1
        changed, self._changed = self._changed, gevent.event.Event()
        changed.set()


@dataclass(frozen=True, slots=True)
class TracedRequest:
    """One trace line ready to send.

    Attributes:
        prompt: what to send.
        intended_s: when it is due (``time.perf_counter`` seconds).
        line: its line number in the trace file.
        session_id: the line's ``session_id`` (jsonl traces), or None.
        turn: the line's 0-based position among its session's lines (0 without a session).
    """

    prompt: Prompt
    intended_s: float
    line: int
    session_id: str | None = None
    turn: int = 0


def take_trace_line(runtime: Runtime) -> TracedRequest | None:
    """Take the next line of this process's trace share, sleep until it is due; None when none is left.

    Raises:
        DatasetError: the line's prompt cannot be built (an exact length is unreachable).
    """
    cursor, workload = runtime.run.trace, runtime.process.workload
    if cursor is None or workload is None:
        return None
    taken = cursor.take_turn()
    if taken is None:
        return None
    line, offset_s, turn = taken
    if runtime.run.trace_start_s == 0.0:
        runtime.run.trace_start_s = time.perf_counter()  # after a warm-up: the replay starts with the load
    intended_s = runtime.run.trace_start_s + offset_s
    try:
        prompt = workload.trace_prompt(line)  # built before the sleep, so the send is on time
    except Exception:
        if line.session_id is not None:
            runtime.run.trace_order.done(line.session_id, turn)  # the session's next line may still go
        raise
    traced = TracedRequest(prompt, intended_s, line.line, line.session_id, turn)
    if line.session_id is not None and turn > 0:
        runtime.run.trace_order.wait(line.session_id, turn)
    delay_s = intended_s - time.perf_counter()
    if delay_s > 0:
        runtime.process.turns.due(time.time_ns() + int(delay_s * 1e9))  # the loop holds no poll past it
    if delay_s > _EARLY_S:
        gevent.sleep(delay_s - _EARLY_S)
    left_s = intended_s - time.perf_counter()
    if left_s > 0:
        gevent.sleep(left_s)  # never before it is due
    return traced


def finish_trace_line(runtime: Runtime, traced: TracedRequest | None) -> None:
    """The trace line ``traced`` is over (answered, failed, skipped or cancelled): its session's next line may go."""
    if traced is not None and traced.session_id is not None:
        runtime.run.trace_order.done(traced.session_id, traced.turn)
