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
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchlib import REPO, pin, start_sim
from prometheus_client.parser import text_string_to_metric_families


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
        *pin(0), sys.executable, "-m", "locust", "-f", "locustfiles/completions.py", "--headless",
        "--only-summary", "-H", url, "-u", str(users), "-r", str(users), "--num-requests", str(requests),
        "-t", "600s", "--ignore-eos", "--max-tokens", str(max_tokens), "--results-json", str(out),
        "--loglevel", "WARNING", "--prometheus-port", "0",
    ]  # fmt: skip
    code = subprocess.call(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise SystemExit(f"locust exited {code}: {' '.join(cmd)}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_cpu_per_chunk(tmp: Path) -> None:
    users, requests, max_tokens = 1024, 3072, 200
    url, sim = start_sim("--max-num-seqs", "1024", "--decode-step-ms", "25", "--decode-ms-per-seq", "0", core=1)
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
    print(
        f"    requests {requests}, chunks {chunks} (simulator served {served:.0f} tokens,"
        " preflight probes and the start-up run included)"
    )
    print(f"    client CPU {cpu:.2f} s − start-up/shut-down {base_cpu:.2f} s over {wall:.1f} s wall")
    tok_s = results["throughput"]["output_tokens_per_s"]
    print(f"    => {us:.2f} µs per chunk (target ≤ 3 µs); output tok/s {tok_s:.0f}")
    print(f"    client TTFT p50 {results['latency']['ttft_s']['p50'] * 1e3:.1f} ms")


def bench_ttft_error(tmp: Path) -> None:
    """Run the measurement core (StreamingClient over GeventHTTPTransport, as each Locust user does)
    in one gevent process pinned to core 0; the first request of every stream (connection set-up,
    which the server cannot see) is excluded from both sides."""
    del tmp
    url, sim = start_sim(
        "--max-num-seqs", "1024", "--decode-step-ms", "10", "--decode-ms-per-seq", "0",
        "--queue-delay-ms", "40", "--prefill-base-ms", "0", "--prefill-ms-per-token", "0", core=1,
    )  # fmt: skip
    try:
        code = subprocess.call([*pin(0), sys.executable, __file__, "--ttft-client", url, "256", "8"], cwd=REPO)
    finally:
        sim.terminate()
        sim.wait(10)
    if code != 0:
        raise SystemExit(f"TTFT client exited {code}")


def ttft_client(url: str, streams: int, per_stream: int) -> int:
    import gevent.pool

    from llmload.client import StreamingClient
    from llmload.config import Timeouts
    from llmload.histogram import LatencyHistogram
    from llmload.payloads import build_completion_request
    from llmload.transport import GeventHTTPTransport

    request = build_completion_request(
        model="llmload-sim", prompt="hello world", max_tokens=50, ignore_eos=True, stream=True
    )
    clients = [StreamingClient(GeventHTTPTransport(url, headers={}, timeouts=Timeouts())) for _ in range(streams)]
    pool = gevent.pool.Pool(streams)
    pool.map(lambda c: c.run(request), clients)  # warm-up: connect every stream
    before = scrape(url)
    ttft = LatencyHistogram.empty()

    def measure(client: StreamingClient) -> None:
        for _ in range(per_stream):
            record = client.run(request)
            if record.ttft_s is not None:
                ttft.add(record.ttft_s)

    pool.map(measure, clients)
    after = scrape(url)
    name = "llmload_sim_time_to_first_token_seconds"
    delta = {k: after[k] - before.get(k, 0.0) for k in after if k.startswith(name)}
    server_mean = delta[f"{name}_sum"] / delta[f"{name}_count"]
    server_p99 = _server_quantile(delta, name, 0.99)
    mean, p99 = ttft.mean or 0.0, ttft.quantile(0.99) or 0.0
    print(f"(b) TTFT error at {streams} streams (simulator TTFT ≈ 50 ms, ITL 10 ms), {ttft.count} requests")
    print(f"    client TTFT mean {mean * 1e3:.2f} ms, server-side mean {server_mean * 1e3:.2f} ms")
    print(f"    => mean error {(mean - server_mean) * 1e3:+.2f} ms (target ≤ 1 ms)")
    if server_p99 is not None:
        print(
            f"    client p99 {p99 * 1e3:.2f} ms, server p99 ≤ {server_p99 * 1e3:.0f} ms (1 ms buckets)"
            f" => p99 error ≈ {(p99 - server_p99) * 1e3:+.1f} ms"
            " (target ≤ 2 ms; distribution p99s, not pairs)"
        )
    return 0


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
    if len(sys.argv) == 5 and sys.argv[1] == "--ttft-client":
        return ttft_client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    with tempfile.TemporaryDirectory() as tmp:
        bench_cpu_per_chunk(Path(tmp))
        bench_ttft_error(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
