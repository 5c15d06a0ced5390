"""The results' ``server`` section with its cross-check, and the summary's server block (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmload.servermetrics.run import cross_check

__all__ = ["server_lines", "server_section"]

_W = 40
_GAUGE_LINES = (
    ("running_requests", "Running requests", 1.0, ""),
    ("waiting_requests", "Waiting requests", 1.0, ""),
    ("kv_cache_usage", "KV-cache usage", 100.0, "%"),
    ("gpu_utilization", "GPU utilisation", 100.0, "%"),
    ("gpu_memory_used_bytes", "GPU memory used (GiB)", 2.0**-30, ""),
    ("gpu_power_w", "GPU power (W)", 1.0, ""),
)
_LATENCY_LINES = (("ttft_s", "TTFT"), ("itl_s", "ITL"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"), ("queue_s", "Queue"))


def server_section(server: Mapping[str, Any] | None, results: Mapping[str, Any]) -> dict[str, Any] | None:
    """``server`` (a ``summarise`` result) plus ``cross_check`` against the client's figures in ``results``.

    The client's figures are ``tokens.prompt``, ``tokens.completion`` and
    ``latency.ttft_s.{mean, p50}`` of the same results document. None stays None.
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
    )
    return {**server, "cross_check": check}


def server_lines(results: Mapping[str, Any]) -> list[str]:
    """The summary's server block: gauges, server latencies, the token check and the TTFT split; [] without one."""
    server = results.get("server")
    if not server:
        return []
    urls = ", ".join(e["url"] for e in server["endpoints"] if e["scrapes"])
    lines = [f"--- Server ({server['kind']}: {urls}) " + "-" * 10]
    gauges = server["gauges"]
    pairs = [("running_requests", "Running requests", 1.0, ""), ("waiting_requests", "Waiting requests", 1.0, "")]
    pairs += [("kv_cache_usage", "KV-cache usage", 100.0, "%"), ("gpu_utilization", "GPU utilisation", 100.0, "%")]
    pairs += [
        ("gpu_memory_used_bytes", "GPU memory used (GiB)", 2.0**-30, ""),
        ("gpu_power_w", "GPU power (W)", 1.0, ""),
    ]
    for key, label, scale, unit in pairs:
        g = gauges[key]
        if g["samples"]:
            lines.append(f"{label + ' mean / max:':<{_W}}{g['mean'] * scale:.1f}{unit} / {g['max'] * scale:.1f}{unit}")
    for key, label in (
        ("ttft_s", "TTFT"),
        ("itl_s", "ITL"),
        ("tpot_s", "TPOT"),
        ("e2e_s", "E2E"),
        ("queue_s", "Queue"),
    ):
        h = server["latency"][key]
        if h and h["count"]:
            p50 = "n/a" if h["p50"] is None else f"{h['p50'] * 1e3:.2f}"
            lines.append(f"{'Server ' + label + ' mean / p50 (ms):':<{_W}}{h['mean'] * 1e3:.2f} / {p50}")
    counters = server["counters"]
    if counters.get("preemptions") is not None:
        lines.append(f"{'Preemptions:':<{_W}}{counters['preemptions']:,}")
    if server.get("prefix_cache_hit_ratio") is not None:
        lines.append(f"{'Prefix-cache hit ratio:':<{_W}}{server['prefix_cache_hit_ratio'] * 100:.1f}%")
    check = server["cross_check"]
    figures = ", ".join(
        f"{k} {server[k]:,}" for k in ("prompt_tokens", "generation_tokens", "prompt_cached_tokens") if server[k]
    )
    lines.append(f"Tokens: {check['tokens']}" + (f" (server: {figures})" if figures else ""))
    split = check["ttft_client_minus_server_s"]
    if split:
        parts = ["n/a" if v is None else f"{v * 1e3:+.2f}" for v in (split["mean"], split["p50"])]
        lines.append(
            f"{'TTFT client − server mean / p50 (ms):':<{_W}}{' / '.join(parts)} (network + HTTP + client time)"
        )
    if not server["complete"]:
        failed = [f"{e['url']} ({e['error']})" for e in server["endpoints"] if e["failed_scrapes"]]
        lines.append(f"WARNING: server metrics incomplete; failed scrapes: {'; '.join(failed) or 'start or end'}")
    return lines
