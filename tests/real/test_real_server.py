"""Main paths against llama.cpp's native ``llama-server``: llmload's totals equal the server's own counters.

Opt-in (``make test-real``). Each test runs a real ``locust`` process with
``--num-requests`` against a ``llama-server`` on loopback (tiny random-weight
model, 8 ``--parallel`` slots) and compares the results file with the deltas
of the server's Prometheus counters over the run:

- ``llamacpp:tokens_predicted_total``: generated tokens;
- ``llamacpp:prompt_tokens_total``: prompt tokens *processed*, excluding
  tokens reused from the prompt cache, which ``llamacpp:prompt_tokens_cached_total``
  counts. ``usage.prompt_tokens`` (what llmload reports) includes the cached
  ones, so the exact comparison runs against a server started with
  ``--no-cache-prompt``; a cached server is compared with the sum.

llama-server adds a request's generated tokens to its counters when the slot
is released and its prompt tokens after the decode step, both on the server
loop that also answers ``/metrics``; the counters are read until two reads
agree (bounded) so that a late update is never mistaken for a mismatch.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmload.net.scrape import ServerScraper
from tests.integration.procs import locust_argv
from tests.real.conftest import REPO_ROOT, LlamaServer

pytestmark = [pytest.mark.real, pytest.mark.integration]

COUNTERS = (
    "llamacpp:tokens_predicted_total",
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
)
NUM_REQUESTS = 100
LOCUST_TIMEOUT_S = 120
SETTLE_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def server(start_llama_server: Callable[[str], LlamaServer]) -> LlamaServer:
    """llama-server without prompt caching: every prompt token is processed and counted."""
    return start_llama_server("--no-cache-prompt")


@pytest.fixture(scope="module")
def cached_server(start_llama_server: Callable[[str], LlamaServer]) -> LlamaServer:
    """llama-server with its default prompt cache (repeated prompts reuse KV entries)."""
    return start_llama_server("")


def read_counters(url: str) -> dict[str, float]:
    """Scrape ``/metrics`` once; return the ``COUNTERS`` samples."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return {name: samples[name] for name in COUNTERS}


def settled_counters(url: str) -> dict[str, float]:
    """Read the counters until two reads 0.2 s apart agree (at most ``SETTLE_TIMEOUT_S``)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = read_counters(url)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = read_counters(url)
        if now == last:
            return now
        last = now
    return last


def run_locust(server: LlamaServer, locustfile: str, out: Path, *extra: str) -> dict[str, Any]:
    """Run ``--num-requests NUM_REQUESTS`` with 8 users; return the results file and the wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        locust_argv([
            "-f", locustfile, "--headless", "--only-summary",
            "-H", server.url, "-u", "8", "-r", "8", "--num-requests", str(NUM_REQUESTS), "-t", "90s",
            "--max-tokens", "32", "--results-json", str(out), "--skip-preflight", "--prometheus-port", "0",
            *extra,
        ]),
        capture_output=True,
        text=True,
        timeout=LOCUST_TIMEOUT_S,
        cwd=REPO_ROOT,
        check=False,
    )  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    results["_wall_s"] = time.perf_counter() - t0
    return results


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in COUNTERS}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
@pytest.mark.parametrize("locustfile", ["locustfiles/chat.py", "locustfiles/completions.py"])
def test_real_token_totals_equal_llama_server_counters(server, tmp_path, locustfile, stream):
    before = settled_counters(server.url)
    results = run_locust(server, locustfile, tmp_path / "r.json", *([] if stream else ["--no-stream"]))
    d = delta(before, settled_counters(server.url))
    print(
        f"\n{locustfile} stream={stream}: {NUM_REQUESTS} requests in {results['_wall_s']:.1f} s (locust process), "
        f"duration_s {results['duration_s']:.2f}, completion {results['tokens']['completion']}, "
        f"prompt {results['tokens']['prompt']}, output tok/s {results['throughput']['output_tokens_per_s']:.0f}, "
        f"ttft p50 {results['latency']['ttft_s']['p50']}, errors {results['errors']}"
    )
    # totals first: they must hold even if some requests failed (failures never reach the totals)
    assert results["tokens"]["completion"] == d["llamacpp:tokens_predicted_total"] > 0
    assert results["tokens"]["prompt"] == d["llamacpp:prompt_tokens_total"] > 0
    assert d["llamacpp:prompt_tokens_cached_total"] == 0
    assert results["tokens"]["completion_source"] == "server"
    assert results["tokens"]["prompt_source"] == "server"
    assert results["errors"] == []
    assert results["requests"]["succeeded"] == NUM_REQUESTS
    if stream:
        assert results["latency"]["ttft_s"]["count"] == NUM_REQUESTS
        # one token per chunk, except that a reply ending on EOS counts the unsent EOS token in its
        # usage (completion_tokens = chunks + 1): those requests' ITL is per chunk, hence "mixed"
        assert results["latency"]["itl_kind"] in ("token", "mixed")


