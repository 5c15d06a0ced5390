"""A stop during the ramp-up counts every request the server received (master + workers and single process).

Locust's master keeps sending spawn messages for a while after a stop, so a
worker may be told to start users after it has sent its final report; those
users must not send. Each run ramps slowly (-u 200 -r 20: 20 new users a
second) and is stopped 1.5 s into its load, so spawn messages are still due;
succeeded + failed + cancelled must equal the requests `llmload sim`
received (its completed + aborted counters, read as deltas). Real `locust`
processes on loopback, each bounded by -t and a subprocess timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.procs import free_port, locust_argv, web_ui_stop
from tests.integration.test_sim import REPO_ROOT, metric_sum, metrics, start_sim, stop_sim
from tests.integration.test_stop_paths import _finish, _no_traceback, _settled

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_CHAT = "/v1/chat/completions"
_LOAD_S = 1.5  # seconds of load before the stop: 20-40 users of 200 spawned
_RAMP = ["-u", "200", "-r", "20", "--max-tokens", "8", "--skip-preflight"]


def _sim() -> tuple[str, subprocess.Popen[bytes]]:
    return start_sim("--decode-step-ms", "20", "--prefill-base-ms", "0")


def _start(url: str, out: Path, *extra: str, headless: bool = True) -> subprocess.Popen[str]:
    args = ["-f", "locustfiles/chat.py", "-H", url, *_RAMP, "--results-json", str(out), *extra]
    if headless:
        args += ["--headless", "--only-summary"]
    return subprocess.Popen(
        locust_argv(args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _wait_for_first_request(url: str, before: float, proc: subprocess.Popen[str], timeout_s: float = 60) -> None:
    """Block until the simulator has completed a request; on failure show what Locust said (issue 24)."""
    deadline = time.monotonic() + timeout_s
    while metric_sum(metrics(url), "llmload_sim_requests_completed_total") <= before:
        if proc.poll() is not None or time.monotonic() >= deadline:
            exited = proc.poll() is not None
            why = f"locust exited {proc.returncode}" if exited else f"still running after {timeout_s} s"
            pytest.fail(f"no load within {timeout_s} s ({why}); Locust's output:\n{_output_of(proc)}")
        time.sleep(0.05)


def _output_of(proc: subprocess.Popen[str]) -> str:
    """Stop ``proc`` (and its workers) if it still runs; return the last of its stdout and stderr."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=30)
    return f"--- stdout (last 2000 chars)\n{stdout[-2000:]}\n--- stderr (last 6000 chars)\n{stderr[-6000:]}"


def _counted(out: Path) -> tuple[int, int]:
    """(succeeded + failed + cancelled, cancelled) from a results file."""
    requests = json.loads(out.read_text())["requests"]
    return requests["succeeded"] + requests["failed"] + requests["cancelled"], requests["cancelled"]


def _check(url: str, before: float, out: Path, stdout_stderr: tuple[str, str], label: str) -> str:
    _no_traceback(stdout_stderr[1])
    counted, cancelled = _counted(out)
    received = int(_settled(url)[_CHAT] - before)
    line = f"{label}: counted {counted} (cancelled {cancelled}); simulator received {received}"
    assert counted == received, line + "\n" + stdout_stderr[1][-3000:]
    assert counted > 0, line
    return line


# (signal, --processes, send to the whole process group)
_SIGNAL_CASES = [
    (signal.SIGTERM, 2, False),
    (signal.SIGINT, 2, False),
    (signal.SIGINT, 2, True),
    (signal.SIGTERM, 0, False),
]


@pytest.mark.parametrize(("signum", "processes", "group"), _SIGNAL_CASES)
def test_p1_signal_during_ramp_up_counts_every_request(tmp_path, signum, processes, group):
    """SIGTERM / SIGINT (to the master, or Ctrl-C to the group) 1.5 s into a slow ramp-up."""
    url, sim = _sim()
    out = tmp_path / "r.json"
    try:
        before = _settled(url)[_CHAT]
        extra = ["-t", "60s", *(["--processes", str(processes)] if processes else [])]
        proc = _start(url, out, *extra)
        _wait_for_first_request(url, before, proc)
        time.sleep(_LOAD_S)
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        streams = _finish(proc)
        assert proc.returncode == 0, streams[1][-3000:]
        print(_check(url, before, out, streams, f"{signum.name} processes={processes} group={group}"))
    finally:
        stop_sim(sim)


@pytest.mark.parametrize("processes", [2, 0])
def test_p1_run_time_ending_during_ramp_up_counts_every_request(tmp_path, processes):
    """-t ends the run while users are still being spawned."""
    url, sim = _sim()
    out = tmp_path / "r.json"
    try:
        before = _settled(url)[_CHAT]
        extra = ["-t", "3s", *(["--processes", str(processes)] if processes else [])]
        proc = _start(url, out, *extra)
        streams = _finish(proc)
        assert proc.returncode == 0, streams[1][-3000:]
        print(_check(url, before, out, streams, f"-t 3s processes={processes}"))
    finally:
        stop_sim(sim)


def test_p1_web_ui_stop_during_ramp_up_counts_every_request(tmp_path):
    """The web UI's STOP while a distributed ramp-up is under way (master + 2 workers)."""
    url, sim = _sim()
    out = tmp_path / "r.json"
    port = free_port()
    try:
        before = _settled(url)[_CHAT]
        extra = ["--processes", "2", "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart"]
        proc = _start(url, out, *extra, headless=False)
        try:
            _wait_for_first_request(url, before, proc)
            time.sleep(_LOAD_S)
            web_ui_stop(port, out)
            time.sleep(2.0)  # spawn messages still due after the stop would start users now
            counted_at_stop = out.read_text()
            received = _settled(url)[_CHAT]
            proc.send_signal(signal.SIGTERM)
            streams = _finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert out.read_text() == counted_at_stop  # the SIGTERM after the stop changed nothing
        _no_traceback(streams[1])
        counted, _ = _counted(out)
        assert counted == int(received - before), f"counted {counted}; simulator received {received - before}"
        assert counted > 0
    finally:
        stop_sim(sim)
