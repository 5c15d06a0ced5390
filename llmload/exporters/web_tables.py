"""The rows of llmload's tabs in Locust's web UI, from the statistics the summary is built from.

Locust renders an extended tab as one table of text cells (``extended_tabs``,
``extended_tables``, rows in ``extended_stats``), so each tab here is a
table: ``endpoint_rows`` (one row per endpoint/model and the total, with the
summary's figures) and ``run_rows`` (the run's state, its verdict once it
ended, failures by category, where the rest is). Durations are shown in
milliseconds, unknown figures as ``"n/a"``.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

from llmload.aggregate.stats import EndpointStats, LLMStats
from llmload.exporters.sections import latency_section, stats_sections
from llmload.settings.goodput import SLO

__all__ = [
    "ENDPOINT_COLUMNS",
    "RESET_IN_WEB_UI",
    "RUN_COLUMNS",
    "RunFacts",
    "endpoint_rows",
    "reachable_url",
    "reset_note",
    "run_rows",
]

ENDPOINT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("endpoint", "Endpoint"),
    ("model", "Model"),
    ("succeeded", "Succeeded"),
    ("failed", "Failed"),
    ("cancelled", "Cancelled"),
    ("requests_per_s", "Req/s"),
    ("output_tokens_per_s", "Output tok/s"),
    ("total_tokens_per_s", "Total tok/s"),
    ("input_tokens_per_s", "Input tok/s"),
    ("inputs_per_s", "Inputs/s"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("itl_p99_ms", "ITL p99 (ms)"),
    ("tpot_p50_ms", "TPOT p50 (ms)"),
    ("e2e_p50_ms", "E2E p50 (ms)"),
    ("e2e_p99_ms", "E2E p99 (ms)"),
    ("prompt_tokens", "Prompt tokens"),
    ("completion_tokens", "Completion tokens"),
)
"""(key, title) of the LLM tab's columns, in order."""

RUN_COLUMNS: tuple[tuple[str, str], ...] = (("item", "Item"), ("value", "Value"))
"""(key, title) of the LLM run tab's columns."""

_NA = "n/a"

_ANY_ADDRESS = ("0.0.0.0", "::", "")


def reachable_url(url: str, page_host: str) -> str:
    """``url`` with a bind-everything host (``0.0.0.0``, ``::``) replaced by the host the page was opened on.

    The exporter listening on every interface is reached at any of the machine's addresses; a link to
    ``http://0.0.0.0:9646/metrics`` opens nothing from another machine. ``page_host`` is the web UI
    request's ``Host`` (``name`` or ``name:port``); the url's own port and path are kept.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in _ANY_ADDRESS or not page_host:
        return url
    host = urllib.parse.urlsplit(f"//{page_host}").hostname or ""
    if not host:
        return url
    shown = f"[{host}]" if ":" in host else host
    netloc = f"{shown}:{parts.port}" if parts.port is not None else shown
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the run tab says beyond the statistics.

    Attributes:
        state: Locust's runner state (``ready``, ``running``, ``stopped``, ...).
        run_id: llmload's run id; "" before the first run.
        in_flight_requests: requests sent and not finished (master: as last reported by the workers).
        reset_at: when RESET last cleared the statistics (text), or None.
        results: the run's results document once it ended, else None.
        metrics_url: the Prometheus exporter's URL, or None when it is off.
        ending: the run is stopping or stopped and its results are not built yet.
    """

    state: str
    run_id: str = ""
    in_flight_requests: int = 0
    reset_at: str | None = None
    results: dict[str, Any] | None = None
    metrics_url: str | None = None
    ending: bool = False


def _ms(value_s: float | None) -> str:
    return _NA if value_s is None else f"{value_s * 1000:.1f}"


def _rate(value: float | None) -> str:
    return _NA if value is None else f"{value:.2f}"


