"""`make bench`: client cost per streamed chunk and TTFT accuracy (figures, not a test).

One Locust process (one worker) pinned to core 0, `llmload sim` pinned to core 1.

(a) CPU µs per chunk at 1,024 concurrent streams: client CPU time (user + sys,
    from getrusage of the locust child) of a run of exactly N requests with
    ignore_eos, minus the CPU of a one-request run (start-up and shut-down),
    divided by the chunks streamed (the simulator sends one token per chunk,
    so chunks = completion tokens, cross-checked against its /metrics).
(b) TTFT error at 256 streams, simulator TTFT ≈ 50 ms and ITL 10 ms: mean of
    (client TTFT) − mean of (server-side TTFT from the simulator's histogram
    sum/count), exact; and client p99 − server p99 (distribution quantiles,
    not per-request pairs).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent


def _pin(core: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(core)]
    return []


def start_sim(*args: str) -> tuple[str, subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [*_pin(1), sys.executable, "-m", "llmload.sim", "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if "http://" not in line:
        proc.kill()
        raise SystemExit(f"sim did not start: {line!r}")
    return line[line.index("http://") :], proc


def scrape(url: str) -> dict[str, float]:
    """Return {sample name: value summed over labels}, and {"<name>@le": cumulative count} for buckets."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if "le" in sample.labels:
                key = f"{sample.name}@{sample.labels['le']}"
            out[key] = out.get(key, 0.0) + sample.value
    return out


def run_locust(url: str, users: int, requests: int, max_tokens: int, out: Path) -> float:
    """Run one standalone Locust process; return its CPU seconds (user + sys)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [
        *_pin(0), sys.executable, "-m", "locust", "-f", "locustfiles/completions.py", "--headless",
        "--only-summary", "-H", url, "-u", str(users), "-r", str(users), "--num-requests", str(requests),
        "-t", "600s", "--ignore-eos", "--max-tokens", str(max_tokens), "--results-json", str(out),
        "--loglevel", "WARNING",
    ]  # fmt: skip
    code = subprocess.call(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise SystemExit(f"locust exited {code}: {' '.join(cmd)}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_cpu_per_chunk(tmp: Path) -> None:
    users, requests, max_tokens = 1024, 3072, 200
    url, sim = start_sim("--max-num-seqs", "1024", "--decode-step-ms", "25", "--decode-ms-per-seq", "0")
    try:
        base_cpu = run_locust(url, 1, 1, 1, tmp / "base.json")
        t0 = time.monotonic()
        cpu = run_locust(url, users, requests, max_tokens, tmp / "a.json")
        wall = time.monotonic() - t0
        results = json.loads((tmp / "a.json").read_text())
        chunks = results["tokens"]["completion"]
        served = scrape(url)["llmload_sim_completion_tokens_total"]
    finally:
        sim.terminate()
        sim.wait(10)
    us = (cpu - base_cpu) / chunks * 1e6
    print("(a) client CPU per streamed chunk, 1,024 concurrent streams, one worker process on one core")
    print(f"    requests {requests}, chunks {chunks} (simulator served {served - 1:.0f} + 1 start-up token)")
    print(f"    client CPU {cpu:.2f} s − start-up/shut-down {base_cpu:.2f} s over {wall:.1f} s wall")
    print(f"    => {us:.2f} µs per chunk (target ≤ 3 µs); output tok/s {results['throughput']['output_tokens_per_s']:.0f}")
    print(f"    client TTFT p50 {results['latency']['ttft_s']['p50'] * 1e3:.1f} ms")


def bench_ttft_error(tmp: Path) -> None:
    url, sim = start_sim(
        "--max-num-seqs", "1024", "--decode-step-ms", "10", "--decode-ms-per-seq", "0",
        "--prefill-base-ms", "40", "--prefill-ms-per-token", "0",
    )  # fmt: skip
    try:
        run_locust(url, 256, 1280, 50, tmp / "b.json")
        metrics = scrape(url)
    finally:
        sim.terminate()
        sim.wait(10)
    results = json.loads((tmp / "b.json").read_text())
    client = results["latency"]["ttft_s"]
    server_mean = metrics["llmload_sim_time_to_first_token_seconds_sum"] / metrics[
        "llmload_sim_time_to_first_token_seconds_count"
    ]
    server_p99 = _server_quantile(metrics, "llmload_sim_time_to_first_token_seconds", 0.99)
    print("(b) TTFT error at 256 streams (simulator TTFT ≈ 50 ms, ITL 10 ms)")
    print(f"    client TTFT mean {client['mean'] * 1e3:.2f} ms, server-side mean {server_mean * 1e3:.2f} ms")
    print(f"    => mean error {(client['mean'] - server_mean) * 1e3:+.2f} ms (target ≤ 1 ms)")
    if server_p99 is not None:
        print(
            f"    client p99 {client['p99'] * 1e3:.2f} ms vs server p99 ≤ {server_p99 * 1e3:.2f} ms (bucket edge)"
            f" => p99 error ≈ {(client['p99'] - server_p99) * 1e3:+.2f} ms (target ≤ 2 ms)"
        )


def _server_quantile(metrics: dict[str, float], name: str, q: float) -> float | None:
    """Upper edge of the first bucket whose cumulative count reaches q (1 ms resolution below 100 ms)."""
    total = metrics.get(f"{name}_count", 0.0)
    edges = sorted(
        (float(key.split("@", 1)[1]), value) for key, value in metrics.items() if key.startswith(f"{name}_bucket@")
    )
    for edge, cumulative in edges:
        if total and cumulative >= q * total:
            return edge
    return None


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        bench_cpu_per_chunk(Path(tmp))
        bench_ttft_error(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
