"""Run-level parts of the results file and the console summary, built from the run's options.

``load`` (closed or open loop; target, scheduled and achieved rate, schedule
lag: BC-20, BC-23), the recorded options (never the API key), and the notes
printed under the summary table. Plain functions: no Locust, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from llmload.config import LengthSpec, RunConfig
from llmload.exporters.report import format_summary
from llmload.servermetrics import server_lines

__all__ = [
    "RATE_TOLERANCE",
    "SendFigures",
    "Verdict",
    "judge",
    "load_section",
    "public_options",
    "summary_lines",
    "workload_options",
]


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

    def as_wire(self) -> dict[str, float | None]:
        """Plain values for a worker's report."""
        return asdict(self)

    @classmethod
    def from_wire(cls, data: object) -> SendFigures:
        """Read ``as_wire``'s values back; anything else reads as unknown."""
        if not isinstance(data, dict):
            return cls()

        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, int | float) else None

        return cls(number("scheduled_rate_per_s"), number("sent_rate_per_s"), number("behind_s"))


def summary_lines(results: dict[str, Any]) -> list[str]:
    """The console summary: ``format_summary`` plus the run-level notes (lost workers, open-loop
    rates, client saturation) and the verdict line (blocked, passed or why not, with the exit status)."""
    lines = [format_summary(results)]
    if results.get("lost_workers"):
        lost = results["lost_workers"]
        lines.append(f"WARNING: {len(lost)} worker(s) lost mid-run; their unreported requests are missing")
    load = results.get("load") or {}
    if load.get("mode") == "open":
        target = "inf" if load.get("unlimited_rate") else f"{load['target_rate_per_s']:g}"
        achieved = load.get("achieved_rate_per_s")
        delay = results["latency"].get("dispatch_delay_s") or {}
        e2e_sched = results["latency"].get("e2e_from_schedule_s") or {}
        lines.append("--- Open loop " + "-" * 38)
        lines.append(f"{'Target / achieved rate (req/s):':<40}{target} / {achieved or 0:.2f}")
        if delay.get("count"):
            lines.append(f"{'Dispatch delay mean / max (ms):':<40}{delay['mean'] * 1e3:.2f} / {delay['max'] * 1e3:.2f}")
        if e2e_sched.get("count"):
            lines.append(f"{'Mean E2E from intended send (ms):':<40}{e2e_sched['mean'] * 1e3:.2f}")
        if load.get("warning"):
            lines.append(f"WARNING: {load['warning']}")
    lines.extend(_client_lines(results))
    lines.extend(server_lines(results))
    if results.get("client_saturated") and (results.get("client_cpu_saturated_s") or 0) > 0:
        lines.append(
            f"WARNING: load generator saturated (CPU > 90% for {results['client_cpu_saturated_s']} s): "
            "latencies unreliable; add workers (--processes N)"
        )
    lines.append(results.get("verdict") or judge(results).text)
    return lines


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a run passed, as a process exit status and one line that says why.

    Attributes:
        exit_status: 0 passed; 1 ran but did not pass (nothing succeeded, or
            the failure ratio exceeded ``--max-failure-ratio``); 2 blocked
            before any load (bad options, preflight).
        text: a true statement of the comparison that decided it, e.g.
            ``"FAILED: all 12 requests failed; exit status 1"``.
    """

    exit_status: int
    text: str

    @property
    def passed(self) -> bool:
        """True for exit status 0."""
        return self.exit_status == 0


def judge(results: dict[str, Any]) -> Verdict:
    """The verdict on a results document (its ``requests``, ``blocked`` and ``max_failure_ratio``)."""
    if results.get("blocked"):
        return Verdict(2, f"BLOCKED before load: {results['blocked']}; no request was sent; exit status 2")
    requests = results["requests"]
    finished, failed, succeeded = requests["total"], requests["failed"], requests["succeeded"]
    limit = float(results.get("max_failure_ratio") or 0.0)
    if finished == 0:
        return Verdict(1, f"FAILED: no request finished ({requests['cancelled']} cancelled at the stop); exit status 1")
    if succeeded == 0:
        subject = "the only request" if finished == 1 else f"all {finished} requests"
        return Verdict(1, f"FAILED: {subject} failed; exit status 1")
    ratio = failed / finished
    shown, shown_limit = _percents(ratio, limit)
    if ratio > limit:
        return Verdict(
            1,
            f"FAILED: {failed}/{finished} requests failed (failure ratio {shown} > --max-failure-ratio "
            f"{shown_limit}); exit status 1",
        )
    return Verdict(
        0,
        f"PASSED: {succeeded}/{finished} requests succeeded (failure ratio {shown} <= --max-failure-ratio "
        f"{shown_limit}); exit status 0",
    )


def _percents(value: float, limit: float) -> tuple[str, str]:
    """Both ratios as percentages with just enough decimals that unequal values never print alike."""
    digits = 1
    while digits < 6 and value != limit and round(value * 100, digits) == round(limit * 100, digits):
        digits += 1
    return f"{value * 100:.{digits}f}%", f"{limit * 100:.{digits}f}%"


def _client_lines(results: dict[str, Any]) -> list[str]:
    """The client's clock and read lag, and a warning when the lag may have moved the latencies."""
    client = results.get("client") or {}
    lag = client.get("read_lag_s") or {}
    if not client.get("clock"):
        return []
    lines = ["--- Client " + "-" * 41]
    lines.append(f"{'Clock for arrival times:':<40}{client['clock']}")
    if lag.get("count"):
        lines.append(
            f"{'Read lag mean / P99 / max (ms):':<40}"
            f"{lag['mean'] * 1e3:.2f} / {lag['p99'] * 1e3:.2f} / {lag['max'] * 1e3:.2f}"
        )
    if client.get("read_lag_saturated"):
        lines.append(
            f"WARNING: latencies may include up to {lag['p99'] * 1e3:.1f} ms (P99; max {lag['max'] * 1e3:.1f} ms) "
            f"of client delay: replies waited that long before the client read them (limit "
            f"{client['read_lag_limit_s'] * 1e3:g} ms). Kernel stamps time each read when it arrived, but events "
            "that piled up behind a late read share the newest stamp. Give the client more CPU: more worker "
            "processes (--processes N) or machines, or fewer users per process"
        )
    return lines


