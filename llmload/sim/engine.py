"""The simulated continuous-batching engine: one greenlet runs steps on a clock.

Timing model (all knobs in ``SimConfig``):

- At most ``max_num_seqs`` sequences run at once; the others wait in a FIFO
  queue. At the start of each step the engine admits waiting sequences in
  order while a slot is free and the step's prompt-token budget
  (``max_num_batched_tokens``) lasts; a prompt longer than the budget is
  admitted alone.
- A step lasts ``decode_step_ms + decode_ms_per_seq * running`` plus, for each
  sequence admitted in it, ``prefill_base_ms + prefill_ms_per_token *
  prompt_tokens`` (chunked prefill: prefills ride along with the decode step).
- At the end of a step every running sequence, the ones admitted in it
  included, gets one token. A sequence that reached its planned length leaves
  the batch and frees its slot.
- Steps follow an absolute schedule. If the process falls more than one step
  behind (CPU saturated), the schedule restarts from now: the simulated engine
  then slows down, as an overloaded real one does, instead of bursting. With
  ``max_catch_up_steps`` N > 1 a late step instead makes up to N − 1 missed
  steps at once (every running sequence gets that many more tokens), so the
  token rate follows the schedule while the process can still write.

The engine never writes to a socket and never waits for a writer: it only
counts tokens and wakes the writer's greenlet through the hub. A slow client
therefore delays no one; its tokens pile up and are written together.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import Event
from gevent.hub import Waiter, get_hub

from llmload.sim.config import SimConfig

__all__ = ["Engine", "Sequence"]

_TIMER_LATENESS_S = 0.001
"""How late a gevent (libev/epoll) timer typically fires: epoll waits in whole
milliseconds and libev adds its minimum wait, so ``sleep(t)`` returns after
about ``t + 1.1 ms``. The step loop asks for that much less."""
_EARLY_WAKE_OK_S = 0.0003
"""A step may end this much before its deadline rather than sleep again (each
further sleep would overshoot by another millisecond)."""


@dataclass(eq=False, slots=True)
class Sequence:
    """One request's progress through the engine.

    Attributes:
        prompt_tokens: prefill size.
        target_tokens: planned reply length; the sequence is done when reached.
        wake_per_token: wake the writer after every token (streams), or only
            when done (whole replies).
        cached_tokens: leading prompt tokens found in the prefix cache; only
            the others are prefilled (cost and step budget).
        generated: tokens produced so far.
        done: all ``target_tokens`` produced.
    """

    prompt_tokens: int
    target_tokens: int
    wake_per_token: bool
    generated: int = 0
    cached_tokens: int = 0
    done: bool = False
    _waiter: Any = field(default=None, repr=False)


class Engine:
    """Continuous-batching step loop shared by all requests of one server.

    Args:
        config: step cost and batch limits.
        clock: monotonic seconds; step deadlines are computed on it.
    """

    def __init__(self, config: SimConfig, clock: Callable[[], float] = time.perf_counter) -> None:
        self._config = config
        self._clock = clock
        self._waiting: deque[Sequence] = deque()
        self._running: dict[Sequence, None] = {}
        self._arrived = Event()
        self._greenlet: gevent.Greenlet | None = None
        self.steps = 0
        """Steps run so far."""

    @property
    def running(self) -> int:
        """Sequences in the batch now."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Sequences queued for a slot now."""
        return len(self._waiting)

    def start(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        """Start the step loop in its own greenlet.

        Args:
            on_failure: called (in the hub) with the exception if the loop dies
                of a bug, so that the server can stop instead of hanging.
        """
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)
            if on_failure is not None:
                self._greenlet.link_exception(lambda g: on_failure(g.exception))

    def stop(self) -> None:
        """Stop the step loop; sequences still queued or running never finish."""
        if self._greenlet is not None:
            self._greenlet.kill()
            self._greenlet = None

    def submit(self, seq: Sequence) -> None:
        """Queue ``seq``; it is admitted at the start of a coming step."""
        self._waiting.append(seq)
        self._arrived.set()

    def abort(self, seq: Sequence) -> None:
        """Remove ``seq`` wherever it is (its client went away), freeing its slot at once."""
        if seq in self._running:
            del self._running[seq]
            return
        with contextlib.suppress(ValueError):  # not waiting either: already finished
            self._waiting.remove(seq)

    def wait_for_tokens(self, seq: Sequence, seen: int) -> None:
        """Block the calling greenlet until ``seq`` has more than ``seen`` tokens or is done.

        Streams are woken after every step that gave them a token; whole
        replies only when done. Must not be called from the hub.
        """
        if seq.generated > seen or seq.done:
            return
        waiter = Waiter()
        seq._waiter = waiter
        try:
            waiter.get()
        finally:
            seq._waiter = None

    def _admit(self) -> float:
        """Move waiting sequences into the batch; return their prefill cost in ms."""
        cfg = self._config
        budget = cfg.max_num_batched_tokens
        prefill_ms = 0.0
        admitted = 0
        while self._waiting and len(self._running) < cfg.max_num_seqs:
            head = self._waiting[0]
            prompt = head.prompt_tokens - head.cached_tokens
            if admitted and prompt > budget:
                break
            self._running[self._waiting.popleft()] = None
            budget -= prompt
            admitted += 1
            prefill_ms += cfg.prefill_base_ms + cfg.prefill_ms_per_token * prompt
        return prefill_ms

    def _emit(self, tokens: int = 1) -> None:
        """Give every running sequence ``tokens`` tokens (fewer at its end), wake writers, drop finished ones."""
        run_callback = get_hub().loop.run_callback
        finished: list[Sequence] = []
        for seq in self._running:
            seq.generated = min(seq.generated + tokens, seq.target_tokens)
            if seq.generated >= seq.target_tokens:
                seq.done = True
                finished.append(seq)
            waiter = seq._waiter
            if waiter is not None and (seq.wake_per_token or seq.done):
                seq._waiter = None
                run_callback(waiter.switch, None)
        for seq in finished:
            del self._running[seq]

    def _run(self) -> None:
        cfg = self._config
        clock = self._clock
        next_start = clock()
        while True:
            if not self._running and not self._waiting:
                self._arrived.clear()
                self._arrived.wait()
                next_start = clock()
                continue
            step_ms = self._admit()
            step_ms += cfg.decode_step_ms + cfg.decode_ms_per_seq * len(self._running)
            step_s = step_ms / 1000.0
            deadline = next_start + step_s
            while (remaining := deadline - clock()) > _EARLY_WAKE_OK_S:
                gevent.sleep(max(remaining - _TIMER_LATENESS_S, 0.0))
            late_s = clock() - deadline
            steps = 1
            if late_s > step_s and cfg.max_catch_up_steps > 1 and step_s > 0:
                steps = min(cfg.max_catch_up_steps, 1 + int(late_s / step_s))
            self._emit(steps)
            self.steps += steps
            now = clock()
            deadline += (steps - 1) * step_s
            next_start = deadline if now - deadline <= step_s else now
