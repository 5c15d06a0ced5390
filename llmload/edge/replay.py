"""Trace replay in a user: take this process's next trace line and sleep until it is due.

The schedule is absolute (``Runtime.trace_start_s`` plus the line's scaled
offset), so a late wake-up never shifts later lines; a line that finds every
user busy is sent late by the next free user, and the wait is its dispatch
delay (the schedule lag), as for ``--request-rate``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gevent

from llmload.edge.runtime import Runtime
from llmload.workload.prompts import Prompt

__all__ = ["TracedRequest", "take_trace_line"]


@dataclass(frozen=True, slots=True)
class TracedRequest:
    """One trace line ready to send.

    Attributes:
        prompt: what to send.
        intended_s: when it is due (``time.perf_counter`` seconds).
        line: its line number in the trace file.
        session_id: the line's ``session_id`` (jsonl traces), or None.
    """

    prompt: Prompt
    intended_s: float
    line: int
    session_id: str | None = None


def take_trace_line(runtime: Runtime) -> TracedRequest | None:
    """Take the next line of this process's trace share, sleep until it is due; None when none is left.

    Raises:
        DatasetError: the line's prompt cannot be built (an exact length is unreachable).
    """
    cursor, workload = runtime.trace, runtime.workload
    if cursor is None or workload is None:
        return None
    taken = cursor.take()
    if taken is None:
        return None
    line, offset_s = taken
    if runtime.trace_start_s == 0.0:
        runtime.trace_start_s = time.perf_counter()  # after a warm-up: the replay starts with the load
    intended_s = runtime.trace_start_s + offset_s
    prompt = workload.trace_prompt(line)  # built before the sleep, so the send is on time
    delay_s = intended_s - time.perf_counter()
    if delay_s > 0:
        gevent.sleep(delay_s)
    return TracedRequest(prompt, intended_s, line.line, line.session_id)
