"""The results document: every key of the end-of-run JSON, built from one ``RunOutcome``.

``build_results`` is what the master (or the single process) writes with
``--results-json`` (``write_results_json``) and what every end-of-run output
reads: the console summary (``llmload.exporters.console``) renders this
document only, never the statistics, so a file read back prints the same.
The statistics sections come from ``llmload.exporters.sections``, the
``load`` section from ``llmload.exporters.load``; the run-level keys and the
verdict (``judge``, which decides the exit status) are decided here.

Metric definitions (times in seconds in JSON, milliseconds in the console):

- ``requests.total``: finished requests = succeeded + failed. Cancelled
  requests (in flight at stop) are reported apart and excluded from
  everything else. ``EMPTY`` replies are failures (as vLLM does).
  ``requests.skipped``: requests the client could not build, send or measure;
  not in the total, their causes in ``errors``; with ``--num-requests N``,
  total + cancelled + skipped = N. 429 replies, and 503 replies with
  ``Retry-After`` or a rate-limit body, are ``throttled`` failures.
- ``duration_s``: last end - first send over finished requests, across all
  workers, on the run's one timeline (each worker's monotonic clock mapped
  onto the master's wall clock, ``llmload.run.clock``; no worker's wall clock
  counts). This is vLLM ``benchmark_serving``'s ``duration`` measured on the
  requests themselves, so ramp-up idle time is excluded.
- ``throughput.requests_per_s``: succeeded / duration_s (vLLM
  ``request_throughput``). ``output_tokens_per_s``: completion tokens of
  successes / duration_s (vLLM ``output_throughput``). ``total_tokens_per_s``:
  (prompt + completion tokens) / duration_s (vLLM ``total_token_throughput``).
  ``streamed_output_tokens_per_s``: (completion − hidden reasoning tokens) / duration_s.
- ``latency``: over successes only (failures' partial timings are
  excluded). TTFT = send → first generated token of any kind; TTFC = send →
  first content token (guidellm's time to first output token); ITL = gaps
  between token events, never including TTFT; TPOT = (last - first token) /
  (streamed tokens - 1), streamed = completion minus reasoning tokens usage
  counts but the stream never carried (``RequestRecord.tpot_s``); E2E = send → end of reply (vLLM definitions).
  ``ttft_with_connect_s`` = connection set-up (``client.connect_s``) + TTFT,
  the timer of vLLM ``bench serve``, SGLang ``bench_serving`` and Locust,
  which start before connecting (compare with those tools on this one).
  Percentiles are nearest-rank estimates within 1% (see
  ``llmload.aggregate.histogram``); ``max`` is exact.
- ``goodput`` (with ``--slo``, else null): ``requests_per_s`` = requests that
  succeeded and met every objective / ``duration_s``; ``share`` = the same
  count / finished requests (failures count as not meeting them); ``slo`` = the
  objectives in seconds (vLLM ``benchmark_serving --goodput``, DistServe).
- ``tokens.prompt_vs_requested``: over successes with both a server
  prompt count and a requested length, the mean |server - requested| and that
  mean relative to the mean requested length; the summary warns above
  ``console.PROMPT_MISMATCH_WARN_RATIO``.
  ``tokens.completion_client_vs_server``: how often and by how much a local
  tokenizer disagreed with the server's completion count (a diagnostic; the server count is used).
- ``tokens.reasoning``/``answer``/``hidden_reasoning``/``streamed_completion``/
  ``cached_prompt`` and ``tokens.usage_checks``: usage's details and the
  checks of usage against the stream (``llmload.exporters.sections``,
  ``llmload.request.tokens.read_usage``).
- ``client``: the load generator's own delays, over finished requests.
  ``read_lag_s``: for every body read with a kernel receive stamp, how long
  before the stamp its oldest bytes may have arrived: latencies are measured
  from the stamps, so a read that came late but held one event costs them
  nothing (lag 0), while events that piled up behind a late read share the
  newest bytes' stamp and may be late by up to the lag. ``clock``: ``kernel`` when every read was
  stamped, ``monotonic`` when none was (TLS, not Linux), ``mixed`` otherwise;
  null without reads. ``connect_s``: time to have a connection ready before
  the send (outside TTFT and E2E). ``read_lag_limit_s``: the p99 lag above
  which the run is flagged ``client_saturated``. ``request_lag_s``: per
  finished request with a stamped read, its largest read lag (the bound of
  how far any of its times may be off); ``lagged_requests``: how many
  exceeded ``request_lag_limit_s``, which flags the run too (one such read
  is enough: ``read_lag_saturated``).
- ``None`` (JSON ``null``, console "n/a") means unknown, never 0.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmload.aggregate.stats import LLMStats
from llmload.exporters.chart_rows import CDF_METRICS, latency_cdf
from llmload.exporters.load import SendFigures, load_section
from llmload.exporters.sections import client_saturated, latency_section, stats_sections
from llmload.exporters.sessions import sessions_section
from llmload.run.clock import OffsetEstimate
from llmload.servermetrics import cross_check
from llmload.settings.config import LengthSpec, RunConfig
from llmload.settings.credentials import public_header

__all__ = [
    "SCHEMA_VERSION",
    "RunOutcome",
    "Verdict",
    "build_results",
    "judge",
    "public_options",
    "server_section",
    "workload_options",
    "write_results_json",
]

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended: its final statistics and what the run knows beyond them (the input of ``build_results``).

    Attributes:
        stats: the final statistics (merged over workers on the master).
        config: the run's options; ``results["run"]["options"]`` is ``public_options(config)``.
        run_id: identifier of the run (e.g. a timestamp or UUID).
        host: base URL of the server under test, without credentials.
        user_classes: names of the Locust user classes.
        model: model name sent in requests; None when none was chosen (a run refused before
            the model list was read, or a server never reached).
        users: peak number of simulated users.
        workers: number of Locust worker processes (0 when running locally).
        started_at_unix: wall-clock start of the run.
        blocked: why no load was sent (preflight or options, web UI), or None.
        lost_workers: ids of workers lost mid-run.
        cpu_saturated_s: longest CPU saturation streak of any load-generating process (s).
        sends: the open-loop send figures, combined over processes.
        timeseries: the per-interval rows (``llmload.exporters.timeseries``), run-wide.
        server: the inference server's metrics over the run (``llmload.servermetrics.summarise``), or None.
        drift: the first stretch of the run against the last (``llmload.exporters.drift.drift_section``), or None.
        worker_clocks: per worker id, the bracket of its wall clock minus the
            master's (``llmload.run.clock.OffsetEstimate``); empty for one process.
        server_warnings: what went wrong with the endpoints given to ``--server-metrics`` (e.g. one never answered).
        aborted: the ``--abort-on`` threshold that stopped the run
            (``llmload.settings.thresholds.Breach.as_dict``), or None.
        checkpoint_at_s: a checkpoint taken this many seconds into a run still going (a partial
            document, no verdict); None for the run's end.
        stopped_by: the signal that stopped the run before its end (``"Ctrl-C"``), or None when it
            ended by itself (``-t``, ``--num-requests``, a trace's end, the web UI's STOP).
        refused_options: a run blocked for its options' values: each refused option's flag and its
            value as given (``"--max-tokens": "abc"``; secrets ``***``); empty otherwise.
    """

    stats: LLMStats
    config: RunConfig = field(default_factory=RunConfig)
    run_id: str = ""
    host: str = ""
    user_classes: tuple[str, ...] = ()
    model: str | None = None
    users: int = 0
    workers: int = 0
    started_at_unix: float = 0.0
    blocked: str | None = None
    lost_workers: tuple[str, ...] = ()
    cpu_saturated_s: float = 0.0
    sends: SendFigures = field(default_factory=SendFigures)
    timeseries: tuple[dict[str, Any], ...] = ()
    server: Mapping[str, Any] | None = None
    drift: Mapping[str, Any] | None = None
    worker_clocks: Mapping[str, OffsetEstimate] = field(default_factory=dict)
    server_warnings: tuple[str, ...] = ()
    aborted: Mapping[str, Any] | None = None
    checkpoint_at_s: float | None = None
    stopped_by: str | None = None
    refused_options: Mapping[str, str] = field(default_factory=dict)


