"""Every stop path counts every request: SIGINT, SIGTERM, the web UI's STOP.

succeeded + failed + cancelled must equal the requests `llmload sim` received
(its completed + aborted counters), and no traceback may appear. Real
`locust` processes on loopback, each bounded by -t and a subprocess timeout;
one simulator serves all runs of a test and is read as counter deltas. A user stopped in the
middle of a request, in process: ``tests/edge/test_user_stops.py``.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.procs import free_port, locust_argv, web_ui_stop
from tests.integration.test_sim import REPO_ROOT, metric_sum, metrics, start_sim, stop_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_ENDPOINTS = {"chat.py": "/v1/chat/completions", "completions.py": "/v1/completions"}
_EXIT_TIMEOUT_S = 90


@dataclass(frozen=True)
class Counts:
    """One run's requests as llmload counted them and as the simulator received them."""

    succeeded: int
    failed: int
    cancelled: int
    received: int  # simulator: completed + aborted

    @property
    def counted(self) -> int:
        return self.succeeded + self.failed + self.cancelled


def _received(url: str) -> dict[str, float]:
    samples = metrics(url)
    return {
        endpoint: sum(
            samples.get((f"llmload_sim_requests_{kind}_total", (("endpoint", endpoint),)), 0.0)
            for kind in ("completed", "aborted")
        )
        for endpoint in _ENDPOINTS.values()
    }


def _settled(url: str) -> dict[str, float]:
    """The simulator's received counts once it has noticed every client that went away (bounded)."""
    for _ in range(100):
        samples = metrics(url)
        if (
            metric_sum(samples, "llmload_sim_requests_running") + metric_sum(samples, "llmload_sim_requests_waiting")
            == 0
        ):
            break
        time.sleep(0.1)
    return _received(url)


