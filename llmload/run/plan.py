"""The master's run plan: each worker's share of the run (pure arithmetic, no Locust).

At each test start the master splits ``--num-requests``, ``--warmup-requests``,
``--request-rate`` and ``--max-concurrency`` over the workers it has, and
ships the ``RunPlan`` to them (``llmload.run.wire_plans.plan_to_wire``). A single
process plans for one worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

__all__ = ["RequestLimitNote", "RunPlan", "WorkerShare", "split_run", "users_per_worker", "users_short_of_workers"]


@dataclass(frozen=True, slots=True)
class WorkerShare:
    """One worker's part of the run.

    Attributes:
        rank: position among the planned workers (0-based); picks the
            worker's disjoint slice of the prompt stream.
        quota_requests: its share of ``--num-requests``; None = no limit.
        warmup_requests: its share of ``--warmup-requests``.
        rate_per_s: its share of ``--request-rate`` (requests/s; each worker
            follows its own schedule); None = closed loop.
        concurrency: its share of ``--max-concurrency`` (at least 1); None = no cap.
    """

    rank: int = 0
    quota_requests: int | None = None
    warmup_requests: int = 0
    rate_per_s: float | None = None
    concurrency: int | None = None


def _even_split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split_run(
    workers: int,
    *,
    num_requests: int | None,
    warmup_requests: int,
    request_rate: float | None,
    max_concurrency: int | None,
) -> tuple[WorkerShare, ...]:
    """Split the run's totals over ``workers`` workers, in rank order.

    Counts are split as evenly as integers allow, the first workers taking
    the remainder, so the shares add up to the totals exactly. The rate is
    split evenly. The concurrency cap is split the same way, but each worker
    gets at least 1 (more than ``max_concurrency`` in total when there are
    more workers than slots).

    Raises:
        ValueError: ``workers`` is negative, or a count is negative.
    """
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if (num_requests is not None and num_requests < 0) or warmup_requests < 0:
        raise ValueError(f"request counts must be >= 0, got {num_requests} and {warmup_requests}")
    quotas = _even_split(num_requests, workers) if num_requests is not None and workers else []
    warmups = _even_split(warmup_requests, workers) if workers else []
    caps = _even_split(max_concurrency, workers) if max_concurrency is not None and workers else []
    return tuple(
        WorkerShare(
            rank=i,
            quota_requests=quotas[i] if quotas else None,
            warmup_requests=warmups[i],
            rate_per_s=None if request_rate is None else request_rate / workers,
            concurrency=max(1, caps[i]) if caps else None,
        )
        for i in range(workers)
    )


def users_short_of_workers(users: int, workers: int, shared: tuple[str, ...]) -> str | None:
    """Why a run with ``users`` over ``workers`` cannot send its shares, or None when it can.

    ``shared`` names the options whose totals are split over the workers
    (``--num-requests``, ``--warmup-requests``, ``--request-rate``): Locust
    gives a worker no user when there are fewer users than workers, and that
    worker's share would never be sent (the run would end short, or never).
    """
    if not shared or workers <= 1 or users >= workers:
        return None
    return (
        f"{', '.join(shared)} {'is' if len(shared) == 1 else 'are'} shared by the {workers} workers, and each "
        f"needs at least one user to send its share; got {users} user(s). Set the number of users (-u) to "
        f"{workers} or more"
    )


def users_per_worker(users: int, workers: int) -> int:
    """Users each worker runs at most: ``users`` over ``workers``, rounded up."""
    return -(-users // max(workers, 1))


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What every worker needs to know before its users start.

    Attributes:
        run_id: identifies the run; reports of another run are dropped.
        model: the served model name (resolved by the master's preflight).
        url_authorization: ``Authorization`` value for ``user:password@`` in
            ``-H`` (workers get the host without it); None if none.
        proxy_note: the master's start-up line about its proxy choice (a
            worker whose own environment chose the same stays silent); None if none.
        blocked: why the run must not send load, or None.
        users_per_worker: most users one worker runs (for its open-files limit).
        workers: number of planned workers (the prompt stream's stride).
        limited: ``--num-requests`` was given (a worker left out of the plan gets quota 0).
        shares: each planned worker's share, by Locust worker index (as str).
        started_at_unix: the master's wall-clock run start (the run's one
            timeline; ``llmload.run.clock``); 0 = unknown (an older master).
        planned_after_s: seconds from the master's run start to building this
            plan, on the master's monotonic clock.
    """

    run_id: str = ""
    model: str | None = None
    url_authorization: str | None = None
    proxy_note: str | None = None
    blocked: str | None = None
    users_per_worker: int = 0
    workers: int = 0
    limited: bool = False
    shares: dict[str, WorkerShare] = field(default_factory=dict)
    started_at_unix: float = 0.0
    planned_after_s: float = 0.0

    def share_for(self, worker_index: str) -> WorkerShare:
        """This worker's share; a worker not in the plan sends nothing of a limited run."""
        share = self.shares.get(worker_index)
        if share is not None:
            return share
        return WorkerShare(quota_requests=0 if self.limited else None)


class RequestLimitNote(logging.Filter):
    """Rewrites Locust's "No run time limit set, use CTRL+C to interrupt" when ``--num-requests`` ends the run.

    Locust logs that line (logger ``locust.main``) for every headless run
    without ``-t``, although a ``--num-requests`` run ends on its own. A
    standard ``logging.Filter`` on that logger replaces its text; any other
    record passes unchanged (if Locust rewords the line, it is shown as is).
    """

    LOCUST_TEXT = "No run time limit set, use CTRL+C to interrupt"

    def __init__(self, num_requests: int) -> None:
        """Say that the run ends after ``num_requests`` requests."""
        super().__init__()
        self.text = (
            f"llmload: no -t time limit: the run ends when --num-requests {num_requests} requests have finished "
            "(Ctrl-C stops it earlier)"
        )

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the text of Locust's line; keep every record."""
        if record.msg == self.LOCUST_TEXT:
            record.msg, record.args = self.text, ()
        return True