def build_results(outcome: RunOutcome) -> dict[str, Any]:
    """Build the whole results document (README "Results file").

    Top-level keys: ``schema_version``, ``run``, the statistics sections of
    the run total (``goodput`` (null without ``--slo``), ``requests``,
    ``errors``, ``tokens``, ``duration_s``, ``send_span_s``, ``throughput``,
    ``latency``, ``client``; ``latency`` over the keys of ``LLMStats.latency_keys``: a run that mixes
    embeddings with generation requests times its generation requests there), ``latency_endpoints``
    (the endpoints ``latency`` and ``latency_cdf`` cover), ``by_endpoint`` (the same sections plus
    ``endpoint`` and ``model`` per key; empty when only one key was
    measured), ``latency_cdf`` (the run-level TTFT, ITL, TPOT and E2E distributions from their
    histograms: ``chart_rows.latency_cdf``), ``timeseries`` (the per-interval rows), ``drift`` (the
    first stretch against the last, null when no run started), ``lost_workers``
    (only when some were lost), ``blocked`` (only when no load was sent),
    ``client_saturated``, ``client_cpu_saturated_s``, ``load``, ``server``
    (the inference server's metrics with the cross-check, null without
    them), ``server_warnings``, ``max_failure_ratio``, ``aborted`` (null unless an ``--abort-on``
    threshold stopped the run), ``partial`` and ``checkpoint_at_s`` (a
    checkpoint of a run still going: ``passed`` and ``exit_status`` null),
    and the verdict: ``passed``, ``exit_status`` and ``verdict``.
    """
    config, stats = outcome.config, outcome.stats
    results: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    results["run"] = {
        "run_id": outcome.run_id,
        "host": outcome.host,
        "user_classes": list(outcome.user_classes),
        "model": outcome.model,
        "users": outcome.users,
        "workers": outcome.workers,
        "num_requests": config.num_requests,
        "started_at_unix": outcome.started_at_unix,
        "workers_clock_offset_s": {w: c.offset_s for w, c in sorted(outcome.worker_clocks.items())},
        "workers_clock_offset_error_s": {w: c.error_s for w, c in sorted(outcome.worker_clocks.items())},
        "stopped_by": outcome.stopped_by,
        "refused_options": dict(outcome.refused_options),
        "options": public_options(config),
    }
    total = stats.total()
    results.update(stats_sections(total, config.slo))
    latency_keys = stats.latency_keys()
    timed = total if latency_keys == stats.keys() else stats.latency_total()
    results["latency"] = latency_section(timed)
    results["latency_endpoints"] = sorted({endpoint for endpoint, _model in latency_keys})
    results["by_endpoint"] = (
        [{"endpoint": e, "model": m, **stats_sections(s, config.slo)} for (e, m), s in stats.items()]
        if len(stats.keys()) > 1
        else []
    )
    results["latency_cdf"] = {key: latency_cdf(getattr(timed, key)) for key in CDF_METRICS}
    results["timeseries"] = [dict(row) for row in outcome.timeseries]
    results["drift"] = None if outcome.drift is None else dict(outcome.drift)
    if outcome.lost_workers:
        results["lost_workers"] = list(outcome.lost_workers)
    if outcome.blocked:
        results["blocked"] = outcome.blocked
    results["client_saturated"] = client_saturated(outcome.cpu_saturated_s, total.read_lag_s, total.request_lag_s)
    results["client_cpu_saturated_s"] = outcome.cpu_saturated_s
    results["load"] = load_section(config, results, outcome.sends)
    results["sessions"] = sessions_section(total, config)
    results["server"] = server_section(outcome.server, results)
    results["server_warnings"] = list(outcome.server_warnings)
    results["max_failure_ratio"] = config.max_failure_ratio
    results["aborted"] = dict(outcome.aborted) if outcome.aborted is not None else None
    results["partial"] = outcome.checkpoint_at_s is not None
    results["checkpoint_at_s"] = outcome.checkpoint_at_s
    verdict = judge(results)
    results["passed"] = None if results["partial"] else verdict.passed
    results["exit_status"] = None if results["partial"] else verdict.exit_status
    results["verdict"] = verdict.text
    return results


