"""The ``load`` section of the results: closed or open loop, target vs achieved rate, schedule lag.

``SendFigures`` are the open-loop sends each process measured (combined over
processes on the master); ``load_section`` compares them with the schedule,
which too few users or ``--max-concurrency`` may fail to keep. Plain
functions: no Locust, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llmload.run.wire_reports import SendsWire
from llmload.settings.config import RunConfig

__all__ = ["RATE_TOLERANCE", "SendFigures", "load_section"]


RATE_TOLERANCE = 0.02
"""Open loop: a shortfall is a send rate below (1 - this) x the schedule with a lag above this x the span."""


@dataclass(frozen=True, slots=True)
class SendFigures:
    """One process's (or, summed, the run's) open-loop sends, as measured by the load generator.

    Attributes:
        scheduled_rate_per_s: the rate the sent requests were scheduled at, (n - 1)
            / (last - first intended send time) over the same requests as
            ``sent_rate_per_s`` (None before two sends, or in a closed loop).
        sent_rate_per_s: requests handed to the server per second, (n - 1) /
            (last send - first send) over every request sent, cancelled ones
            included; None before two sends.
        behind_s: when the run stopped, how long the next arrival nobody had
            taken yet was overdue (0: none was due); None when nothing more was
            to be sent (``--num-requests`` used up) or without a finite rate.
    """

    scheduled_rate_per_s: float | None = None
    sent_rate_per_s: float | None = None
    behind_s: float | None = None

    @classmethod
    def combine(cls, parts: Iterable[SendFigures]) -> SendFigures:
        """The run's figures from each process's: rates add up, the lag is the largest."""
        items = list(parts)

        def total(values: list[float | None]) -> float | None:
            known = [v for v in values if v is not None]
            return sum(known) if known else None

        behind = [p.behind_s for p in items if p.behind_s is not None]
        return cls(
            scheduled_rate_per_s=total([p.scheduled_rate_per_s for p in items]),
            sent_rate_per_s=total([p.sent_rate_per_s for p in items]),
            behind_s=max(behind) if behind else None,
        )

    def as_wire(self) -> SendsWire:
        """Plain values for a worker's report (``WorkerReport.sends``)."""
        return SendsWire(
            scheduled_rate_per_s=self.scheduled_rate_per_s, sent_rate_per_s=self.sent_rate_per_s, behind_s=self.behind_s
        )

    @classmethod
    def from_wire(cls, data: object) -> SendFigures:
        """Read ``as_wire``'s values back; anything else reads as unknown."""
        if not isinstance(data, dict):
            return cls()

        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, int | float) else None

        return cls(number("scheduled_rate_per_s"), number("sent_rate_per_s"), number("behind_s"))


def _trace_section(config: RunConfig, results: dict[str, Any], sends: SendFigures) -> dict[str, Any]:
    """A trace replay: its speed, the send rates, and the schedule lag (dispatch delay: sent − due)."""
    delay = results["latency"].get("dispatch_delay_s") or {}
    lags = [lag for lag in (delay.get("max"), sends.behind_s) if lag is not None]
    return {
        "mode": "trace",
        "trace": config.trace,
        "trace_speed": config.trace_speed,
        "achieved_rate_per_s": sends.sent_rate_per_s,
        "scheduled_rate_per_s": sends.scheduled_rate_per_s,
        "max_schedule_lag_s": max(lags) if lags else None,
        "mean_dispatch_delay_s": delay.get("mean"),
        "p99_dispatch_delay_s": delay.get("p99"),
        "rate_shortfall": False,
    }


def _in_flight_cap(config: RunConfig, results: dict[str, Any]) -> dict[str, Any]:
    """What bounded an unlimited rate: the most requests in flight (None when unknown) and ``"users"`` or
    ``"max_concurrency"`` (the lower of ``-u``, read from ``results["run"]["users"]``, and ``--max-concurrency``)."""
    users = (results.get("run") or {}).get("users") or None
    cap = config.max_concurrency
    if cap is not None and (users is None or cap < users):
        return {"in_flight_cap": cap, "in_flight_cap_by": "max_concurrency"}
    return {"in_flight_cap": users, "in_flight_cap_by": "users"}


def load_section(config: RunConfig, results: dict[str, Any], sends: SendFigures | None = None) -> dict[str, Any]:
    """Closed or open loop; for open loop the target vs achieved rate and the schedule lag.

    ``achieved_rate_per_s`` is the send rate: requests handed to the server,
    cancelled ones included, over the span of their sends (``sends``, summed
    over processes); without those figures, (finished - 1) / ``send_span_s``.
    ``scheduled_rate_per_s`` is the rate those same requests were scheduled
    at (a Poisson schedule of n arrivals deviates from the target by about
    1/sqrt(n)). ``max_schedule_lag_s`` is the largest dispatch delay, or how
    late the next unsent arrival was at the stop if that is larger.

    ``in_flight_cap`` and ``in_flight_cap_by`` only with ``--request-rate inf``:
    every request is eligible at once, so the users (``-u``, one request in
    flight each) or ``--max-concurrency``, whichever is lower, set the load.

    ``rate_shortfall`` (and ``warning``) only when the schedule really
    lagged: the achieved rate is below 98% of the schedule's *and* the lag
    exceeds 2% of the send span (a lag L at the end of a span S costs about
    L/S of the rate; a shorter one is noise of the last arrivals, not users
    that could not keep up).
    """
    rate = config.request_rate
    if config.trace is not None:
        return _trace_section(config, results, sends or SendFigures())
    if rate is None and config.max_concurrency is None:
        return {"mode": "closed"}
    sends = sends or SendFigures()
    requests = results["requests"]
    finished = requests["total"]
    span = results.get("send_span_s") or 0.0
    duration = results.get("duration_s") or 0.0
    achieved = sends.sent_rate_per_s
    if achieved is None and finished > 1 and span > 0:
        achieved = (finished - 1) / span
    elif achieved is None and duration > 0:
        achieved = finished / duration
    delay = results["latency"].get("dispatch_delay_s") or {}
    lags = [lag for lag in (delay.get("max"), sends.behind_s) if lag is not None]
    lag_s = max(lags) if lags else None
    scheduled = sends.scheduled_rate_per_s
    section: dict[str, Any] = {
        "mode": "open" if rate is not None else "closed",
        "target_rate_per_s": None if rate is None or math.isinf(rate) else rate,
        "unlimited_rate": rate is not None and math.isinf(rate),
        "arrival": config.arrival if rate is not None else None,
        "burstiness": config.burstiness if config.arrival == "gamma" else None,
        "max_concurrency": config.max_concurrency,
        "achieved_rate_per_s": achieved,
        "scheduled_rate_per_s": scheduled,
        "max_schedule_lag_s": lag_s,
        "mean_dispatch_delay_s": delay.get("mean"),
        "rate_shortfall": False,
    }
    if rate is not None and math.isinf(rate):
        section.update(_in_flight_cap(config, results))
    if rate is None or math.isinf(rate) or achieved is None:
        return section
    reference = scheduled if scheduled is not None else rate
    window_s = span or duration
    lagged = lag_s is not None and lag_s > RATE_TOLERANCE * window_s
    if achieved < (1 - RATE_TOLERANCE) * reference and lagged:
        section["rate_shortfall"] = True
        cause = " (--max-concurrency caps in-flight requests)" if config.max_concurrency else " (too few users)"
        section["warning"] = (
            f"target rate {rate:g} req/s not met: achieved {achieved:.2f} req/s{cause}, arrivals up to "
            f"{lag_s:.2f} s late; latency from the intended send time is in latency.e2e_from_schedule_s"
        )
    return section
