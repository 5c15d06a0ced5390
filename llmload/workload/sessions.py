"""Sessions: one user's multi-turn conversation as a unit (``--turns``, ``--think-time``, ``--session-header``).

A ``Session`` counts its turns and knows its id (the ``--session-header``
value: unique per session, across workers and runs) and when it started.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from llmload.request.record import RequestRecord

__all__ = ["Session"]


@dataclass
class Session:
    """One conversation of ``turns`` turns in progress.

    Attributes:
        turns: turns planned.
        id: the session's ``--session-header`` value (a random UUID hex).
        started_s: ``time.perf_counter`` of its first send; 0.0 before it.
        done_turns: turns that succeeded so far.
    """

    turns: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_s: float = 0.0
    done_turns: int = 0

    @property
    def next_turn(self) -> int:
        """The number of the turn about to be sent (1 = first)."""
        return self.done_turns + 1

    def restart(self) -> None:
        """Begin a new session: a new id, no turn done."""
        self.id = uuid.uuid4().hex
        self.started_s = 0.0
        self.done_turns = 0

    def account(self, record: RequestRecord, sent_s: float, now_s: float) -> bool:
        """Mark ``record`` with its turn; on the session's last or a failed turn, with the session's end.

        Args:
            record: the turn's record, before it is counted.
            sent_s: when the turn was sent (``time.perf_counter``); the first turn's starts the session.
            now_s: now (the turn has ended).

        Returns:
            True when the session ended (it is restarted for the next one).
        """
        if self.started_s == 0.0:
            self.started_s = sent_s
        record.turn = self.next_turn
        if record.ok:
            self.done_turns += 1
        if record.ok and self.done_turns < self.turns:
            return False
        record.session_turns = self.done_turns
        record.session_duration_s = now_s - self.started_s
        record.session_failed = not record.ok
        self.restart()
        return True
