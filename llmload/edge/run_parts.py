"""The parts a run's state is made of: request budget, warm-up gate, request cache, send window, CPU monitor.

``llmload.edge.runtime`` holds them (``RunState.budget``, ``RunState.warmup``,
``ProcessState.request_cache``, ``RunState.sends``, ``ProcessState.cpu``);
the users and ``llmload.edge.launch`` use them. Each is a small mutable
object of one process; the warm-up gate and the CPU monitor use gevent.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import gevent
import gevent.event

from llmload.request.payloads import LLMRequest
from llmload.settings.config import RunConfig
from llmload.workload.prompts import Prompt

__all__ = ["CpuMonitor", "RequestBudget", "RequestCache", "SendWindow", "WarmupGate"]


class RequestBudget:
    """Counts the requests this process may still send (``--num-requests`` share).

    ``limit`` None means unlimited. ``on_done`` is called once, when every
    permitted request has finished (succeeded or failed); requests cancelled at
    stop never call it. Once ``close``d (the run is over in this process) no
    permit is given any more.
    """

    def __init__(self, limit: int | None, on_done: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.issued = 0
        self.finished = 0
        self.closed = False
        self._on_done = on_done
        self._notified = False

    def close(self) -> None:
        """Give no permit from now on: this process's run is over (its final figures are being taken)."""
        self.closed = True

    def try_acquire(self) -> bool:
        """Take one permit; False when the share is used up or the budget is closed."""
        if self.closed:
            return False
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
        if not self._notified and self.limit is not None and self.finished >= self.limit and self._on_done is not None:
            self._notified = True
            self._on_done()


class RequestCache:
    """Requests already built in this process, by (endpoint, prompt), for the current config and model.

    Building a body (JSON encoding of the prompt) costs ~20 us; a fixed prompt
    or a small dataset repeats the same bodies, so each is built once. Bodies
    of at most ``limit_bytes`` in all are kept (a large dataset or long
    conversations are mostly built afresh).
    """

    def __init__(self, limit_bytes: int = 1 << 20) -> None:
        """An empty cache holding bodies of at most ``limit_bytes`` bytes in all."""
        self.limit_bytes = limit_bytes
        self.kept_bytes = 0
        self.config: RunConfig | None = None
        self.model: str | None = None
        self.requests: dict[tuple[str, Prompt], LLMRequest] = {}

    def reset(self, config: RunConfig, model: str | None) -> None:
        """Forget every request: they were built for another config or model."""
        self.config, self.model = config, model
        self.requests = {}
        self.kept_bytes = 0

    def keep(self, key: tuple[str, Prompt], request: LLMRequest) -> None:
        """Keep ``request`` under ``key`` unless that would pass ``limit_bytes``."""
        size = len(request.body)
        if self.kept_bytes + size <= self.limit_bytes:
            self.requests[key] = request
            self.kept_bytes += size


class WarmupGate:
    """This process's share of ``--warmup-requests``: sent first, left out of every statistic.

    A user takes a permit with ``try_acquire`` and sends a warm-up request;
    once every permit is taken, users ``wait`` until all warm-up requests have
    finished, so measured requests never overlap warm-up ones. Warm-up
    requests do not count against ``--num-requests``.
    """

    def __init__(self, count: int) -> None:
        """``count`` >= 0 warm-up requests for this process."""
        self.remaining = count
        self.in_flight = 0
        self.sent = 0
        self.failed = 0
        self._finished = gevent.event.Event()
        if count <= 0:
            self._finished.set()

    @property
    def done(self) -> bool:
        """True when every warm-up request has finished (always for a count of 0)."""
        return bool(self._finished.is_set())

    def try_acquire(self) -> bool:
        """Take one warm-up permit; False when none is left."""
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        self.in_flight += 1
        self.sent += 1
        return True

    def release(self, *, ok: bool = True) -> None:
        """Mark one warm-up request as finished (``ok`` False: it failed or was cancelled)."""
        self.in_flight -= 1
        if not ok:
            self.failed += 1
        if self.remaining <= 0 and self.in_flight <= 0:
            self._finished.set()

    def wait(self) -> None:
        """Block this greenlet until every warm-up request has finished."""
        self._finished.wait()


@dataclass
class SendWindow:
    """The requests this process handed to the server in the current run: how many, when, and when they were due.

    Every request counts once it is sent, whether it then succeeds, fails or is
    cancelled at the stop, so the send rate divides the requests sent in a
    window by that same window. For an open loop the intended (scheduled) send
    times of the same requests give the rate they were scheduled at, so both
    rates cover the same requests (``time.perf_counter`` seconds).
    """

    count: int = 0
    first_s: float = math.inf
    last_s: float = -math.inf
    first_due_s: float = math.inf
    last_due_s: float = -math.inf

    def note(self, at_s: float, due_s: float | None = None) -> None:
        """Count one request sent at ``at_s`` (scheduled for ``due_s`` in an open loop)."""
        self.count += 1
        self.first_s = min(self.first_s, at_s)
        self.last_s = max(self.last_s, at_s)
        if due_s is not None:
            self.first_due_s = min(self.first_due_s, due_s)
            self.last_due_s = max(self.last_due_s, due_s)

    @property
    def rate_per_s(self) -> float | None:
        """(count - 1) / (last - first send), like an arrival schedule's own rate; None before two sends."""
        return _rate(self.count, self.last_s - self.first_s)

    @property
    def scheduled_rate_per_s(self) -> float | None:
        """(count - 1) / (last - first due time) of the same requests; None without a schedule."""
        return _rate(self.count, self.last_due_s - self.first_due_s)


def _rate(count: int, span_s: float) -> float | None:
    if count < 2 or not 0 < span_s < math.inf:
        return None
    return (count - 1) / span_s


class CpuMonitor:
    """Samples this process's CPU every ``interval_s`` and keeps its longest saturation streak.

    Latencies measured by a saturated client are the client's, not the server's.
    ``saturated_s`` is the longest run of consecutive samples above
    ``threshold_percent`` (in seconds); whether that makes the run saturated
    is ``llmload.exporters.sections.client_saturated``'s rule. ``sample``
    returns CPU percent since its last call (default: psutil for this process).
    """

    def __init__(
        self,
        threshold_percent: float = 90.0,
        interval_s: float = 1.0,
        sample: Callable[[], float] | None = None,
    ) -> None:
        if sample is None:
            import psutil

            process = psutil.Process()
            process.cpu_percent(None)
            sample = functools.partial(process.cpu_percent, None)
        self.threshold_percent = threshold_percent
        self.interval_s = interval_s
        self.saturated_s = 0.0
        self.max_percent = 0.0
        self._sample = sample
        self._streak_s = 0.0
        self._greenlet: gevent.Greenlet[[], None] | None = None

    def start(self) -> None:
        """Start sampling in a greenlet (resets the figures)."""
        self.stop()
        self.saturated_s = 0.0
        self.max_percent = 0.0
        self._streak_s = 0.0
        self._sample()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """Stop sampling."""
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            self.observe(self._sample())

    def observe(self, percent: float) -> None:
        """Account one sample (called by the sampling greenlet)."""
        self.max_percent = max(self.max_percent, percent)
        self._streak_s = self._streak_s + self.interval_s if percent > self.threshold_percent else 0.0
        self.saturated_s = max(self.saturated_s, self._streak_s)
