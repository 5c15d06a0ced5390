"""Many machines, one truth: a worker whose wall clock is 300 s off changes no duration, rate or time series.

A real master and two real ``--worker`` processes run against ``llmload sim``
on loopback, twice: once with every clock true, once with one worker's
``time.time()`` 300 s ahead. The offset comes from a ``sitecustomize`` module
in a temporary directory on that worker's ``PYTHONPATH`` (test support only:
nothing in llmload reads it), so the worker process itself, Locust and
llmload included, sees a wall clock five minutes off, as a container without
NTP would. Every run is bounded by ``-t`` and subprocess timeouts.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import free_port, run_locust
from tests.integration.test_sim import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHIFT_S = 300.0
RUN_S = 6
INTERVAL_S = 1.0

_SITECUSTOMIZE = """\
import time

_true_time = time.time


def _shifted_time():
    return _true_time() + {shift!r}


time.time = _shifted_time  # this process's wall clock only; monotonic clocks are untouched
"""


@pytest.fixture
def sim_url(sim_server) -> str:
    # Short replies (~6 tokens of 5 ms): many requests per run for the sums and rates to compare, at
    # little CPU each. With ~30-token replies, six traced processes beside a busy suite finished 70
    # requests in a run (2026-12-04): each request's CPU, not its 5 ms steps, set the count.
    return sim_server("--decode-step-ms", "5", "--output-len-mean", "6")


def _shifted_env(tmp_path: Path, shift_s: float) -> dict[str, str]:
    site = tmp_path / f"clock_{shift_s:+g}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(shift=shift_s))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def _run(sim_url: str, tmp_path: Path, name: str, shift_s: float) -> tuple[dict[str, Any], str]:
    """Master + 2 workers for RUN_S s, worker 2's wall clock ``shift_s`` off; return the results and the master log."""
    out = tmp_path / f"{name}.json"
    port = free_port()
    common = ["-f", "locustfiles/chat.py"]
    worker_argv = [sys.executable, "-m", "locust", *common, "--worker", "--master-host", "127.0.0.1"]
    envs = [dict(os.environ), _shifted_env(tmp_path, shift_s) if shift_s else dict(os.environ)]
    logs = [(tmp_path / f"{name}_worker{i}.log").open("w") for i in range(2)]
    workers = [
        subprocess.Popen(
            [*worker_argv, "--master-port", str(port)], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        for env, log in zip(envs, logs, strict=True)
    ]
    try:
        proc = run_locust(
            [
                *common, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                "--headless", "--expect-workers", "2", "-H", sim_url, "-u", "8", "-r", "8", "-t", f"{RUN_S}s",
                "--stop-timeout", "10", "--max-tokens", "8", "--timeseries-interval", str(INTERVAL_S),
                "--results-json", str(out), "--skip-preflight", "--json-file", str(tmp_path / f"{name}_locust"),
            ],
            timeout_s=90,
        )  # fmt: skip
    finally:
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=10)
        for log in logs:
            log.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    results["locust_stats"] = json.loads((tmp_path / f"{name}_locust.json").read_text())
    return results, proc.stderr


def _totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["endpoint"] is None]


def test_a_worker_clock_300_s_ahead_changes_no_duration_rate_or_series_and_is_warned(sim_url, tmp_path):
    # The two runs at once (each its own master port and files; the simulator serves both): most of a
    # run is its -t, and side by side they share the machine's load alike.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        true_run = pool.submit(_run, sim_url, tmp_path, "true", 0.0)
        shifted_run = pool.submit(_run, sim_url, tmp_path, "shifted", SHIFT_S)
        (true, true_log), (shifted, shifted_log) = true_run.result(), shifted_run.result()

    # the offsets: one worker 0 s, the other +300 s, each within its bracket's error (+ rounding)
    for results, shifts in ((true, [0.0, 0.0]), (shifted, [0.0, SHIFT_S])):
        offsets, errors = results["run"]["workers_clock_offset_s"], results["run"]["workers_clock_offset_error_s"]
        assert len(offsets) == 2
        found = sorted((offsets[w], errors[w]) for w in offsets)
        for (offset_s, error_s), shift_s in zip(found, shifts, strict=True):
            assert error_s < 3.0
            assert abs(offset_s - shift_s) <= error_s + 0.01
    assert "s ahead of the master's (more than 1 s)" in shifted_log
    assert "ahead of the master's" not in true_log

    for results in (true, shifted):
        # the run lasted about RUN_S (less the spawn message's delay, up to a second or two on a loaded
        # machine); with a worker stamping its own wall clock it would be ~306 s
        assert RUN_S - 2.5 <= results["duration_s"] <= RUN_S + 2.0
        assert results["send_span_s"] <= RUN_S + 1.0
        totals = _totals(results["timeseries"])
        assert max(r["t"] for r in totals) <= RUN_S + 1.0  # no interval 300 s away
        assert sum(r["succeeded"] for r in totals) == results["requests"]["succeeded"] > 100
        assert max(r["client_rss_bytes"] or 0 for r in totals) > 1 << 20  # the workers' reported memory
        # Locust's own table (issue 24): stamped on the master's clock, not 300 s wide
        for entry in results["locust_stats"]:
            assert entry["last_request_timestamp"] - entry["start_time"] <= RUN_S + 3.0, entry["name"]
            seconds = [int(t) for t in entry["num_reqs_per_sec"]]
            assert max(seconds) - min(seconds) <= RUN_S + 2, entry["name"]
            assert abs(min(seconds) - results["run"]["started_at_unix"]) <= 3.0
    # two runs on a shared machine differ by its load; a worker's own wall clock would divide these by ~50
    assert shifted["duration_s"] == pytest.approx(true["duration_s"], abs=2.0)
    for key in ("requests_per_s", "output_tokens_per_s"):
        assert shifted["throughput"][key] == pytest.approx(true["throughput"][key], rel=0.5)
    assert len(_totals(shifted["timeseries"])) == pytest.approx(len(_totals(true["timeseries"])), abs=1)
    print(  # the measured figures, for the record (pytest -s)
        "clock offsets (s):", shifted["run"]["workers_clock_offset_s"],
        "errors (s):", shifted["run"]["workers_clock_offset_error_s"],
        "duration_s true/shifted:", true["duration_s"], shifted["duration_s"],
        "succeeded true/shifted:", true["requests"]["succeeded"], shifted["requests"]["succeeded"],
        "output tok/s true/shifted:", true["throughput"]["output_tokens_per_s"],
        shifted["throughput"]["output_tokens_per_s"],
    )  # fmt: skip
