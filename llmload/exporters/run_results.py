"""The whole results document of a run: statistics plus the run-level facts, load section and verdict.

``assemble_results`` is what the master (or the single process) writes with
``--results-json`` and prints as the summary; tests build every mode of the
document through it (closed and open loop, blocked, failed). Plain
functions: no Locust, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmload.config import RunConfig
from llmload.exporters.report import RunInfo, build_results
from llmload.exporters.run_summary import SendFigures, judge, load_section
from llmload.servermetrics import server_section
from llmload.stats import LLMStats

__all__ = ["CPU_SATURATION_S", "RunFacts", "assemble_results"]

CPU_SATURATION_S = 5.0
"""Seconds of CPU above 90% in a row after which a load-generating process counts as saturated."""


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the run knows beyond its request statistics.

    Attributes:
        blocked: why no load was sent (preflight or options, web UI), or None.
        lost_workers: ids of workers lost mid-run.
        cpu_saturated_s: longest CPU saturation streak of any load-generating process (s).
        sends: the open-loop send figures, combined over processes.
        server: the inference server's metrics over the run (``servermetrics.summarise``), or None.
    """

    blocked: str | None = None
    lost_workers: Sequence[str] = ()
    cpu_saturated_s: float = 0.0
    sends: SendFigures = field(default_factory=SendFigures)
    server: Mapping[str, Any] | None = None


def assemble_results(stats: LLMStats, *, run: RunInfo, config: RunConfig, facts: RunFacts) -> dict[str, Any]:
    """Build the results document (README "Results file") from the final statistics.

    Adds to ``report.build_results``: ``lost_workers`` (only when some were
    lost), ``blocked`` (only when no load was sent), ``client_saturated`` and
    ``client_cpu_saturated_s``, ``load``, ``server`` (with its cross-check), ``passed``, ``max_failure_ratio``,
    ``exit_status`` and ``verdict`` (``run_summary.judge``).
    """
    results = build_results(stats, run=run, slo=config.slo)
    if facts.lost_workers:
        results["lost_workers"] = list(facts.lost_workers)
    if facts.blocked:
        results["blocked"] = facts.blocked
    results["client_saturated"] = facts.cpu_saturated_s >= CPU_SATURATION_S or results["client"]["read_lag_saturated"]
    results["client_cpu_saturated_s"] = facts.cpu_saturated_s
    results["load"] = load_section(config, results, facts.sends)
    results["server"] = server_section(facts.server, results)
    results["max_failure_ratio"] = config.max_failure_ratio
    verdict = judge(results)
    results["passed"] = verdict.passed
    results["exit_status"] = verdict.exit_status
    results["verdict"] = verdict.text
    return results