def load_section(config: RunConfig, results: dict[str, Any], sends: SendFigures | None = None) -> dict[str, Any]:
    """Closed or open loop; for open loop the target vs achieved rate and the schedule lag (BC-20, BC-23).

    ``achieved_rate_per_s`` is the send rate: requests handed to the server,
    cancelled ones included, over the span of their sends (``sends``, summed
    over processes); without those figures, (finished - 1) / ``send_span_s``.
    ``scheduled_rate_per_s`` is the rate those same requests were scheduled
    at (a Poisson schedule of n arrivals deviates from the target by about
    1/sqrt(n)). ``max_schedule_lag_s`` is the largest dispatch delay, or how
    late the next unsent arrival was at the stop if that is larger.

    ``rate_shortfall`` (and ``warning``) only when the schedule really
    lagged: the achieved rate is below 98% of the schedule's *and* the lag
    exceeds 2% of the send span (a lag L at the end of a span S costs about
    L/S of the rate; a shorter one is noise of the last arrivals, not users
    that could not keep up).
    """
    rate = config.request_rate
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


def public_options(config: RunConfig) -> dict[str, Any]:
    """Options worth recording in results; the API key is never among them."""
    return {
        "model": config.model,
        "prompt_chars": len(config.prompt),
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "ignore_eos": config.ignore_eos,
        "stream": config.stream,
        "num_requests": config.num_requests,
        "tokenizer": config.tokenizer,
        "workload": workload_options(config),
        "slo": config.slo.as_dict() if config.slo is not None else None,
        "warmup_requests": config.warmup_requests,
        "timeouts_s": {
            "connect": config.timeouts.connect_s,
            "read_idle": config.timeouts.idle_s,
            "total": config.timeouts.total_s,
        },
    }


def workload_options(config: RunConfig) -> dict[str, Any]:
    """The prompt source and lengths; ``lengths_exact`` is False without a tokenizer."""

    def spec(length: LengthSpec | None) -> dict[str, Any] | None:
        return None if length is None else asdict(length)

    return {
        "dataset": config.dataset,
        "dataset_format": config.dataset_format,
        "input_tokens": spec(config.input_tokens),
        "output_tokens": "dataset" if config.output_from_dataset else spec(config.output_tokens),
        "prefix_tokens": config.prefix_tokens,
        "turns": config.turns,
        "seed": config.seed,
        "lengths_exact": config.tokenizer is not None,
    }