def server_section(server: Mapping[str, Any] | None, results: Mapping[str, Any]) -> dict[str, Any] | None:
    """``server`` (a ``summarise`` result) plus ``cross_check`` against the client's figures in ``results``.

    The client's figures are ``tokens.prompt``, ``tokens.completion`` and
    ``latency.ttft_s.{mean, p50, count}`` of the same results document. None stays None.
    """
    if server is None:
        return None
    tokens = results.get("tokens") or {}
    ttft = (results.get("latency") or {}).get("ttft_s") or {}
    check = cross_check(
        server,
        prompt_tokens=tokens.get("prompt"),
        completion_tokens=tokens.get("completion"),
        ttft_mean_s=ttft.get("mean"),
        ttft_p50_s=ttft.get("p50"),
        ttft_count=ttft.get("count"),
    )
    return {**server, "cross_check": check}


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
    """The verdict on a results document (``requests``, ``blocked``, ``aborted``, ``partial``, ``max_failure_ratio``).

    A partial document (a checkpoint) gets exit status 1 and a text that says
    no verdict exists yet; ``build_results`` writes its ``passed`` and
    ``exit_status`` as null.
    """
    requests = results["requests"]
    finished, failed, succeeded = requests["total"], requests["failed"], requests["succeeded"]
    if results.get("partial"):
        at_s = float(results.get("checkpoint_at_s") or 0.0)
        return Verdict(
            1,
            f"PARTIAL: checkpoint {at_s:.0f} s into a run that had not ended (so far {succeeded}/{finished} "
            "requests succeeded); no verdict yet. The run's end replaces this file: if it is still partial, "
            "the process was stopped before its end",
        )
    if results.get("blocked"):
        return Verdict(2, f"BLOCKED before load: {results['blocked']}; no load was sent; exit status 2")
    aborted = results.get("aborted")
    if aborted:
        values = ", ".join(f"{v:.4g}" for v in aborted["values"][-5:])
        more = f" (last 5 of {len(aborted['values'])})" if len(aborted["values"]) > 5 else ""
        return Verdict(
            1,
            f"FAILED: aborted {aborted['at_s']:.0f} s into the run by --abort-on {aborted['threshold']!r} "
            f"(held from {aborted['from_s']:.0f} s; values {values}{more}); exit status 1",
        )
    limit = float(results.get("max_failure_ratio") or 0.0)
    skipped = requests.get("skipped", 0)
    if skipped:
        return Verdict(
            1,
            f"FAILED: {skipped} of {finished + skipped} requests were skipped by a fault in the client "
            "(not sent, or not measured; the errors list each cause); exit status 1",
        )
    if finished == 0:
        return Verdict(1, f"FAILED: no request finished ({requests['cancelled']} cancelled at the stop); exit status 1")
    if succeeded == 0:
        subject = "the only request" if finished == 1 else f"all {finished} requests"
        return Verdict(1, f"FAILED: {subject} failed; exit status 1")
    ratio = failed / finished
    shown, shown_limit = _percents(ratio, limit)
    # requests cut off in flight by the run's end are in neither count: say so beside the fraction
    cancelled = requests.get("cancelled", 0)
    cut = f"; {cancelled} cancelled at the stop, not counted" if cancelled else ""
    if ratio > limit:
        return Verdict(
            1,
            f"FAILED: {failed}/{finished} requests failed (failure ratio {shown} > --max-failure-ratio "
            f"{shown_limit}){cut}; exit status 1",
        )
    stopped_by = (results.get("run") or {}).get("stopped_by")
    early = f"; stopped early by {stopped_by}" if stopped_by else ""
    return Verdict(
        0,
        f"PASSED: {succeeded}/{finished} requests succeeded (failure ratio {shown} <= --max-failure-ratio "
        f"{shown_limit}){early}{cut}; exit status 0",
    )


