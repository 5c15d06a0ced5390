"""Run-level parts of the results file and the console summary, built from the run's options.

``load`` (closed or open loop; target, scheduled and achieved rate, schedule
lag: BC-20, BC-23), the recorded options (never the API key), and the notes
printed under the summary table. Plain functions: no Locust, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from llmload.config import LengthSpec, RunConfig
from llmload.exporters.report import format_summary

__all__ = ["load_section", "public_options", "summary_lines", "workload_options"]


def summary_lines(results: dict[str, Any]) -> list[str]:
    """The console summary: ``format_summary`` plus the run-level notes (not run, lost workers,
    open-loop rates, client saturation, and why the run did not pass)."""
    lines = [format_summary(results)]
    if results.get("blocked"):
        lines.append(f"NOT RUN: {results['blocked']}")
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
    if results.get("client_saturated") and (results.get("client_cpu_saturated_s") or 0) > 0:
        lines.append(
            f"WARNING: load generator saturated (CPU > 90% for {results['client_cpu_saturated_s']} s): "
            "latencies unreliable; add workers (--processes N)"
        )
    requests = results["requests"]
    if not results.get("passed", True):
        lines.append(
            f"FAILED: {requests['failed']}/{requests['total']} requests failed "
            f"(failure ratio {requests.get('failure_ratio') or 0:.1%} > --max-failure-ratio "
            f"{results.get('max_failure_ratio', 0):.1%}) or nothing succeeded; exit status 1"
        )
    return lines


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
            "that piled up behind a late read share the newest stamp. Add workers or processes (--processes N)"
        )
    return lines


def load_section(config: RunConfig, results: dict[str, Any], scheduled: float | None) -> dict[str, Any]:
    """Closed or open loop; for open loop the target vs achieved rate and the schedule lag (BC-20, BC-23).

    ``achieved_rate_per_s`` is the send rate of finished requests, (n - 1) / (last send - first
    send) (``send_span_s``), so the time the last replies take does not count against it;
    ``scheduled_rate_per_s`` is the rate of the seeded schedules themselves (summed over
    workers; a Poisson schedule of n arrivals deviates from the target by about 1/sqrt(n));
    the shortfall warning compares achieved with scheduled, i.e. what the load generator
    failed to send on time. ``max_schedule_lag_s`` is the largest dispatch delay.
    """
    rate = config.request_rate
    if rate is None and config.max_concurrency is None:
        return {"mode": "closed"}
    finished = results["requests"]["total"]
    span = results.get("send_span_s") or 0.0
    duration = results.get("duration_s") or 0.0
    if finished > 1 and span > 0:
        achieved: float | None = (finished - 1) / span  # sends per second, like the schedule's own rate
    else:
        achieved = finished / duration if duration > 0 else None
    delay = results["latency"].get("dispatch_delay_s") or {}
    section: dict[str, Any] = {
        "mode": "open" if rate is not None else "closed",
        "target_rate_per_s": None if rate is None or math.isinf(rate) else rate,
        "unlimited_rate": rate is not None and math.isinf(rate),
        "arrival": config.arrival if rate is not None else None,
        "burstiness": config.burstiness if config.arrival == "gamma" else None,
        "max_concurrency": config.max_concurrency,
        "achieved_rate_per_s": achieved,
        "scheduled_rate_per_s": scheduled,
        "max_schedule_lag_s": delay.get("max"),
        "mean_dispatch_delay_s": delay.get("mean"),
        "rate_shortfall": False,
    }
    reference = scheduled if scheduled is not None else rate
    if rate is not None and not math.isinf(rate) and achieved is not None and achieved < 0.98 * (reference or rate):
        section["rate_shortfall"] = True
        cause = " (--max-concurrency caps in-flight requests)" if config.max_concurrency else " (too few users)"
        section["warning"] = (
            f"target rate {rate:g} req/s not met: achieved {achieved:.2f} req/s{cause}; "
            "latency from the intended send time is in latency.e2e_from_schedule_s"
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
