"""Per-process run state shared by the Locust users and the event hooks.

One ``Runtime`` lives on each Locust environment (``environment.llmload``),
created by ``hooks.install`` when Locust fires ``init``; nothing is created at
import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gevent.event

from llmload.config import RunConfig
from llmload.stats import LLMStats
from llmload.tokens import TokenCounter

__all__ = ["RequestBudget", "Runtime"]


class RequestBudget:
    """Counts the requests this process may still send (``--num-requests`` share).

    ``limit`` None means unlimited. ``on_done`` is called once, when every
    permitted request has finished (succeeded or failed); requests cancelled at
    stop never call it.
    """

    def __init__(self, limit: int | None, on_done: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.issued = 0
        self.finished = 0
        self._on_done = on_done
        self._notified = False

    def try_acquire(self) -> bool:
        """Take one permit; False when the share is used up."""
        if self.limit is None or self.issued < self.limit:
            self.issued += 1
            return True
        self._maybe_notify()
        return False

    def release(self) -> None:
        """Mark one permitted request as finished."""
        self.finished += 1
        self._maybe_notify()

    @property
    def exhausted(self) -> bool:
        """True when no permit is left (never for an unlimited budget)."""
        return self.limit is not None and self.issued >= self.limit

    def _maybe_notify(self) -> None:
        if (
            not self._notified
            and self.limit is not None
            and self.finished >= self.limit
            and self._on_done is not None
        ):
            self._notified = True
            self._on_done()


@dataclass
class Runtime:
    """Mutable state of one Locust process for the current run.

    Attributes:
        config: validated options (rebuilt at every test start).
        stats: on a worker, the delta since the last report to the master; on
            the master or a standalone runner, the totals of the current run.
        budget: this process's share of ``--num-requests``.
        run_id: identifies the current run; worker payloads of another run are dropped.
        model: the served model name requests use (resolved by preflight).
        headers: request headers (the API key lives only here).
        token_counter: local tokenizer, used only when the server sends no usage.
        started_at_unix: wall-clock start of the current run.
        blocked: why the run must not send load (failed preflight), or None.
        idle: never set; users with nothing to send park on it until the runner stops them.
    """

    config: RunConfig
    stats: LLMStats = field(default_factory=LLMStats.empty)
    budget: RequestBudget = field(default_factory=lambda: RequestBudget(None))
    run_id: str = ""
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    token_counter: TokenCounter | None = None
    started_at_unix: float = 0.0
    blocked: str | None = None
    idle: gevent.event.Event = field(default_factory=gevent.event.Event)
    # master only
    planned_workers: set[str] = field(default_factory=set)
    done_workers: set[str] = field(default_factory=set)
    pending_finals: set[str] = field(default_factory=set)
    finals_in: gevent.event.Event = field(default_factory=gevent.event.Event)
    lost_workers: list[str] = field(default_factory=list)
    results: dict[str, object] | None = None

    def take_delta(self) -> LLMStats:
        """Return the statistics gathered since the last call and start a new delta (workers)."""
        delta, self.stats = self.stats, LLMStats.empty()
        return delta
