"""One timeline for a run on many machines: each worker's monotonic clock mapped onto the master's wall clock.

Durations and rates of a distributed run (``duration_s``, throughput,
``send_span_s``, the time series) must not depend on the machines' wall
clocks agreeing: a container without NTP can be minutes off. So a worker
never stamps a request with its own wall clock. The master's ``RunPlan``
carries the master's wall-clock run start (``started_at_unix``) and how long
after that start it built the plan (``planned_after_s``, on the master's
monotonic clock). When the plan arrives, the worker takes that instant as
its own run start on its monotonic clock (``time.perf_counter``) and from
then on stamps every send and end as::

    unix(t) = master_started_at_unix + planned_after_s + (t - arrival_s)

where ``t`` and ``arrival_s`` are its own ``perf_counter`` readings. The
master and a single process use the same rule with their own start, so every
stamp of a run lies on the master's wall-clock timeline.

Error bound of a worker's stamps on that timeline: they are late by the
delay ``d`` between the master building the plan and the worker's
``test_start`` (Locust's first ``spawn`` message: the rest of the master's
``test_start``, the ZeroMQ delivery, the worker's event loop; milliseconds
on a LAN, up to a second measured on a loaded two-core machine), plus the
rate error of the worker's monotonic clock times the time since its run
start (crystal error, at most ~100 ppm: 0.36 s an hour with no NTP at all;
with NTP the kernel slews it to well under 1 ppm). The wall clock's offset
never enters. Spans between two stamps of the same worker
carry only the rate error; spans across workers also the difference of their
``d``.

A worker's wall-clock offset (its ``time.time()`` minus the master's at the
same instant) is bracketed by messages both ways, as NTP does
(``OffsetEstimate``): the plan gives an upper bound (the worker's clock at
its arrival minus the master's when it was built: offset + ``d``), each
report a lower bound (the worker's clock when it took the report minus the
master's when it arrived: offset - that report's delivery). The estimate is
the middle of the tightest bracket and its error at most half the bracket's
width. The master puts the estimates in the results and warns once a
worker's offset is surely beyond ``CLOCK_OFFSET_WARN_S`` (the whole bracket
is past it), so a slow message on a busy machine never raises a false alarm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "CLOCK_OFFSET_WARN_S",
    "OffsetEstimate",
    "RunStart",
    "align_to_master",
    "note_worker_clock",
    "offset_warning",
]

CLOCK_OFFSET_WARN_S = 1.0
"""A worker whose wall clock is further than this from the master's (either way, s) gets a warning."""


@dataclass(frozen=True, slots=True)
class RunStart:
    """Where a process's run starts, on both of its clocks.

    Attributes:
        started_s: the run start on this process's ``time.perf_counter``.
        started_at_unix: the same instant on the run's timeline (the master's wall clock).
        clock_offset_s: this process's wall clock minus the master's, too
            large by at most the plan's delivery time (an upper bound, see
            the module docstring); None when not known.
    """

    started_s: float
    started_at_unix: float
    clock_offset_s: float | None = None

    def unix(self, at_s: float) -> float:
        """The run-timeline stamp (Unix seconds) of ``at_s``, a ``perf_counter`` reading of this process."""
        return self.started_at_unix + (at_s - self.started_s)


def align_to_master(
    master_started_at_unix: float, planned_after_s: float, *, now_s: float, now_unix: float
) -> RunStart:
    """A worker's run start, from the master's plan received at ``now_s`` (its ``perf_counter``) / ``now_unix``.

    The worker's zero is set ``planned_after_s`` before the plan's arrival,
    so its time-series intervals line up with the master's. An older master
    (``master_started_at_unix`` 0 or not finite) gives the worker's own wall
    clock and no offset.
    """
    if not (math.isfinite(master_started_at_unix) and master_started_at_unix > 0):
        return RunStart(started_s=now_s, started_at_unix=now_unix)
    lead_s = planned_after_s if math.isfinite(planned_after_s) and planned_after_s > 0 else 0.0
    return RunStart(
        started_s=now_s - lead_s,
        started_at_unix=master_started_at_unix,
        clock_offset_s=now_unix - (master_started_at_unix + lead_s),
    )