def _start(url: str, locustfile: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    args = [
        "-f", f"locustfiles/{locustfile}", "--headless", "--only-summary", "-H", url, "-u", "8", "-r", "8",
        "-t", "30s", "--max-tokens", "40", "--skip-preflight", "--results-json", str(out), *extra,
    ]  # fmt: skip
    # its own session: a signal to the group is what Ctrl-C in a terminal does
    return subprocess.Popen(
        locust_argv(args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=_EXIT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _interrupt(procs: list[subprocess.Popen[str]], *, group: bool) -> None:
    for proc in procs:
        if group:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: master and every worker at once
        else:
            proc.send_signal(signal.SIGINT)  # the master only


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "failed with" not in stderr, stderr[-3000:]  # gevent: "<Greenlet ...> failed with KeyboardInterrupt"


def _wait_for_load(url: str, before: dict[str, float], n: int, timeout_s: float = 60) -> None:
    """Block until every endpoint has completed ``n`` more requests than ``before``."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = metrics(url)
        done = [
            samples.get(("llmload_sim_requests_completed_total", (("endpoint", endpoint),)), 0.0) - before[endpoint]
            for endpoint in _ENDPOINTS.values()
        ]
        if min(done) >= n:
            return
        assert time.monotonic() < deadline, f"no load within {timeout_s} s"
        time.sleep(0.05)


# (seconds between the 4th finished request and SIGINT, --processes, signal to the whole group).
# A request lasts ~0.8 s (40 tokens at 20 ms), so the offsets hit every phase of a request.
_SIGINT_CASES = [
    (0.0, 0, True),
    (0.23, 0, True),
    (0.51, 0, False),
    (0.77, 0, True),
    (1.3, 0, True),
    (0.1, 2, True),
    (0.62, 2, True),
    (1.05, 2, False),
]


def _sigint_case(url: str, tmp_path: Path, i: int, case: tuple[float, int, bool]) -> list[str]:
    """Case ``i``: a chat and a completions run side by side, Ctrl-C ``delay_s`` after their 4th request."""
    delay_s, processes, group = case
    report: list[str] = []
    before = _settled(url)
    extra = ["--processes", str(processes)] if processes else []
    outs = {name: tmp_path / f"r{i}-{name}.json" for name in _ENDPOINTS}
    procs = {name: _start(url, name, outs[name], *extra) for name in _ENDPOINTS}
    try:
        _wait_for_load(url, before, 4)
    except BaseException:
        for proc in procs.values():  # no run outlives a failed case (each leads its own process group)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise
    time.sleep(delay_s)
    _interrupt(list(procs.values()), group=group)
    streams = {name: _finish(proc) for name, proc in procs.items()}
    after = _settled(url)
    for name, endpoint in _ENDPOINTS.items():
        stdout, stderr = streams[name]
        _no_traceback(stderr)
        assert procs[name].returncode == 0, stderr[-3000:]
        results = json.loads(outs[name].read_text())
        requests = results["requests"]
        assert results["run"]["stopped_by"] == "Ctrl-C"  # not read as a run that ended by itself
        assert "stopped early by Ctrl-C" in results["verdict"]
        counts = Counts(
            requests["succeeded"],
            requests["failed"],
            requests["cancelled"],
            int(after[endpoint] - before[endpoint]),
        )
        report.append(
            f"SIGINT {delay_s} s into load, processes={processes}, group={group}, {name}: succeeded "
            f"{counts.succeeded} + failed {counts.failed} + cancelled {counts.cancelled} = {counts.counted}; "
            f"simulator received {counts.received}"
        )
        assert counts.counted == counts.received, report[-1]
        assert counts.succeeded > 0
        assert "Successful requests:" in stdout
    return report


def _sigint_lane(tmp_path: Path, cases: list[tuple[int, tuple[float, int, bool]]]) -> list[str]:
    """Run ``cases`` one after another against a simulator of their own."""
    url, sim = start_sim("--decode-step-ms", "20", "--prefill-base-ms", "0")
    try:
        return [line for i, case in cases for line in _sigint_case(url, tmp_path, i, case)]
    finally:
        stop_sim(sim)


def test_p1_sigint_mid_run_counts_every_request_the_simulator_received(tmp_path):
    """Ctrl-C at varied moments, one process and --processes 2: every request lands in exactly one bucket.

    Each case runs a chat and a completions run side by side against one
    simulator (its counters are per endpoint), so 8 cases are 16 runs. The
    cases run in two lanes at once, each lane with a simulator of its own:
    most of a case is waiting (start-up, requests, shutdown), not CPU.
    """
    lanes = [list(enumerate(_SIGINT_CASES))[lane::2] for lane in range(2)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes)) as pool:
        futures = [pool.submit(_sigint_lane, tmp_path, cases) for cases in lanes]
        concurrent.futures.wait(futures)
    reports = [future.result() if future.exception() is None else [repr(future.exception())] for future in futures]
    print("\n" + "\n".join(line for report in reports for line in report))
    for future in futures:
        future.result()  # re-raises a lane's failed assertion


def test_p1_sigterm_to_a_single_process_counts_every_request(tmp_path):
    url, sim = start_sim("--decode-step-ms", "20", "--prefill-base-ms", "0")
    out = tmp_path / "r.json"
    try:
        proc = _start(url, "chat.py", out)
        # Load first: a slow start (shared CPU, coverage tracing) must not meet SIGTERM before init.
        deadline = time.monotonic() + 60
        while metric_sum(metrics(url), "llmload_sim_requests_completed_total") < 4:
            assert time.monotonic() < deadline, "no load within 60 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = _finish(proc)
        received = _settled(url)["/v1/chat/completions"]
    finally:
        stop_sim(sim)
    _no_traceback(stderr)
    requests = json.loads(out.read_text())["requests"]
    assert requests["succeeded"] + requests["failed"] + requests["cancelled"] == received
    assert requests["cancelled"] > 0


def test_p1_web_ui_stop_counts_every_request(tmp_path):
    """The web UI's STOP (POST /stop): results written at once, every request in one bucket."""
    url, sim = start_sim("--decode-step-ms", "20", "--prefill-base-ms", "0")
    out = tmp_path / "r.json"
    port = free_port()
    args = [
        "-f", "locustfiles/chat.py", "-H", url, "--web-host", "127.0.0.1", "--web-port", str(port),
        "--autostart", "-u", "8", "-r", "8", "--max-tokens", "40", "--skip-preflight", "--results-json", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(locust_argv(args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while metric_sum(metrics(url), "llmload_sim_requests_completed_total") < 10:
            assert time.monotonic() < deadline, "no load within 30 s"
            time.sleep(0.2)
        web_ui_stop(port, out)
        received = _settled(url)["/v1/chat/completions"]
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_sim(sim)
    _no_traceback(stderr)
    # the run's summary once, at its STOP; not again when the process quits (found by the new-user check)
    assert stdout.count(" llmload result ") == 1, stdout[-3000:]
    requests = json.loads(out.read_text())["requests"]
    assert requests["succeeded"] + requests["failed"] + requests["cancelled"] == received
    assert requests["succeeded"] >= 10


def test_refused_before_load_with_processes_ends_at_once_with_its_workers():
    """A run refused before load (dead server) with --processes: the forked workers end with the master.

    Locust's exit handler forgets workers that are still running, so they used to wait 60 s for a
    heartbeat, holding the terminal or pipe open (a piped command took 61 s).
    """
    started = time.monotonic()
    proc = subprocess.run(
        locust_argv(["-f", "locustfiles/chat.py", "--headless", "-H", f"http://127.0.0.1:{free_port()}",
                     "--processes", "2", "-u", "4", "-r", "4", "--num-requests", "4"]),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    took_s = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "cannot reach" in proc.stderr
    assert took_s < 30, f"the command held its output open for {took_s:.0f} s"
