"""End-of-run results: the canonical JSON document and the console summary.

``build_results`` turns the master's ``LLMStats`` into a plain dict (written
by ``write_results_json``); ``format_summary`` renders that dict, so
``llmload report results.json`` prints the same table as the run did.

Metric definitions (times in seconds in JSON, milliseconds in the console):

- ``requests.total``: finished requests = succeeded + failed. Cancelled
  requests (in flight at stop, BC-27) are reported apart and excluded from
  everything else. ``EMPTY`` replies are failures (BC-09, as vLLM since #5895).
  ``requests.skipped``: requests the client could not build, send or measure;
  not in the total, their causes in ``errors``; with ``--num-requests N``,
  total + cancelled + skipped = N.
- ``duration_s``: last end - first send over finished requests (wall clock,
  across all workers). This is vLLM ``benchmark_serving``'s ``duration``
  measured on the requests themselves, so ramp-up idle time is excluded.
- ``throughput.requests_per_s``: succeeded / duration_s (vLLM
  ``request_throughput``). ``output_tokens_per_s``: completion tokens of
  successes / duration_s (vLLM ``output_throughput``). ``total_tokens_per_s``:
  (prompt + completion tokens) / duration_s (vLLM ``total_token_throughput``).
- ``latency``: over successes only (failures' partial timings are excluded,
  BC-10). TTFT = send → first generated token of any kind; TTFC = send → first
  content token (guidellm's time to first output token, BC-12); ITL = gaps
  between token events, never including TTFT (BC-18); TPOT = (last - first
  token) / (completion tokens - 1); E2E = send → end of reply (vLLM
  definitions). Percentiles are nearest-rank estimates within 1% (see
  ``llmload.histogram``); ``max`` is exact.
- ``goodput`` (with ``--slo``, else null): ``requests_per_s`` = requests that
  succeeded and met every objective / ``duration_s``; ``share`` = the same
  count / finished requests (failures count as not meeting them); ``slo`` = the
  objectives in seconds (vLLM ``benchmark_serving --goodput``, DistServe).
- ``tokens.prompt_vs_requested`` (BC-16): over successes with both a server
  prompt count and a requested length, the mean |server - requested| and that
  mean relative to the mean requested length; the summary warns above
  ``PROMPT_MISMATCH_WARN_RATIO``. ``tokens.completion_client_vs_server``
  (BC-15): how often and by how much a local tokenizer disagreed with the
  server's completion count (a diagnostic; the server count is used).
- ``client``: the load generator's own delays, over finished requests.
  ``read_lag_s``: for every body read with a kernel receive stamp, how long
  its bytes had waited in the kernel before the client read them; latencies
  are measured from the stamps, so a lag below the ITL costs them nothing,
  while a larger one coalesces events and adds up to the lag (the stamp is
  that of the newest bytes read). ``clock``: ``kernel`` when every read was
  stamped, ``monotonic`` when none was (TLS, not Linux), ``mixed`` otherwise;
  null without reads. ``connect_s``: time to have a connection ready before
  the send (outside TTFT and E2E). ``read_lag_limit_s``: the p99 lag above
  which the run is flagged ``client_saturated``.
- ``None`` (JSON ``null``, console "n/a") means unknown, never 0 (R5).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmload.goodput import SLO
from llmload.histogram import LatencyHistogram
from llmload.record import Outcome, TokenSource
from llmload.stats import LATENCY_HISTOGRAM_NAMES, EndpointStats, LLMStats

READ_LAG_LIMIT_S = 0.002
"""p99 read lag above which the client's delay is flagged (``client.read_lag_saturated``)."""

__all__ = [
    "PROMPT_MISMATCH_WARN_RATIO",
    "READ_LAG_LIMIT_S",
    "SCHEMA_VERSION",
    "RunInfo",
    "build_results",
    "format_summary",
    "read_lag_saturated",
    "write_results_json",
]

SCHEMA_VERSION = 1
PROMPT_MISMATCH_WARN_RATIO = 0.05
"""Warn when mean |server prompt tokens - requested| exceeds this share of the mean requested length."""

_PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
_MIXED = "mixed"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What was run, copied verbatim into ``results["run"]``.

    Attributes:
        run_id: identifier of the run (e.g. a timestamp or UUID).
        host: base URL of the server under test.
        user_classes: names of the Locust user classes.
        model: model name sent in requests.
        users: peak number of simulated users.
        workers: number of Locust worker processes (0 when running locally).
        num_requests: request target, or None when the run was time-bounded.
        started_at_unix: wall-clock start of the run.
        options: the effective options (JSON-serialisable values only).
    """

    run_id: str
    host: str
    user_classes: tuple[str, ...]
    model: str
    users: int
    workers: int
    num_requests: int | None
    started_at_unix: float
    options: Mapping[str, Any] = field(default_factory=dict)


# ── building ──────────────────────────────────────────────────────────────
def build_results(stats: LLMStats, *, run: RunInfo, slo: SLO | None = None) -> dict[str, Any]:
    """Build the results document from the final statistics.

    Top-level keys: ``schema_version``, ``run``, ``requests``, ``errors``,
    ``tokens``, ``duration_s``, ``throughput``, ``latency`` and
    ``by_endpoint`` (a list with the same sections plus ``endpoint`` and
    ``model`` per key; empty when only one key was measured) and
    ``goodput`` (null without ``slo``).
    """
    results: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    results["run"] = {**asdict(run), "user_classes": list(run.user_classes), "options": dict(run.options)}
    results.update(_sections(stats.total(), slo))
    keys = stats.keys()
    results["by_endpoint"] = (
        [{"endpoint": e, "model": m, **_sections(s, slo)} for (e, m), s in stats.items()] if len(keys) > 1 else []
    )
    return results


def _sections(s: EndpointStats, slo: SLO | None) -> dict[str, Any]:
    duration_s = _duration_s(s)
    tokens = _tokens(s)
    return {
        "goodput": _goodput(s, slo, duration_s),
        "requests": _requests(s),
        "errors": [
            {"category": c, "status": g.status, "count": g.count, "samples": list(g.samples)}
            for c, g in sorted(s.errors.items(), key=lambda item: (-item[1].count, item[0]))
        ],
        "tokens": tokens,
        "duration_s": duration_s,
        "send_span_s": None
        if s.first_send_unix is None or s.last_send_unix is None
        else s.last_send_unix - s.first_send_unix,
        "throughput": _throughput(s, tokens, duration_s),
        "latency": _latency(s),
        "client": _client(s),
    }


def read_lag_saturated(read_lag: LatencyHistogram) -> bool:
    """True when the P99 read lag exceeds ``READ_LAG_LIMIT_S`` (the client was too late to trust its latencies).

    The one rule for the results' ``client.read_lag_saturated`` and the live
    ``llmload_client_saturated`` gauge.
    """
    p99 = read_lag.quantile(0.99)
    return p99 is not None and p99 > READ_LAG_LIMIT_S


def _client(s: EndpointStats) -> dict[str, Any]:
    stamped, unstamped = s.read_lag_s.count, s.unstamped_reads
    clock = None if not stamped + unstamped else "monotonic" if not stamped else "mixed" if unstamped else "kernel"
    lag = _summary(s.read_lag_s)
    return {
        "clock": clock,
        "stamped_reads": stamped,
        "unstamped_reads": unstamped,
        "read_lag_s": lag,
        "read_lag_limit_s": READ_LAG_LIMIT_S,
        "read_lag_saturated": read_lag_saturated(s.read_lag_s),
        "connect_s": _summary(s.connect_s),
    }


def _requests(s: EndpointStats) -> dict[str, Any]:
    total = s.finished
    return {
        "total": total,
        "succeeded": s.succeeded,
        "failed": s.failed,
        "cancelled": s.cancelled,
        "skipped": s.skipped,
        "failure_ratio": s.failed / total if total else None,
        "by_outcome": {o.value: s.requests_by_outcome.get(o, 0) for o in Outcome},
    }


def _source_name(by_source: Mapping[TokenSource, int]) -> str | None:
    """The one source every success used, ``"mixed"``, or None without successes."""
    if not by_source:
        return None
    if len(by_source) == 1:
        return next(iter(by_source)).value
    return _MIXED


def _tokens(s: EndpointStats) -> dict[str, Any]:
    prompt_known = s.prompt_tokens_known_requests
    completion_known = s.completion_tokens_known_requests
    requested_n = s.requested_prompt_tokens_count
    return {
        "prompt": s.prompt_tokens_sum if prompt_known else None,
        "completion": s.completion_tokens_sum if completion_known else None,
        "prompt_source": _source_name(s.prompt_source_requests),
        "prompt_sources": {k.value: n for k, n in sorted(s.prompt_source_requests.items(), key=_by_name)},
        "completion_source": _source_name(s.completion_source_requests),
        "completion_sources": {k.value: n for k, n in sorted(s.completion_source_requests.items(), key=_by_name)},
        "completion_tokens_by_source": {
            k.value: n for k, n in sorted(s.completion_tokens_by_source.items(), key=_by_name)
        },
        "avg_prompt_per_request": s.prompt_tokens_sum / prompt_known if prompt_known else None,
        "avg_completion_per_request": s.completion_tokens_sum / completion_known if completion_known else None,
        "requested_prompt_avg": s.requested_prompt_tokens_sum / requested_n if requested_n else None,
        "prompt_vs_requested": _prompt_vs_requested(s),
        "completion_client_vs_server": _client_vs_server(s),
    }


def _prompt_vs_requested(s: EndpointStats) -> dict[str, Any]:
    n = s.requested_compared_requests
    return {
        "compared": n,
        "mean_abs_diff": s.requested_abs_diff_tokens / n if n else None,
        "relative_diff": s.requested_abs_diff_tokens / s.requested_compared_tokens
        if s.requested_compared_tokens
        else None,
    }


def _client_vs_server(s: EndpointStats) -> dict[str, Any]:
    n = s.tokenizer_compared_requests
    return {
        "compared": n,
        "disagreed": s.tokenizer_disagreed_requests,
        "mean_abs_diff": s.tokenizer_abs_diff_tokens / n if n else None,
    }


def _goodput(s: EndpointStats, slo: SLO | None, duration_s: float | None) -> dict[str, Any] | None:
    if slo is None:
        return None
    met, finished = s.slo_met_requests, s.finished
    return {
        "requests_per_s": met / duration_s if duration_s and duration_s > 0 else None,
        "share": met / finished if finished else None,
        "requests": met,
        "slo": slo.as_dict(),
    }


def _by_name(item: tuple[TokenSource, int]) -> str:
    return item[0].value


def _duration_s(s: EndpointStats) -> float | None:
    if s.first_send_unix is None or s.last_end_unix is None:
        return None
    return s.last_end_unix - s.first_send_unix


def _throughput(s: EndpointStats, tokens: Mapping[str, Any], duration_s: float | None) -> dict[str, Any]:
    if not duration_s or duration_s <= 0:
        return {"requests_per_s": None, "output_tokens_per_s": None, "total_tokens_per_s": None}
    prompt, completion = tokens["prompt"], tokens["completion"]
    return {
        "requests_per_s": s.succeeded / duration_s,
        "output_tokens_per_s": completion / duration_s if completion is not None else None,
        "total_tokens_per_s": (
            (prompt + completion) / duration_s if prompt is not None and completion is not None else None
        ),
    }


def _summary(hist: LatencyHistogram) -> dict[str, Any]:
    p50, p90, p99 = hist.quantiles([q for _, q in _PERCENTILES])
    return {"mean": hist.mean, "p50": p50, "p90": p90, "p99": p99, "max": hist.max, "count": hist.count}


def _latency(s: EndpointStats) -> dict[str, Any]:
    latency: dict[str, Any] = {name: _summary(getattr(s, name)) for name in LATENCY_HISTOGRAM_NAMES}
    kinds = s.itl_kind_requests
    latency["itl_kind"] = None if not kinds else next(iter(kinds)).value if len(kinds) == 1 else _MIXED
    return latency


# ── console ───────────────────────────────────────────────────────────────
_WIDTH = 52
_LABEL = 40


def _line(label: str, value: str) -> str:
    return f"{label:<{_LABEL}}{value:>{_WIDTH - _LABEL}}"


def _num(value: float | None, digits: int = 2, scale: float = 1.0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, int) and scale == 1.0:
        return str(value)
    return f"{value * scale:.{digits}f}"


def _section(title: str) -> str:
    return f"{'-' * 3} {title} ".ljust(_WIDTH, "-")


def format_summary(results: Mapping[str, Any]) -> str:
    """Render a results dict (from ``build_results`` or a results JSON file) as a console table.

    The layout follows vLLM ``benchmark_serving``'s result block: counts,
    throughput, then mean/P50/P90/P99 of E2E, TTFT, ITL and TPOT in
    milliseconds. Unknown values print as ``n/a``.
    """
    req = results["requests"]
    tok = results["tokens"]
    thr = results["throughput"]
    lat = results["latency"]
    ratio = req["failure_ratio"]
    ratio_text = f" ({ratio * 100:.1f}% failed)" if ratio is not None else ""
    lines = [" llmload result ".center(_WIDTH, "=")]
    lines.append(_line("Successful requests:", f"{req['succeeded']}/{req['total']}{ratio_text}"))
    for error in results["errors"]:
        status = f" [{error['status']}]" if error["status"] is not None else ""
        lines.append(f"  {error['count']} x {error['category']}{status}")
        lines.extend(f"      {sample[:200]}" for sample in error["samples"])
    throttled = req["by_outcome"].get("throttled", 0)
    if throttled:
        share = f" ({throttled / req['total'] * 100:.1f}% of finished)" if req["total"] else ""
        lines.append(_line("Throttled (429/503):", f"{throttled}{share}"))
    lines.append(_line("Cancelled at stop:", str(req["cancelled"])))
    if req.get("skipped"):
        lines.append(_line("Skipped (client fault, not sent):", str(req["skipped"])))
    lines.append(_line("Wall time (s):", _num(results["duration_s"])))
    lines.append(_line("Request throughput (req/s):", _num(thr["requests_per_s"])))
    lines.append(_line("Output token throughput (tok/s):", _num(thr["output_tokens_per_s"])))
    lines.append(_line("Total token throughput (tok/s):", _num(thr["total_tokens_per_s"])))
    lines.append(_line("Total input tokens:", _num(tok["prompt"])))
    lines.append(_line("Total generated tokens:", _num(tok["completion"])))
    lines.append(_line("Avg generated tokens per request:", _num(tok["avg_completion_per_request"], 1)))
    lines.extend(_goodput_lines(results.get("goodput")))
    lines.append(_line("Input token count source:", _sources_text(tok["prompt_source"], tok["prompt_sources"])))
    lines.append(
        _line("Output token count source:", _sources_text(tok["completion_source"], tok["completion_sources"]))
    )
    itl_title = "Inter-token Latency" if lat["itl_kind"] != "chunk" else "Inter-chunk Latency (ITL)"
    for key, title in (
        ("e2e_s", "End-to-end Latency"),
        ("ttft_s", "Time to First Token"),
        ("ttfc_s", "Time to First Content Token"),
        ("itl_s", itl_title),
        ("tpot_s", "Time per Output Token (excl. 1st token)"),
    ):
        metric = lat[key]
        abbrev = key.removesuffix("_s").upper()
        lines.append(_section(title))
        lines.append(_line(f"Mean {abbrev} (ms):", _num(metric["mean"], scale=1000.0)))
        for name, _ in _PERCENTILES:
            lines.append(_line(f"{name.upper()} {abbrev} (ms):", _num(metric[name], scale=1000.0)))
    lines.append("=" * _WIDTH)
    lines.extend(_token_warnings(tok))
    return "\n".join(lines)


def _goodput_lines(goodput: Mapping[str, Any] | None) -> list[str]:
    if not goodput:
        return []
    slo = ",".join(f"{name.removesuffix('_s')}={limit:g}" for name, limit in goodput["slo"].items())
    share = goodput["share"]
    return [
        _line(f"Goodput (req/s, SLO {slo}):", _num(goodput["requests_per_s"])),
        _line("Requests meeting every SLO:", f"{goodput['requests']} ({_num(share, 1, 100.0)}%)"),
    ]


def _token_warnings(tok: Mapping[str, Any]) -> list[str]:
    lines = []
    mismatch = tok.get("prompt_vs_requested") or {}
    relative = mismatch.get("relative_diff")
    if relative is not None and relative > PROMPT_MISMATCH_WARN_RATIO:
        lines.append(
            f"WARNING: server prompt tokens differ from the requested lengths by {relative:.1%} on average "
            f"(mean |diff| {mismatch['mean_abs_diff']:.1f} tokens over {mismatch['compared']} requests; "
            "chat template/BOS, or approximate lengths without --tokenizer). Input metrics use server counts."
        )
    client = tok.get("completion_client_vs_server") or {}
    if client.get("disagreed"):
        lines.append(
            f"NOTE: local tokenizer and server disagreed on output tokens in {client['disagreed']}/"
            f"{client['compared']} requests (mean |diff| {client['mean_abs_diff']:.1f}); server counts used."
        )
    return lines


def _sources_text(source: str | None, breakdown: Mapping[str, int]) -> str:
    if source != _MIXED:
        return source or "n/a"
    return "mixed: " + ", ".join(f"{name}={n}" for name, n in breakdown.items())


# ── file ──────────────────────────────────────────────────────────────────
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