def _percents(value: float, limit: float) -> tuple[str, str]:
    """Both ratios as percentages with just enough decimals that unequal values never print alike."""
    digits = 1
    while digits < 6 and value != limit and round(value * 100, digits) == round(limit * 100, digits):
        digits += 1
    return f"{value * 100:.{digits}f}%", f"{limit * 100:.{digits}f}%"


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
        "request": request_options(config),
        "abort_on": [threshold.text for threshold in config.abort_on],
        "checkpoint_interval_s": config.checkpoint_interval_s,
    }


def request_options(config: RunConfig) -> dict[str, Any]:
    """How requests were shaped; header values that look like credentials are ``***``."""
    secret = (config.api_key_header,) if config.api_key_header else ()
    return {
        "endpoint_path": config.endpoint_path,
        "max_tokens_field": config.max_tokens_field,
        "stream_usage": config.stream_usage,
        "key_header": config.api_key_header,  # the header name only; never the key
        "headers": [public_header(name, value, secret) for name, value in config.headers],
        "extra_body": json.dumps(config.extra_body, separators=(",", ":")) if config.extra_body else None,
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


def write_results_json(path: str | os.PathLike[str], results: Mapping[str, Any]) -> None:
    """Write ``results`` as JSON atomically (temporary file + ``os.replace``).

    Parent directories are created. Readers never see a half-written file.

    Raises:
        OSError: the directory cannot be created or written.
        ValueError: ``results`` holds NaN or infinity (not valid JSON).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=2, allow_nan=False) + "\n"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # a results file, not a secret: the usual mode, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
