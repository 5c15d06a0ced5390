"""A headless run stopped before any load still says so: one line, the blocked results, exit status 2.

Real `locust` processes against loopback servers (a scripted one, one that
accepts connections and never answers, or none), each bounded by a
subprocess timeout.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from llmload.testing import ScriptedServer, json_reply
from tests.integration.procs import free_port, locust_argv
from tests.integration.test_sim import REPO_ROOT

pytestmark = [pytest.mark.integration]

_MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
_RESULTS_LINE = "LLMLOAD_RESULTS "


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (a hung server or a black-holing proxy)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self.accepted = threading.Event()
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._conns.append(conn)
            self.accepted.set()

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._sock.close()


def _blocked(results_path: Path, stdout: str) -> dict:
    """The results file, checked against the results line printed on stdout (not a terminal here)."""
    results = json.loads(results_path.read_text())
    lines = [line for line in stdout.splitlines() if line.startswith(_RESULTS_LINE)]
    assert len(lines) == 1, stdout[-2000:]
    assert json.loads(lines[0][len(_RESULTS_LINE) :]) == results
    assert results["requests"]["total"] == 0
    assert results["requests"]["cancelled"] == 0
    assert results["exit_status"] == 2
    assert results["passed"] is False
    assert results["verdict"].startswith("BLOCKED before load: ")
    assert results["verdict"].endswith("; no load was sent; exit status 2")
    return results


@pytest.mark.parametrize(("signum", "name"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_signal_during_a_preflight_that_hangs_prints_one_line_writes_blocked_results_and_exits_2(
    tmp_path, signum, name
):
    """The server accepts the connection but never answers GET /v1/models; Ctrl-C used to print a
    gevent traceback and exit 130 without a results file, and SIGTERM (issue 24) killed the process
    (exit -15) without one: Locust installs its SIGTERM handler only after init."""
    out = tmp_path / "r.json"
    with SilentServer() as server:
        proc = subprocess.Popen(
            locust_argv(["-f", "locustfiles/chat.py", "--headless", "-H", f"http://127.0.0.1:{server.port}",
                         "-u", "2", "-r", "2", "--num-requests", "4", "--results-json", str(out)]),
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert server.accepted.wait(timeout=60), "preflight never connected"
            time.sleep(0.3)  # the GET is written and waits for an answer
            proc.send_signal(signum)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "KeyboardInterrupt" not in stderr, stderr[-3000:]
    said = [line for line in stderr.splitlines() if "during preflight" in line]
    assert said == [f"llmload: interrupted ({name}) during preflight, before any load; no load was sent"]
    results = _blocked(out, stdout)
    assert results["blocked"] == f"interrupted ({name}) during preflight, before any load"
    assert results["run"]["num_requests"] == 4


def _read_lines(stream, into: list[str], seen: threading.Event, marker: str) -> None:
    for line in stream:
        into.append(line)
        if marker in line:
            seen.set()


@pytest.mark.parametrize(
    ("signum", "name", "workers"),
    [(signal.SIGINT, "Ctrl-C", 0), (signal.SIGTERM, "SIGTERM", 0), (signal.SIGINT, "Ctrl-C", 1)],
)
def test_signal_while_a_master_waits_for_its_workers_writes_blocked_results_and_exits_2(
    tmp_path, signum, name, workers
):
    """Issue 24: a headless master waiting for 2 workers got Ctrl-C (a traceback out of Locust's waiting
    loop, no results) or SIGTERM (killed, no results). Now: one line, the blocked results saying how
    many workers had connected, exit status 2; a worker that did connect is told to quit."""
    out = tmp_path / "r.json"
    port = str(free_port())
    master_args = ["-f", "locustfiles/chat.py", "--headless", "--master", "--expect-workers", "2",
                   "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "-u", "2", "-r", "2",
                   "--num-requests", "4", "--skip-preflight", "--results-json", str(out)]  # fmt: skip
    with ScriptedServer(lambda _request: json_reply(200, _MODELS)) as server:
        master = subprocess.Popen(
            locust_argv([*master_args, "-H", server.base_url]), cwd=REPO_ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        worker = None
        err: list[str] = []
        ready = threading.Event()
        reader = threading.Thread(
            target=_read_lines, args=(master.stderr, err, ready, "workers connected"), daemon=True
        )
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while not any(r.path == "/v1/models" for r in server.requests):
                assert time.monotonic() < deadline, "the master never checked the server"
                assert master.poll() is None, "".join(err)[-3000:]
                time.sleep(0.05)
            if workers:
                worker = subprocess.Popen(
                    locust_argv(["-f", "locustfiles/chat.py", "--worker", "--master-host", "127.0.0.1",
                                 "--master-port", port]),
                    cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                assert ready.wait(timeout=60), "".join(err)[-3000:]
            time.sleep(0.5)  # the master is in Locust's waiting loop
            master.send_signal(signum)
            stdout = master.stdout.read() if master.stdout else ""
            master.wait(timeout=60)
            reader.join(timeout=10)
            if worker is not None:
                assert worker.wait(timeout=30) == 0  # told to quit, not left waiting for a master
        finally:
            for proc in (master, worker):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        posts = [r for r in server.requests if r.method == "POST"]
    stderr = "".join(err)
    assert master.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    connected = "no worker had connected" if workers == 0 else "only 1 had connected"
    reason = f"stopped ({name}) while waiting for 2 workers: {connected}"
    assert f"llmload: {reason}; no load was sent" in stderr.splitlines()
    results = _blocked(out, stdout)
    assert results["blocked"] == reason
    assert posts == []


def test_expect_workers_max_wait_running_out_writes_blocked_results_with_expected_and_connected(tmp_path):
    """Issue 24: a headless master whose --expect-workers-max-wait ran out with 1 of 2 workers connected
    ended as Locust does ("Gave up waiting for workers to connect", exit status 1) with no results at all
    (8 s: time enough for the one worker to connect on a busy machine).
    Now: one line and the blocked results saying 1 of 2 workers connected and that no load was sent,
    exit status 2; the worker that did connect is told to quit."""
    out = tmp_path / "r.json"
    port = str(free_port())
    master_args = ["-f", "locustfiles/chat.py", "--headless", "--master", "--expect-workers", "2",
                   "--expect-workers-max-wait", "8", "--master-bind-host", "127.0.0.1", "--master-bind-port", port,
                   "-u", "2", "-r", "2", "--num-requests", "4", "--skip-preflight",
                   "--results-json", str(out)]  # fmt: skip
    with ScriptedServer(lambda _request: json_reply(200, _MODELS)) as server:
        master = subprocess.Popen(
            locust_argv([*master_args, "-H", server.base_url]), cwd=REPO_ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        worker = subprocess.Popen(
            locust_argv(["-f", "locustfiles/chat.py", "--worker", "--master-host", "127.0.0.1", "--master-port", port]),
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            stdout, stderr = master.communicate(timeout=90)
            assert worker.wait(timeout=30) == 0  # told to quit, not left waiting for a master
        finally:
            for proc in (master, worker):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        posts = [r for r in server.requests if r.method == "POST"]
    assert master.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "1 workers connected" in stderr, stderr[-3000:]  # the worker had connected before the limit
    reason = "gave up waiting for workers after --expect-workers-max-wait 8 s: 1 of 2 expected workers connected"
    lines = [line for line in stderr.splitlines() if line.startswith(f"llmload: {reason}")]
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].endswith("or lower --expect-workers; no load was sent")
    results = _blocked(out, stdout)
    assert results["blocked"].startswith(reason)
    assert results["verdict"].startswith(f"BLOCKED before load: {reason}")
    assert posts == []