@dataclass(slots=True)
class OffsetEstimate:
    """The master's bracket of one worker's wall-clock offset (worker minus master, seconds).

    Attributes:
        upper_s: the tightest upper bound seen (from the plan: offset + its
            delivery time); None before one.
        lower_s: the tightest lower bound seen (from reports: offset - their
            delivery time); None before one.
    """

    upper_s: float | None = None
    lower_s: float | None = None

    def note_upper(self, bound_s: float) -> None:
        """Keep ``bound_s`` (offset + a delivery time) if it is the tightest upper bound."""
        if math.isfinite(bound_s) and (self.upper_s is None or bound_s < self.upper_s):
            self.upper_s = bound_s

    def note_report(self, worker_sent_unix: float, master_received_unix: float) -> None:
        """Keep the lower bound of a report the worker took at ``worker_sent_unix`` (its clock)."""
        bound_s = worker_sent_unix - master_received_unix
        if math.isfinite(bound_s) and (self.lower_s is None or bound_s > self.lower_s):
            self.lower_s = bound_s

    @property
    def offset_s(self) -> float | None:
        """The estimate: the bracket's middle, else the one bound known; None before any."""
        if self.upper_s is not None and self.lower_s is not None:
            return (self.upper_s + self.lower_s) / 2
        return self.upper_s if self.upper_s is not None else self.lower_s

    @property
    def error_s(self) -> float | None:
        """Half the bracket's width: the most the estimate can be off; None until both bounds are known.

        A worker whose wall clock was stepped during the run can leave the
        bounds crossed; the width is then taken as positive.
        """
        if self.upper_s is None or self.lower_s is None:
            return None
        return abs(self.upper_s - self.lower_s) / 2

    def surely_beyond(self, limit_s: float) -> bool:
        """True when the whole bracket lies more than ``limit_s`` from 0 (one side known: that side)."""
        return (self.lower_s is not None and self.lower_s > limit_s) or (
            self.upper_s is not None and self.upper_s < -limit_s
        )


def note_worker_clock(
    clocks: dict[str, OffsetEstimate],
    worker: str,
    *,
    upper_s: float | None,
    taken_at_unix: float | None,
    received_at_unix: float,
    limit_s: float = CLOCK_OFFSET_WARN_S,
) -> str | None:
    """Master: narrow ``worker``'s bracket in ``clocks`` with one of its reports.

    Args:
        clocks: the brackets per worker id (a worker's entry is made by its first report that has a bound).
        worker: the reporting worker's id.
        upper_s: the report's plan-based upper bound (``WorkerReport.clock_offset_s``); None: unknown.
        taken_at_unix: the worker's wall clock when it took the report; None: unknown.
        received_at_unix: the master's wall clock now.
        limit_s: the warning bound.

    Returns:
        The warning to log when this report made the bracket surely beyond
        ``limit_s`` (once per worker), else None.
    """
    if upper_s is None and taken_at_unix is None:
        return None  # an older worker
    clock = clocks.get(worker)
    if clock is None:
        clock = clocks[worker] = OffsetEstimate()
    was_beyond = clock.surely_beyond(limit_s)
    if upper_s is not None:
        clock.note_upper(upper_s)
    if taken_at_unix is not None:
        clock.note_report(taken_at_unix, received_at_unix)
    if was_beyond or not clock.surely_beyond(limit_s):
        return None
    return offset_warning(worker, clock.offset_s, limit_s)


def offset_warning(worker: str, offset_s: float | None, limit_s: float = CLOCK_OFFSET_WARN_S) -> str | None:
    """The master's warning for ``worker``'s clock offset beyond ``limit_s`` (either way), or None."""
    if offset_s is None or abs(offset_s) <= limit_s:
        return None
    way = "ahead of" if offset_s > 0 else "behind"
    return (
        f"worker {worker}'s wall clock is {abs(offset_s):.3g} s {way} the master's (more than {limit_s:g} s); "
        "durations, rates and the time series use the master's timeline and are not affected, but its log "
        "timestamps are off: run NTP (e.g. chrony) on that machine"
    )
