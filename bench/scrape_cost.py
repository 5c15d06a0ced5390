"""Scrape cost of the Prometheus exporter (figures, not a test).

(a) Time of one ``GET /metrics`` served by ``PrometheusExporter`` on loopback,
    with 2 user classes (chat and completions) and every family: statistics of
    5,000 requests per endpoint (TTFT, ITL, TPOT, E2E histograms well spread)
    and a live window holding 10 s of 0.5 s deltas from 2 workers. Measured
    without compression and for Prometheus 2.x's request (it accepts OpenMetrics
    and gzip; the exporter answers the text format, gzipped). Median and p95
    over 50 scrapes, plus response size.
(b) The master's CPU share at a 1 s scrape interval during a 2-worker run
    (``--processes 2``, both user classes, ``llmload sim``): CPU seconds of the
    master process over 10 s of steady load divided by 10 s, with a scraper
    fetching ``/metrics`` every second as Prometheus does, compared with the
    same run with the exporter off (``--prometheus-port 0``).

Run: ``python bench/scrape_cost.py`` from the repository root.
"""

from __future__ import annotations

import gzip
import math
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from benchlib import private_master_port, start_sim

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llmload.aggregate.stats import LLMStats  # noqa: E402
from llmload.exporters.prometheus_server import PrometheusExporter  # noqa: E402
from llmload.exporters.window import RunView, SlidingWindow  # noqa: E402
from llmload.request.record import RequestRecord, TokenCount, TokenSource  # noqa: E402

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
SCRAPES = 50
RUN_S = 16
MEASURE_FROM_S = 3.0
MEASURE_S = 10.0


def _record(rng: random.Random, endpoint: str) -> RequestRecord:
    ttft = rng.lognormvariate(math.log(0.08), 0.7)
    n = rng.randint(16, 256)
    times = [ttft]
    for _ in range(n - 1):
        times.append(times[-1] + rng.lognormvariate(math.log(0.02), 0.4))
    return RequestRecord(
        endpoint=endpoint,
        model="llmload-sim",
        started_at_unix=1_700_000_000.0,
        token_times_s=times,
        first_content_s=ttft,
        end_s=times[-1] + 0.002,
        prompt_tokens=TokenCount(100, TokenSource.SERVER),
        completion_tokens=TokenCount(n, TokenSource.SERVER),
    )


def _stats(rng: random.Random, per_endpoint: int) -> LLMStats:
    stats = LLMStats.empty()
    for endpoint in ("chat", "completions"):
        for _ in range(per_endpoint):
            stats.add(_record(rng, endpoint))
    return stats


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def bench_scrape() -> None:
    rng = random.Random(1)
    totals = _stats(rng, 5000)
    window = SlidingWindow(10.0)
    for _ in range(20):  # 10 s of 0.5 s deltas from 2 workers
        for worker in ("w1", "w2"):
            window.add(_stats(rng, 10), worker)
    exporter = PrometheusExporter(
        lambda: RunView(
            stats=totals,
            window=window.view(),
            users=256,
            in_flight_requests=200,
            workers=2,
            run_id="bench",
            host="http://127.0.0.1:8000",
            model="llmload-sim",
            version="bench",
            started_at_unix=time.time(),
        )
    )
    port = exporter.start(0, "127.0.0.1")
    url = f"http://127.0.0.1:{port}/metrics"
    print("(a) one /metrics scrape, 2 endpoints x (4 histograms x 335 buckets) + counters + window gauges")
    for label, headers in (
        ("text 0.0.4, identity", {}),
        ("Prometheus' request (text, gzip)", {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}),
    ):
        times_ms: list[float] = []
        size = raw_size = 0
        for _ in range(SCRAPES):
            request = urllib.request.Request(url, headers=headers)
            t0 = time.perf_counter()
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
                gzipped = response.headers.get("Content-Encoding") == "gzip"
            times_ms.append((time.perf_counter() - t0) * 1000)
            size = len(body)
            raw_size = len(gzip.decompress(body)) if gzipped else size
        print(
            f"    {label:32s} median {statistics.median(times_ms):6.1f} ms  p95 {_percentile(times_ms, 0.95):6.1f} ms"
            f"  {size / 1024:6.0f} KiB on the wire ({raw_size / 1024:.0f} KiB text)"
        )
    exporter.stop()


# ── (b) master CPU share during a run ────────────────────────────────────
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _scraper(url: str, stop: threading.Event, durations_ms: list[float]) -> None:
    while not stop.wait(1.0):
        request = urllib.request.Request(url, headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                response.read()
        except OSError:
            continue  # not up yet / already gone
        durations_ms.append((time.perf_counter() - t0) * 1000)


def master_cpu_share(sim_url: str, *, exporter: bool) -> tuple[float, list[float]]:
    """CPU seconds per second of the master process over the measured part of a 2-worker run."""
    metrics_port = _free_port() if exporter else 0
    master_port = _free_port()
    argv = [
        sys.executable, "-m", "locust", "-f", "locustfiles/chat.py,locustfiles/completions.py",
        "--headless", "--only-summary", "-H", sim_url, "--processes", "2", *private_master_port(),
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port), "--master-port", str(master_port),
        "-u", "256", "-r", "256", "-t", f"{RUN_S}s", "--skip-preflight",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port), "--prometheus-grace", "5",
    ]  # fmt: skip
    stop = threading.Event()
    durations_ms: list[float] = []
    master = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scraper = None
    if exporter:
        scraper = threading.Thread(
            target=_scraper, args=(f"http://127.0.0.1:{metrics_port}/metrics", stop, durations_ms), daemon=True
        )
        scraper.start()
    try:
        process = psutil.Process(master.pid)
        time.sleep(MEASURE_FROM_S)
        before = process.cpu_times()
        time.sleep(MEASURE_S)
        after = process.cpu_times()
        share = (after.user + after.system - before.user - before.system) / MEASURE_S
        master.wait(RUN_S + 60)
    finally:
        stop.set()
        if scraper is not None:
            scraper.join(10)
        if master.poll() is None:
            master.kill()
            master.wait(10)
    return share, durations_ms


def bench_master() -> None:
    sim_url, sim = start_sim("--decode-step-ms", "20", "--output-len-mean", "64")
    try:
        print("(b) master CPU during a 2-worker run (256 users, chat + completions), 10 s of steady load")
        off, _ = master_cpu_share(sim_url, exporter=False)
        on, scrapes = master_cpu_share(sim_url, exporter=True)
    finally:
        sim.terminate()
        sim.wait(10)
    print(f"    exporter off:                     master CPU {max(off, 0.0) * 100:5.1f}% of one core")
    print(
        f"    exporter on, scraped every 1 s:   master CPU {on * 100:5.1f}% of one core"
        f"  ({len(scrapes)} scrapes, median {statistics.median(scrapes) if scrapes else float('nan'):.1f} ms)"
    )
    print(f"    difference (exporter + 0.5 s live reports + scrapes): {(on - off) * 100:+.1f} points")


if __name__ == "__main__":
    bench_scrape()
    bench_master()