def _row(
    endpoint: str, model: str, s: EndpointStats, slo: SLO | None, timed: EndpointStats | None = None
) -> dict[str, str]:
    """One table row of ``s``; its latency columns of ``timed`` when given (``LLMStats.latency_total``)."""
    sections = stats_sections(s, slo)
    throughput, tokens = sections["throughput"], sections["tokens"]
    latency = sections["latency"] if timed is None else latency_section(timed)
    return {
        "endpoint": endpoint,
        "model": model,
        "succeeded": str(s.succeeded),
        "failed": str(s.failed),
        "cancelled": str(s.cancelled),
        "requests_per_s": _rate(throughput["requests_per_s"]),
        "output_tokens_per_s": _rate(throughput["output_tokens_per_s"]),
        "total_tokens_per_s": _rate(throughput["total_tokens_per_s"]),
        "input_tokens_per_s": _rate(throughput["input_tokens_per_s"]),
        "inputs_per_s": _rate(throughput["inputs_per_s"]),  # embeddings: inputs embedded per second
        "ttft_p50_ms": _ms(latency["ttft_s"]["p50"]),
        "ttft_p99_ms": _ms(latency["ttft_s"]["p99"]),
        "itl_p99_ms": _ms(latency["itl_s"]["p99"]),
        "tpot_p50_ms": _ms(latency["tpot_s"]["p50"]),
        "e2e_p50_ms": _ms(latency["e2e_s"]["p50"]),
        "e2e_p99_ms": _ms(latency["e2e_s"]["p99"]),
        "prompt_tokens": _NA if tokens["prompt"] is None else str(tokens["prompt"]),
        "completion_tokens": _NA if tokens["completion"] is None else str(tokens["completion"]),
    }


def endpoint_rows(stats: LLMStats, slo: SLO | None = None) -> list[dict[str, str]]:
    """One row per (endpoint, model), then the total (``"Total"``) when there are several.

    The total's latency columns are over ``LLMStats.latency_keys``; when they leave
    endpoints out (embeddings beside generation requests), its model cell says so.
    """
    rows = [_row(endpoint, model, s, slo) for (endpoint, model), s in stats.items()]
    if len(rows) != 1:
        keys = stats.latency_keys()
        timed = {endpoint for endpoint, _model in keys}
        note = "" if keys == stats.keys() else "latency: " + ", ".join(sorted(timed))
        rows.append(_row("Total", note, stats.total(), slo, stats.latency_total()))
    return rows


def run_rows(stats: LLMStats, facts: RunFacts) -> list[dict[str, str]]:
    """The run tab: state, coverage, verdict (once ended), failures by category, where the rest is."""
    rows = [("State", facts.state)]
    if facts.run_id:
        rows.append(("Run id", facts.run_id))
    rows.append(("In-flight requests", str(facts.in_flight_requests)))
    rows.append(
        (
            "Statistics cover",
            f"requests finished since RESET at {facts.reset_at}" if facts.reset_at else "the whole run",
        )
    )
    if facts.results is not None:
        rows.append(("Verdict", str(facts.results.get("verdict", ""))))
        rows.append(("Exit status", str(facts.results.get("exit_status", ""))))
    elif facts.ending:
        # Locust's page stops polling once the state is "stopped", which can come just before the results.
        rows.append(("Verdict", "pending: the final reports are being collected; reload the page to see it"))
    total = stats.total()
    for category, group in sorted(total.errors.items(), key=lambda item: (-item[1].count, item[0])):
        sample = group.samples[0] if group.samples else ""
        rows.append((f"Failures: {category}", f"{group.count} (e.g. {sample})" if sample else str(group.count)))
    if facts.metrics_url:
        rows.append(("Prometheus", facts.metrics_url))
    rows.append(("Downloads", "Download Data tab: llmload results JSON and summary"))
    return [{"item": item, "value": value} for item, value in rows]


RESET_IN_WEB_UI = "RESET in the web UI"
"""The cause ``llmload.edge.web.form.on_reset_stats`` names by default (Locust's ``reset_stats`` event)."""


def reset_note(cause: str, *, server_metrics: bool) -> str:
    """The log line of a statistics reset: what was reset and what was kept, in plain words.

    ``cause``: what reset them (``RESET_IN_WEB_UI``, or ``--reset-stats`` at the
    end of the ramp-up); ``server_metrics``: the server's metrics are scraped
    (their figures restart too).
    """
    cleared = "requests, latencies, tokens and failures of the summary and results, the time series, "
    cleared += "/metrics (its counters start again at 0, its live window empties), the checkpoint rows "
    cleared += "and the --abort-on windows"
    if server_metrics:
        cleared += ", and the server-metrics figures (read again from now)"
    return (
        f"llmload: {cause}: statistics reset. Reset: {cleared}. Kept: the run itself (users keep sending, "
        "and requests in flight now are counted when they finish), its options, run id and start; "
        "the summary and results now cover the requests that finish from now on"
    )
