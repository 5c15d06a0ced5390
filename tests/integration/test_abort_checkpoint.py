"""End to end against `llmload sim`: --abort-on stops a broken run early; --checkpoint-interval leaves partial results.

A fault is injected mid-run by restarting the simulator on the same port
with ``--fail-rate 1`` (every request answered 500). The threshold must stop
the run through the normal stop path (exit status 1, ``aborted`` set, every
request counted), in one process and with a master and two workers. A run
with ``--checkpoint-interval 1`` that is SIGKILLed mid-run must leave a
results file that parses and says it is partial. Every wait is bounded.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.procs import locust_argv, run_locust
from tests.integration.test_sim import REPO_ROOT, start_sim, stop_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_SIM_ARGS = ("--decode-step-ms", "4", "--output-len-mean", "20")
_EXIT_TIMEOUT_S = 90.0
_THRESHOLD = "error_ratio>0.2 for 2s"


class Sim:
    """A simulator whose behaviour can be changed mid-run by restarting it on the same port."""

    def __init__(self) -> None:
        self.url, self.proc = start_sim(*_SIM_ARGS)
        self.port = str(urlsplit(self.url).port)

    def break_it(self) -> float:
        """Restart answering every request with HTTP 500; return the monotonic time the fault began.

        The fault begins with the SIGTERM: the old simulator stops accepting connections (refused until
        the new one listens), then every request gets a 500.
        """
        began = time.monotonic()
        stop_sim(self.proc)
        _, self.proc = start_sim(*_SIM_ARGS, "--port", self.port, "--fail-rate", "1")
        return began

    def stop(self) -> None:
        stop_sim(self.proc)


@pytest.fixture
def sim() -> Iterator[Sim]:
    server = Sim()
    yield server
    server.stop()


def _start(args: list[str], log_dir: Path) -> subprocess.Popen[bytes]:
    """Start locust with its output in files (a full pipe would block it while the test waits)."""
    stdout = (log_dir / "stdout.txt").open("wb")
    stderr = (log_dir / "stderr.txt").open("wb")
    with stdout, stderr:
        return subprocess.Popen(locust_argv(args), cwd=REPO_ROOT, stdout=stdout, stderr=stderr)


def _wait_exit(proc: subprocess.Popen[bytes]) -> int:
    try:
        return proc.wait(timeout=_EXIT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _read_json(path: Path, *, until: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    """Poll ``path`` until its document satisfies ``until``; every read must parse (atomic writes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if path.exists():
            document: dict[str, Any] = json.loads(path.read_text())
            if until(document):
                return document
        assert time.monotonic() < deadline, f"{path} never satisfied the condition within {timeout_s:g} s"
        time.sleep(0.1)


def _totals(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in results["timeseries"] if r["endpoint"] is None]


def _assert_aborted(results: dict[str, Any], healthy_at_s: float) -> None:
    """``healthy_at_s``: a run time (s) before the fault, when every interval so far was healthy."""
    aborted = results["aborted"]
    assert aborted["threshold"] == _THRESHOLD
    assert aborted["at_s"] - aborted["from_s"] >= 2.0
    assert all(v > 0.2 for v in aborted["values"])
    assert aborted["from_s"] >= math.floor(healthy_at_s)  # it held only once the fault began, not before
    assert results["partial"] is False
    assert results["checkpoint_at_s"] is None
    assert results["passed"] is False
    assert results["exit_status"] == 1
    assert results["verdict"].startswith(f"FAILED: aborted {aborted['at_s']:.0f} s into the run by --abort-on")
    # every request counted: the intervals add up to the totals, the failures are in them
    rows = _totals(results)
    requests = results["requests"]
    assert sum(r["succeeded"] for r in rows) == requests["succeeded"] > 0
    assert sum(r["failed"] for r in rows) == requests["failed"] > 0
    assert sum(r["cancelled"] for r in rows) == requests["cancelled"]


@pytest.mark.parametrize("processes", [None, "2"], ids=["single", "distributed"])
def test_abort_on_error_ratio_stops_the_run_after_a_fault(sim: Sim, tmp_path: Path, processes: str | None) -> None:
    out = tmp_path / "results.json"
    args = [
        "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", sim.url, "-u", "8", "-r", "8",
        "-t", "60s", "--max-tokens", "20", "--max-failure-ratio", "1", "--timeseries-interval", "1",
        "--abort-on", _THRESHOLD, "--abort-on", "ttft_p99>30s for 5s", "--results-json", str(out),
        "--checkpoint-interval", "1",
    ]  # fmt: skip
    if processes:
        args += ["--processes", processes]
    started = time.monotonic()
    proc = _start(args, tmp_path)
    try:
        # healthy for a few intervals first: the threshold must not fire on them
        healthy = _read_json(out, until=lambda d: len(_totals(d)) >= 3 and d["requests"]["succeeded"] > 0)
        assert healthy["requests"]["failed"] == 0
        fault = sim.break_it()
        status = _wait_exit(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stopped = time.monotonic()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert status == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    results = json.loads(out.read_text())
    healthy_s = max(r["t"] + r["interval_s"] for r in _totals(healthy))  # the last healthy interval's end
    _assert_aborted(results, healthy_at_s=healthy_s)
    assert f"--abort-on '{_THRESHOLD}' held from" in stderr
    assert "stopping the run" in stderr
    summary = (tmp_path / "stdout.txt").read_text()
    assert results["verdict"] in summary  # the summary's last line names the threshold
    assert stopped - fault < 20.0, f"the run went on {stopped - fault:.1f} s after the fault"
    print(
        f"\n[{processes or 1} process(es)] healthy through {healthy_s:.1f} s (checkpoint at "
        f"{healthy['checkpoint_at_s']:.1f} s); threshold fired at "
        f"{results['aborted']['at_s']:.1f} s (window from {results['aborted']['from_s']:.1f} s); process exited "
        f"{stopped - fault:.1f} s after the fault; run time {stopped - started:.1f} s of -t 60s; "
        f"{results['requests']['total']} requests"
    )


def test_checkpoint_survives_sigkill_as_a_partial_results_file(sim: Sim, tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"passed": True, "verdict": "PASSED: a previous run"}))  # stale: must be replaced
    args = [
        "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", sim.url, "-u", "8", "-r", "8",
        "-t", "60s", "--max-tokens", "20", "--timeseries-interval", "1", "--checkpoint-interval", "1",
        "--results-json", str(out),
    ]  # fmt: skip
    proc = _start(args, tmp_path)
    try:
        first = _read_json(out, until=lambda d: "partial" in d)
        assert first["partial"] is True  # the first checkpoint, at the run's start, replaced the stale file
        latest = _read_json(out, until=lambda d: d["checkpoint_at_s"] >= 3.0 and d["requests"]["total"] > 0)
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    left = json.loads(out.read_text())  # what the killed process left: a complete document
    assert left["partial"] is True
    assert left["passed"] is None
    assert left["exit_status"] is None
    assert left["verdict"].startswith("PARTIAL: checkpoint")
    assert left["checkpoint_at_s"] >= latest["checkpoint_at_s"]
    assert left["requests"]["total"] >= latest["requests"]["total"] > 0
    assert len(_totals(left)) >= 2
    assert left["aborted"] is None
    assert left["run"]["options"]["checkpoint_interval_s"] == 1.0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".results.json")] == []  # no temporary file
    print(
        f"\ncheckpoint left by SIGKILL: at {left['checkpoint_at_s']:.1f} s, {left['requests']['total']} requests, "
        f"{len(_totals(left))} intervals; kill {time.monotonic() - killed:.2f} s ago"
    )


def test_abort_on_bad_expression_is_refused_before_load(tmp_path: Path) -> None:
    proc = run_locust(
        [
            "-f", "locustfiles/chat.py", "--headless", "-H", "http://127.0.0.1:9", "-u", "1", "-t", "5s",
            "--abort-on", "error_ratio>0.05 for 5m", "--abort-on", "ttft_p99>10 for 10m",
            "--results-json", str(tmp_path / "r.json"),
        ],
        timeout_s=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert (
        "llmload: error: --abort-on 'ttft_p99>10 for 10m': ttft_p99 is a latency: give its unit, s or ms; "
        "pass e.g. --abort-on 'ttft_p99>10s for 10m'" in proc.stderr
    )
    # a run refused before load writes the blocked results, never a partial or passing one
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["requests"]["total"] == 0
    assert results["exit_status"] == 2
    assert results["blocked"].startswith("--abort-on 'ttft_p99>10 for 10m': ttft_p99 is a latency")
    assert results["verdict"].startswith("BLOCKED before load: --abort-on")
