"""All console text of a run: the result table, the run-level notes, the server block and the verdict line.

Renders a results document (``llmload.exporters.results.build_results``, or
a results JSON file read back) and nothing else, so a file prints the same
summary as the run did. Milliseconds on the console, seconds in the document;
unknown values print as ``n/a``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llmload.exporters.results import judge
from llmload.exporters.sections import MIXED, PERCENTILES

__all__ = [
    "PROMPT_MISMATCH_WARN_RATIO",
    "RESULTS_LINE_PREFIX",
    "format_summary",
    "left_out_of_latency",
    "results_line",
    "summary_lines",
    "ttft_split_row",
]

PROMPT_MISMATCH_WARN_RATIO = 0.05
"""Warn when mean |server prompt tokens - requested| exceeds this share of the mean requested length."""
RESULTS_LINE_PREFIX = "LLMLOAD_RESULTS "
"""Start of the headless run's last output line; the rest of the line is the results JSON."""

_WIDTH = 52
_UNLIMITED_RATE = "inf (every request eligible at once)"  # --request-rate inf, in the words of its help
_LABEL = 40
_GAUGE_LINES = (
    ("running_requests", "Running requests", 1.0, ""),
    ("waiting_requests", "Waiting requests", 1.0, ""),
    ("kv_cache_usage", "KV-cache usage", 100.0, "%"),
    ("gpu_utilization", "GPU utilisation", 100.0, "%"),
    ("gpu_memory_used_bytes", "GPU memory used (GiB)", 2.0**-30, ""),
    ("gpu_power_w", "GPU power (W)", 1.0, ""),
)
_LATENCY_LINES = (("ttft_s", "TTFT"), ("itl_s", "ITL"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"), ("queue_s", "Queue"))


def _line(label: str, value: str) -> str:
    return f"{label:<{_LABEL}}{value:>{_WIDTH - _LABEL}}"


def _num(value: float | None, digits: int = 2, scale: float = 1.0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, int) and scale == 1.0:
        return str(value)
    return f"{value * scale:.{digits}f}"


def _row(label: str, text: str) -> str:
    """A note row: the label padded as in the table, the text left-aligned after it."""
    return f"{label:<{_LABEL}}{text}"


def _section(title: str) -> str:
    """``--- title ---…`` to the summary's width (a title too long for it still ends with ``---``)."""
    return f"--- {title} ".ljust(_WIDTH - 3, "-") + "---"


def format_summary(results: Mapping[str, Any]) -> str:
    """Render the result table of a results document (from ``build_results`` or a results JSON file).

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
    lines.extend(_reply_lines(req))
    lines.append(_line("Cancelled at stop (not counted):", str(req["cancelled"])))
    if req.get("skipped"):
        lines.append(_line("Skipped (client fault, not sent):", str(req["skipped"])))
    lines.append(_line("Wall time (s):", _num(results["duration_s"])))
    lines.append(_line("Request throughput (req/s):", _num(thr["requests_per_s"])))
    embeddings_only = tok["completion"] is None and thr.get("inputs_per_s") is not None  # nothing generated
    if embeddings_only:
        lines.append(_line("Embedded inputs/s:", _num(thr["inputs_per_s"])))
        lines.append(_line("Input token throughput (tok/s):", _num(thr.get("input_tokens_per_s"))))
        lines.append(_line("Total input tokens:", _num(tok["prompt"])))
    else:
        lines.append(_line("Output token throughput (tok/s):", _num(thr["output_tokens_per_s"])))
        lines.append(_line("Total token throughput (tok/s):", _num(thr["total_tokens_per_s"])))
        lines.append(_line("Total input tokens:", _num(tok["prompt"])))
        lines.append(_line("Total generated tokens:", _num(tok["completion"])))
        lines.append(_line("Avg generated tokens per request:", _num(tok["avg_completion_per_request"], 1)))
    lines.extend(_goodput_lines(results.get("goodput")))
    lines.append(_line("Input token count source:", _sources_text(tok["prompt_source"], tok["prompt_sources"])))
    if not embeddings_only:
        lines.append(
            _line("Output token count source:", _sources_text(tok["completion_source"], tok["completion_sources"]))
        )
    lines.extend(_usage_detail_lines(tok, thr))
    lines.extend(_latency_scope_lines(results))
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
        for name, _ in PERCENTILES:
            lines.append(_line(f"{name.upper()} {abbrev} (ms):", _num(metric[name], scale=1000.0)))
        if key == "ttft_s":
            lines.extend(_ttft_with_connect_lines(lat.get("ttft_with_connect_s")))
    lines.extend(_endpoint_lines(results.get("by_endpoint") or [], thr, embeddings_only))
    lines.append("=" * _WIDTH)
    lines.extend(_token_warnings(tok))
    lines.extend(_input_token_warnings(results))
    lines.extend(_usage_check_notes(tok))
    lines.extend(_short_warnings(req))
    return "\n".join(lines)


def _latency_scope_lines(results: Mapping[str, Any]) -> list[str]:
    """What the latency sections below are over, when the run's endpoints are not all in them (a mixed run).

    A run that mixes embeddings with generation requests times its generation
    requests in the latency sections; the embeddings' own E2E is in the per-endpoint lines.
    """
    left = left_out_of_latency(results)
    if not left:
        return []
    timed = ", ".join(results.get("latency_endpoints") or ())
    return ["Latency below: generation requests only", f"  ({timed}; {', '.join(left)}: see Per endpoint)"]


def left_out_of_latency(results: Mapping[str, Any]) -> list[str]:
    """The endpoints a results document measured but left out of its top-level latency (``latency_endpoints``).

    [] when the latency is over every endpoint, and for older documents (no ``latency_endpoints``).
    """
    timed = results.get("latency_endpoints")
    if not timed:
        return []
    measured = sorted({entry["endpoint"] for entry in results.get("by_endpoint") or []})
    return [endpoint for endpoint in measured if endpoint not in timed]


def _endpoint_lines(entries: list[Mapping[str, Any]], thr: Mapping[str, Any], shown: bool = False) -> list[str]:
    """Per endpoint/model (a mixed run): successes, req/s, TTFT and E2E p50, tok/s; inputs/s for embeddings.

    ``shown``: the totals already gave inputs/s (an embeddings-only run).
    """
    if not entries:
        if thr.get("inputs_per_s") is None or shown:
            return []
        return [_line("Embedded inputs/s:", _num(thr["inputs_per_s"]))]
    lines = [_section("Per endpoint")]
    for entry in entries:
        req, et, lat = entry["requests"], entry["throughput"], entry["latency"]
        if et.get("inputs_per_s") is not None:
            rate = f"{_num(et['inputs_per_s'])} inputs/s, {_num(et['input_tokens_per_s'], 0)} input tok/s"
        else:
            rate = (
                f"{_num(et['output_tokens_per_s'], 1)} out tok/s, TTFT p50 {_num(lat['ttft_s']['p50'], 1, 1000.0)} ms"
            )
        lines.append(
            f"{entry['endpoint']} ({entry['model']}): {req['succeeded']}/{req['total']} ok, "
            f"{_num(et['requests_per_s'])} req/s, {rate}, E2E p50 {_num(lat['e2e_s']['p50'], 1, 1000.0)} ms"
        )
    return lines


def _ttft_with_connect_lines(metric: Mapping[str, Any] | None) -> list[str]:
    """TTFT with the connection set-up (the other tools' convention) beside TTFT from the send; [] in older results."""
    if not metric or not metric.get("count"):
        return []
    return [
        _line("Mean TTFT incl. connect (ms):", _num(metric["mean"], scale=1000.0)),
        _line("P99 TTFT incl. connect (ms):", _num(metric["p99"], scale=1000.0)),
        "  TTFT: from the send. Incl. connect: from before",
        "  connecting (vLLM bench serve, SGLang, Locust)",
    ]


def _usage_detail_lines(tok: Mapping[str, Any], thr: Mapping[str, Any]) -> list[str]:
    """Reasoning vs answer tokens and cached prompt tokens, when the server's usage said (older results: none)."""
    lines = []
    if tok.get("reasoning") is not None:
        lines.append(_line("Reasoning / answer tokens:", f"{_num(tok['reasoning'])} / {_num(tok.get('answer'))}"))
        if tok.get("hidden_reasoning"):
            lines.append(_line("Reasoning tokens never streamed:", _num(tok["hidden_reasoning"])))
            lines.append(_line("Streamed output throughput (tok/s):", _num(thr.get("streamed_output_tokens_per_s"))))
    if tok.get("cached_prompt") is not None:
        prompt = tok.get("prompt")
        share = f" ({tok['cached_prompt'] / prompt * 100:.1f}% of input)" if prompt else ""
        lines.append(_line("Cached prompt tokens:", f"{_num(tok['cached_prompt'])}{share}"))
    return lines


_USAGE_CHECKS = {
    "usage_incremental": "usage sent per chunk held per-chunk counts: summed",
    "usage_not_growing": "usage sent per chunk did not grow while tokens streamed",
    "usage_below_events": "usage counted fewer tokens than token-bearing events: not used, "
    "the count comes from the next source (logprobs, tokenizer or chunks)",
    "hidden_reasoning": "usage's reasoning tokens were never streamed: TPOT is over the streamed tokens",
    "reasoning_unexplained": "usage's reasoning tokens were never streamed and do not add up: TPOT unavailable",
    "reasoning_apart": "usage's reasoning tokens exceed its completion_tokens: the server counts reasoning "
    "apart, so every completion token is counted as an answer token (check the server's usage)",
    "cached_above_prompt": "usage's cached prompt tokens exceed its prompt tokens (impossible): the cached "
    "count is not used (check the server's usage)",
    "usage_detail_unreadable": "a usage detail (reasoning or cached prompt tokens) was not a token count: "
    "that detail is unknown and left out of the reasoning and cached totals, never counted as 0 "
    "(check the server's usage)",
    "usage_above_text": "usage counted more tokens than the streamed text can hold (fewer bytes than tokens): "
    "not every token was streamed, so TPOT is unavailable for them; output tok/s is the server's count",
}


def _usage_check_notes(tok: Mapping[str, Any]) -> list[str]:
    """One NOTE per usage check that fired (``tokens.usage_checks``)."""
    checks = tok.get("usage_checks") or {}
    return [
        f"NOTE: {n} request(s): {_USAGE_CHECKS[name]}." for name, n in checks.items() if n and name in _USAGE_CHECKS
    ]


def _reply_lines(req: Mapping[str, Any]) -> list[str]:
    """Finish reasons seen and degenerate replies; [] for documents written before them."""
    lines = []
    reasons = req.get("finish_reasons")
    if reasons:
        ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
        lines.append(_row("Finish reasons:", ", ".join(f"{name} {n}" for name, n in ranked)))
    degenerate = req.get("degenerate") or {}
    kinds = [(k, degenerate.get(k) or 0) for k in ("empty", "repeated_token", "same_text")]
    if any(n for _, n in kinds):
        lines.append(
            _row("Degenerate replies (failed):", ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in kinds if n))
        )
    return lines


def _short_warnings(req: Mapping[str, Any]) -> list[str]:
    lines = []
    if req.get("without_finish_reason"):
        lines.append(
            f"WARNING: {req['without_finish_reason']} successful replies named no finish reason (they ended at "
            "[DONE], the end of the body or the API's end event alone): the server did not say why it stopped, "
            "so an abort or a cut reply cannot be told from a normal end"
        )
    short = req.get("short_of_requested") or {}
    if not short.get("short"):
        return lines
    return [
        *lines,
        f"WARNING: the server ignored the requested length (ignore_eos / min_tokens): {short['short']} of "
        f"{short['checked']} replies ended early, on average {short['mean_got_tokens']:.1f} of "
        f"{short['mean_asked_tokens']:.1f} tokens. Token counts are what was generated, never the length asked for",
    ]


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
    unknown = (tok.get("completion_sources") or {}).get("unknown")
    if unknown:
        lines.append(
            f"WARNING: {unknown} successful request(s) had no output token count (no usage in the reply, no "
            "logprobs, no --tokenizer): their tokens are left out of output tok/s and token totals; pass "
            "--tokenizer PATH or make the server return usage."
        )
    client = tok.get("completion_client_vs_server") or {}
    if client.get("disagreed"):
        lines.append(
            f"NOTE: local tokenizer and server disagreed on output tokens in {client['disagreed']}/"
            f"{client['compared']} requests (mean |diff| {client['mean_abs_diff']:.1f}); server counts used."
        )
    return lines


def _input_token_warnings(results: Mapping[str, Any]) -> list[str]:
    """One WARNING when successes had no input token count (``tokens.prompt_sources.unknown``), by endpoint.

    Embeddings replies without ``usage`` are the usual case: their input tokens
    are the run's only token figure, so input tok/s would silently cover part of it.
    """
    unknown = ((results.get("tokens") or {}).get("prompt_sources") or {}).get("unknown")
    if not unknown:
        return []
    parts = [
        f"{entry['endpoint']} {n}"
        for entry in results.get("by_endpoint") or []
        if (n := ((entry.get("tokens") or {}).get("prompt_sources") or {}).get("unknown"))
    ]
    where = f" ({', '.join(parts)})" if parts else ""
    return [
        f"WARNING: {unknown} successful request(s){where} had no input token count (the reply carried no usage, "
        "e.g. an embeddings reply without usage.prompt_tokens, and no --tokenizer): input tok/s and the input "
        "token totals leave them out; pass --tokenizer PATH or make the server return usage."
    ]


def _sources_text(source: str | None, breakdown: Mapping[str, int]) -> str:
    if source != MIXED:
        return source or "n/a"
    return "mixed: " + ", ".join(f"{name}={n}" for name, n in breakdown.items())


def _replay_lines(results: dict[str, Any]) -> list[str]:
    """Trace replay: scheduled / achieved rate and schedule lag; sessions: outcomes and TTFT by turn."""
    lines: list[str] = []
    load = results.get("load") or {}
    if load.get("mode") == "trace":
        lines.append(_section("Trace replay"))
        scheduled, achieved = load.get("scheduled_rate_per_s"), load.get("achieved_rate_per_s")
        if scheduled is not None and achieved is not None:
            lines.append(_row("Scheduled / achieved rate (req/s):", f"{scheduled:.2f} / {achieved:.2f}"))
        lag, p99 = load.get("max_schedule_lag_s"), load.get("p99_dispatch_delay_s")
        if lag is not None:
            p99_text = f"{p99 * 1e3:.2f}" if p99 is not None else "n/a"
            lines.append(_row("Schedule lag p99 / max (ms):", f"{p99_text} / {lag * 1e3:.2f}"))
    sessions = results.get("sessions")
    if sessions:
        lines.append(_section("Sessions"))
        lines.append(_row("Completed / failed:", f"{sessions['completed']} / {sessions['failed']}"))
        ttfts = [
            f"{t['turn']}: {t['ttft_mean_s'] * 1e3:.1f}" if t["ttft_mean_s"] is not None else f"{t['turn']}: n/a"
            for t in sessions["turns"][:8]
        ]
        lines.append(_row("Mean TTFT by turn (ms):", ", ".join(ttfts)))
    return lines


def summary_lines(results: dict[str, Any]) -> list[str]:
    """The console summary: ``format_summary`` plus the run-level notes (lost workers, open-loop
    rates, client saturation) and the verdict line (blocked, passed or why not, with the exit status)."""
    lines = [format_summary(results)]
    if results.get("lost_workers"):
        lost = results["lost_workers"]
        lines.append(f"WARNING: {len(lost)} worker(s) lost mid-run; their unreported requests are missing")
    load = results.get("load") or {}
    if load.get("mode") == "open":
        target = _UNLIMITED_RATE if load.get("unlimited_rate") else f"{load['target_rate_per_s']:g}"
        delay = results["latency"].get("dispatch_delay_s") or {}
        e2e_sched = results["latency"].get("e2e_from_schedule_s") or {}
        lines.append(_section("Open loop"))
        lines.append(_row("Target rate (req/s):", target))
        bound = _unlimited_rate_bound(load)
        if bound is not None:
            lines.append(_row("Concurrency bound:", bound))
        # sent: handed to the server (cancelled at the stop included); completed: the request throughput
        lines.append(_row("Request rate sent (req/s):", _num(load.get("achieved_rate_per_s"))))
        lines.append(_row("Request rate completed (req/s):", _num(results["throughput"]["requests_per_s"])))
        if delay.get("count"):
            lines.append(
                _row("Dispatch delay mean / max (ms):", f"{delay['mean'] * 1e3:.2f} / {delay['max'] * 1e3:.2f}")
            )
        if e2e_sched.get("count"):
            lines.append(_row("Mean E2E from intended send (ms):", f"{e2e_sched['mean'] * 1e3:.2f}"))
        if load.get("warning"):
            lines.append(f"WARNING: {load['warning']}")
    lines.extend(_replay_lines(results))
    lines.extend(_unsent_lines(results))
    lines.extend(_client_lines(results))
    lines.extend(_drift_lines(results.get("drift")))
    lines.extend(_server_lines(results))
    lines.extend(f"WARNING: {warning}" for warning in results.get("server_warnings") or [])
    if results.get("client_saturated") and (results.get("client_cpu_saturated_s") or 0) > 0:
        lines.append(
            f"WARNING: load generator saturated (CPU > 90% for {results['client_cpu_saturated_s']} s): "
            "latencies unreliable; add workers (--processes N)"
        )
    lines.append(results.get("verdict") or judge(results).text)
    return lines


def _unlimited_rate_bound(load: dict[str, Any]) -> str | None:
    """With ``--request-rate inf``: what bounded the load (``-u N`` users or ``--max-concurrency``); else None.

    None too for a results file written before the load section said so.
    """
    by, cap = load.get("in_flight_cap_by"), load.get("in_flight_cap")
    if not load.get("unlimited_rate") or by is None:
        return None
    requests = "request" if cap == 1 else "requests"
    if by == "max_concurrency":
        return f"--max-concurrency {cap} (rate unlimited: at most {cap} {requests} in flight, fewer than the users)"
    if cap is None:
        return "the users, -u (rate unlimited: one request in flight per user)"
    users = "user" if cap == 1 else "users"
    return f"-u {cap} {users} (rate unlimited: at most {cap} {requests} in flight, one per user)"


def _unsent_lines(results: dict[str, Any]) -> list[str]:
    """A warning when the run ended (``-t``, STOP) before the requests it was to send: the rest were never sent.

    ``--num-requests N`` and a trace (N = its lines) ask for exactly N
    requests; those finished, cancelled at the stop or skipped were sent (or
    tried); the figures cover only them.
    """
    asked = (results.get("run") or {}).get("num_requests")
    requests = results["requests"]
    if not asked or results.get("blocked") or results.get("partial"):
        return []
    sent = requests["total"] + requests.get("cancelled", 0) + requests.get("skipped", 0)
    if sent >= asked:
        return []
    what = "trace lines" if (results.get("load") or {}).get("mode") == "trace" else "--num-requests"
    return [
        f"WARNING: the run ended before it sent all its requests: {sent} of {asked} ({what}); the other "
        f"{asked - sent} were never sent, and the figures cover only those sent. Give -t more time to send them all"
    ]


def _client_lines(results: dict[str, Any]) -> list[str]:
    """The client's clock and read lag, and a warning when the lag may have moved the latencies."""
    client = results.get("client") or {}
    lag = client.get("read_lag_s") or {}
    if not client.get("clock"):
        return []
    lines = [_section("Client")]
    lines.append(_row("Clock for arrival times:", str(client["clock"])))
    if lag.get("count"):
        lines.append(
            _row(
                "Read lag mean / P99 / max (ms):",
                f"{lag['mean'] * 1e3:.2f} / {lag['p99'] * 1e3:.2f} / {lag['max'] * 1e3:.2f}",
            )
        )
    lagged = client.get("lagged_requests") or 0
    if lagged:
        per_request = client.get("request_lag_s") or {}
        lines.append(
            _row(
                f"Requests maybe > {client['request_lag_limit_s'] * 1e3:g} ms off:",
                f"{lagged} of {per_request.get('count') or lagged}",
            )
        )
    if client.get("read_lag_saturated") or lagged:
        p99_s = lag["p99"] if lag.get("p99") is not None and lag["p99"] > client["read_lag_limit_s"] else None
        # the largest bound of any request: its read lags, or its send lag when larger
        worst_s = max((client.get("request_lag_s") or {}).get("max") or 0.0, lag.get("max") or 0.0)
        if p99_s is not None:
            # one decimal, or two where one would round down onto the limit ("2.0 ms" above a 2 ms limit)
            digits = 1 if round(p99_s * 1e3, 1) > client["read_lag_limit_s"] * 1e3 else 2
            head = f"latencies may include up to {p99_s * 1e3:.{digits}f} ms (P99; max {worst_s * 1e3:.1f} ms)"
        else:
            head = f"{lagged} request(s) may have TTFT, ITL or E2E off by up to {worst_s * 1e3:.1f} ms (max"
            head += f"; read lag P99 {lag['p99'] * 1e3:.1f} ms)" if lag.get("p99") is not None else ")"
        lines.append(
            f"WARNING: {head} "
            f"of client delay: events piled up behind late reads, and share the newest one's kernel stamp, or the "
            "kernel held the client while it sent "
            f"(limit {client['read_lag_limit_s'] * 1e3:g} ms P99, "
            f"{client.get('request_lag_limit_s', 0.01) * 1e3:g} ms for any request; a late read of one event "
            "is still timed exactly). Give the client more CPU: more worker "
            "processes (--processes N) or machines, or fewer users per process"
        )
    return lines


_DRIFT_LINES = (
    ("ttft_p99_s", "TTFT P99 (ms)", 1e3, ".2f"),
    ("itl_p99_s", "ITL P99 (ms)", 1e3, ".2f"),
    ("e2e_p99_s", "E2E P99 (ms)", 1e3, ".2f"),
    ("output_tokens_per_s", "Output tok/s", 1.0, ".1f"),
    ("error_ratio", "Error ratio", 1.0, ".3f"),
    ("client_rss_bytes", "Client RSS (MiB)", 2.0**-20, ".1f"),
)


def _drift_lines(drift: Mapping[str, Any] | None) -> list[str]:
    """The drift block: each metric's first and last stretch, its change, and DRIFT past its tolerance.

    Nothing for a run too short to judge (fewer intervals than ``min_intervals``): its note stays in the results.
    """
    if not drift:
        return []
    if not drift.get("judged"):
        if (drift.get("intervals") or 0) < (drift.get("min_intervals") or 0):
            return []  # a short run (the results keep the note): no line that reads like a fault
        return [_row("Drift:", str(drift.get("note") or "not judged"))]
    first, last = drift["first"], drift["last"]
    lines = [_section(f"Drift (first vs last {drift['stretch_share']:.0%})")]
    lines.append(_row("Stretches (s):", _stretches(first, last)))
    metrics = drift.get("metrics") or {}
    for name, label, scale, spec in _DRIFT_LINES:
        m = metrics.get(name)
        if m is None:
            continue
        values = " -> ".join("n/a" if v is None else f"{v * scale:{spec}}" for v in (m["first"], m["last"]))
        lines.append(_row(f"{label}:", f"{values}  {_change(m)}"))
    if drift.get("flagged"):
        lines.append(f"WARNING: drift beyond tolerance: {', '.join(drift['flagged'])}")
    return lines


def _stretches(first: Mapping[str, Any], last: Mapping[str, Any]) -> str:
    """``0-2 vs 20-22``, or every bound to 0.1 s when one is not whole (``0.0-2.0 vs 22.0-23.5``)."""
    bounds = [round(float(b[k]), 1) for b in (first, last) for k in ("from_s", "to_s")]
    spec = ".0f" if all(b.is_integer() for b in bounds) else ".1f"
    a, b, c, d = (f"{x:{spec}}" for x in bounds)
    return f"{a}-{b} vs {c}-{d}"


def _change(metric: Mapping[str, Any]) -> str:
    change, limit = metric["change"], metric["tolerance"]
    if metric["relative"]:
        text, bound = ("n/a" if change is None else f"{change:+.0%}"), f"{limit:+.0%}"
    else:
        text, bound = ("n/a" if change is None else f"{change:+.3f}"), f"{limit:+.3g}"
    flag = "  DRIFT" if metric["flagged"] else "" if metric.get("enough_samples", True) else "  (few samples)"
    if metric.get("samples") == [0, 0]:
        flag = "  (no samples)"  # e.g. output tok/s of embeddings, which generate nothing
    return f"{text} (tolerance {bound}){flag}"


def _cached_beside_server(results: Mapping[str, Any]) -> list[str]:
    """The client's view of the prefix cache (usage's cached prompt tokens), beside the server's counters."""
    tok = results.get("tokens") or {}
    cached, prompt = tok.get("cached_prompt"), tok.get("prompt")
    if cached is None:
        return []
    share = f" ({cached / prompt * 100:.1f}% of input)" if prompt else ""
    return [_row("Cached prompt tokens (usage):", f"{cached:,}{share}")]


def _server_lines(results: Mapping[str, Any]) -> list[str]:
    """The summary's server block: gauges, server latencies, the token check and the TTFT split; [] without one."""
    server = results.get("server")
    if not server:
        return []
    urls = ", ".join(e["url"] for e in server["endpoints"] if e["scrapes"])
    lines = [_section(f"Server ({server['kind']})"), _row("Metrics scraped from:", urls or "n/a")]
    gauges = server["gauges"]
    for key, label, scale, unit in _GAUGE_LINES:
        g = gauges[key]
        if g["samples"]:
            lines.append(_row(f"{label} mean / max:", f"{g['mean'] * scale:.1f}{unit} / {g['max'] * scale:.1f}{unit}"))
    for key, label in _LATENCY_LINES:
        h = server["latency"][key]
        if h and h["count"]:
            p50 = "n/a" if h["p50"] is None else f"{h['p50'] * 1e3:.2f}{_server_range(h.get('p50_range'))}"
            lines.append(_row(f"Server {label} mean / p50 (ms):", f"{h['mean'] * 1e3:.2f} / {p50}"))
    counters = server["counters"]
    if counters.get("preemptions") is not None:
        lines.append(_row("Preemptions:", f"{counters['preemptions']:,}"))
    if server.get("prefix_cache_hit_ratio") is not None:
        lines.append(_row("Prefix-cache hit ratio:", f"{server['prefix_cache_hit_ratio'] * 100:.1f}%"))
    lines.extend(_cached_beside_server(results))
    check = server["cross_check"]
    figures = ", ".join(
        f"{k} {server[k]:,}" for k in ("prompt_tokens", "generation_tokens", "prompt_cached_tokens") if server[k]
    )
    lines.append(f"Tokens: {check['tokens']}" + (f" (server: {figures})" if figures else ""))
    lines.append(_row(*ttft_split_row(server)))
    if not server["complete"]:
        failed = [f"{e['url']} ({e['error']})" for e in server["endpoints"] if e["failed_scrapes"]]
        lines.append(f"WARNING: server metrics incomplete; failed scrapes: {'; '.join(failed) or 'start or end'}")
    return lines


def ttft_split_row(server: Mapping[str, Any]) -> tuple[str, str]:
    """The "TTFT client − server" row of a results ``server`` section: (label, text).

    The text gives the mean / p50 difference (ms) with what it is, and for a
    figure that is n/a says why: the server has no TTFT histogram or timed no
    first token, the two sides timed different requests or windows
    (``not_comparable``), the client timed no first token, or the p50
    difference is finer than the server's histogram can tell.
    """
    split = (server.get("cross_check") or {}).get("ttft_client_minus_server_s")
    if not split:
        ttft = (server.get("latency") or {}).get("ttft_s")
        why = "the server exposes no TTFT histogram" if ttft is None else "the server timed no first token in the run"
        return "TTFT client − server:", f"n/a: {why}"
    if split.get("not_comparable"):
        return "TTFT client − server:", f"n/a, not comparable: {split['not_comparable']}"
    if split["mean"] is None:
        return "TTFT client − server:", "n/a: the client timed no first token (no successful streamed request)"
    parts = [_signed_ms(split["mean"]), "n/a" if split["p50"] is None else _signed_ms(split["p50"])]
    resolution = split.get("p50_resolution_s")
    if split["p50"] is None:
        parts[1] += (
            f" (finer than the server's {resolution * 1e3:.2f} ms p50 range)"
            if resolution
            else " (the server's p50 is in its +Inf bucket)"
        )
    return "TTFT client − server mean / p50 (ms):", f"{' / '.join(parts)} {_split_gloss(split)}"


def _signed_ms(value_s: float) -> str:
    """``value_s`` in ms with its sign and two decimals; a value that rounds to zero is ``+0.00``, never ``-0.00``."""
    return f"{round(value_s * 1e3, 2) + 0.0:+.2f}"


def _split_gloss(split: Any) -> str:
    """What a client − server TTFT difference over the same requests is; a negative mean is not network time."""
    mean = split.get("mean")
    if mean is not None and round(mean * 1e3, 2) < 0:  # as printed: "-0.00" would be a sign on nothing
        return "(negative: the server's TTFT spans more than the client's, e.g. its clock starts earlier)"
    return "(network + HTTP + client time)"


def _server_range(bounds: Any) -> str:
    """`` (in 0.00–40.00)`` after a server quantile whose histogram range is wide (> 10% of its upper end); else ""."""
    if not isinstance(bounds, list) or len(bounds) != 2:
        return ""  # a results file written before quantile ranges
    lower, upper = bounds
    if upper is None:
        return f" (in {lower * 1e3:.2f}–+Inf)"
    if upper - lower <= 0.1 * upper:
        return ""
    return f" (in {lower * 1e3:.2f}–{upper * 1e3:.2f})"


def results_line(results: Mapping[str, Any]) -> str:
    """The results document as one marked line (``RESULTS_LINE_PREFIX`` + compact JSON), without newline.

    Raises:
        ValueError: ``results`` holds NaN or infinity (not valid JSON).
    """
    return RESULTS_LINE_PREFIX + json.dumps(results, separators=(",", ":"), allow_nan=False)
