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
from tests.integration.procs import free_port, locust_argv, run_locust
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
    assert results["verdict"].endswith("; no request was sent; exit status 2")
    return results


def test_sigint_during_a_preflight_that_hangs_prints_one_line_writes_blocked_results_and_exits_2(tmp_path):
    """The server accepts the connection but never answers GET /v1/models; Ctrl-C used to print a
    gevent traceback and exit 130 without a results file."""
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
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "KeyboardInterrupt" not in stderr, stderr[-3000:]
    said = [line for line in stderr.splitlines() if "during preflight" in line]
    assert said == ["llmload: interrupted (Ctrl-C) during preflight, before any load; no request was sent"]
    results = _blocked(out, stdout)
    assert results["blocked"] == "interrupted (Ctrl-C) during preflight, before any load"
    assert results["run"]["num_requests"] == 4


@pytest.mark.parametrize(
    ("case", "extra", "reason"),
    [
        ("wrong model", ["--model", "other"], 'model "other" not served; available: m'),
        ("dead server", ["-H", "DEAD"], "cannot reach"),
        ("bad option", ["--max-tokens", "abc"], "--max-tokens must be a positive integer, got 'abc'"),
        ("framing header", ["--header", "Content-Length: 3"], "the Content-Length header is refused"),
    ],
)
def test_headless_run_blocked_at_init_writes_blocked_results_with_the_reason(tmp_path, case, extra, reason):
    out = tmp_path / "nested" / "r.json"
    with ScriptedServer(lambda _request: json_reply(200, _MODELS)) as server:
        host = f"http://127.0.0.1:{free_port()}" if "DEAD" in extra else server.base_url
        args = [a for a in extra if a not in ("-H", "DEAD")]
        proc = run_locust(
            ["-f", "locustfiles/chat.py", "--headless", "-H", host, "-u", "2", "-r", "2", "--num-requests", "4",
             "--results-json", str(out), *args],
            timeout_s=90,
        )  # fmt: skip
        posts = [r for r in server.requests if r.method == "POST"]
    assert proc.returncode == 2, (case, proc.stderr[-3000:])
    assert "llmload: error: " in proc.stderr
    assert reason in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    results = _blocked(out, proc.stdout)
    assert reason in results["blocked"]
    assert reason in results["verdict"]
    assert posts == []  # nothing was sent (preflight probes included: the checks before them failed)