def test_real_prompt_cache_splits_prompt_counter_but_usage_counts_all(cached_server, tmp_path):
    """With the prompt cache, usage.prompt_tokens = processed + reused; llamacpp:prompt_tokens_total only processed."""
    before = settled_counters(cached_server.url)
    results = run_locust(cached_server, "locustfiles/chat.py", tmp_path / "r.json")
    d = delta(before, settled_counters(cached_server.url))
    assert results["tokens"]["completion"] == d["llamacpp:tokens_predicted_total"]
    assert d["llamacpp:prompt_tokens_cached_total"] > 0  # every request repeats the same prompt
    assert results["tokens"]["prompt"] > d["llamacpp:prompt_tokens_total"]
    assert results["tokens"]["prompt"] == d["llamacpp:prompt_tokens_total"] + d["llamacpp:prompt_tokens_cached_total"]
    assert results["errors"] == []


def test_real_processes_2_totals_equal_llama_server_counters(server, tmp_path):
    """Master + 2 local workers: the merged totals still equal the server's counters."""
    before = settled_counters(server.url)
    results = run_locust(server, "locustfiles/chat.py", tmp_path / "r.json", "--processes", "2")
    d = delta(before, settled_counters(server.url))
    assert results["run"]["workers"] == 2
    assert results["tokens"]["completion"] == d["llamacpp:tokens_predicted_total"]
    assert results["tokens"]["prompt"] == d["llamacpp:prompt_tokens_total"]
    assert results["errors"] == []
    assert results["requests"]["succeeded"] == NUM_REQUESTS


def test_real_server_metrics_llamacpp_deltas_equal_client_totals(server, tmp_path):
    """--server-metrics auto reads llama-server's /metrics: its token deltas equal the client's totals."""
    results = run_locust(server, "locustfiles/chat.py", tmp_path / "r.json")
    s = results["server"]
    print(f"\nserver section: {json.dumps({k: s[k] for k in ('kind', 'prompt_tokens', 'generation_tokens')})}")
    assert s["kind"] == "llamacpp"
    assert s["complete"] is True
    assert s["names"]["generation_tokens"] == "llamacpp:tokens_predicted_total"
    assert s["generation_tokens"] == results["tokens"]["completion"] > 0
    assert s["prompt_tokens"] == results["tokens"]["prompt"] > 0
    assert s["prompt_cached_tokens"] == 0
    assert s["cross_check"]["tokens"] == "client = server"
    assert s["cross_check"]["ttft_client_minus_server_s"] is None  # llama-server has no TTFT histogram
    assert all(v is None for v in s["latency"].values())


def test_real_server_metrics_llamacpp_prompt_cache_is_named_as_the_cause(cached_server, tmp_path):
    results = run_locust(cached_server, "locustfiles/chat.py", tmp_path / "r.json")
    s = results["server"]
    assert s["prompt_cached_tokens"] > 0
    assert results["tokens"]["prompt"] == s["prompt_tokens"] + s["prompt_cached_tokens"]
    assert s["cross_check"]["prompt_tokens_diff"] == s["prompt_cached_tokens"]
    assert "reused from its cache" in s["cross_check"]["tokens"]
    assert 0 < s["prefix_cache_hit_ratio"] < 1


def test_real_server_metrics_llamacpp_processing_gauge_moves_under_load(server, tmp_path):
    """The llama.cpp gauges read under load: requests_processing rises above 0 (scraped every 0.5 s here)."""
    scraper = ServerScraper(f"{server.url}/metrics", (), model=server.model, interval_s=0.5)
    scraper.start()
    proc = subprocess.Popen(
        locust_argv([
            "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", server.url, "-u", "8", "-r", "8",
            "-t", "6s", "--max-tokens", "32", "--skip-preflight", "--server-metrics", "off",
        ]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + LOCUST_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            gevent.sleep(0.2)  # the scraper's greenlet runs meanwhile
    finally:
        proc.kill()
        proc.wait()
    section = scraper.finish()
    assert section is not None
    running = section["gauges"]["running_requests"]
    print(f"\nrequests_processing {running}, deferred {section['gauges']['waiting_requests']}")
    assert running["samples"] >= 5
    assert 0 < running["max"] <= server.parallel
