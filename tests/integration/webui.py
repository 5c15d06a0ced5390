"""A real `locust` web UI over `llmload sim` for tests: start, post the form, read the stats (bounded, loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from tests.integration.procs import free_port, locust_argv
from tests.integration.test_sim import REPO_ROOT, start_sim, stop_sim

__all__ = ["WebUI", "web_ui"]

HTTP_TIMEOUT_S = 30.0


@dataclass
class WebUI:
    """One `locust` web UI process (no --headless) and the simulator it targets."""

    base: str
    sim_url: str
    proc: subprocess.Popen[str]
    stdout: IO[str]
    stderr: IO[str]
    form: dict[str, str] = field(default_factory=dict)

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.base + path, timeout=HTTP_TIMEOUT_S) as answer:
            body: bytes = answer.read()
        return body

    def post(self, path: str, data: dict[str, str] | None = None) -> bytes:
        encoded = urllib.parse.urlencode(data or {}).encode()
        req = urllib.request.Request(self.base + path, data=encoded, method="POST")
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as answer:
            body: bytes = answer.read()
        return body

    def swarm(self, **fields: str) -> dict[str, Any]:
        """POST /swarm as the form does: users, spawn rate, host and llmload's fields (``fields`` override)."""
        data = {"user_count": "2", "spawn_rate": "2", "host": self.sim_url, **self.form, **fields}
        answer: dict[str, Any] = json.loads(self.post("/swarm", data))
        return answer

    def reset(self) -> None:
        """Press RESET (``/stats/requests`` answers with the cleared figures at once: llmload drops
        Locust's 2 s cache of it at a RESET)."""
        self.post("/stats/reset")

    def stats(self) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self.get("/stats/requests"))
        return answer

    def aggregated(self) -> dict[str, Any]:
        rows = [row for row in self.stats()["stats"] if row["name"] == "Aggregated"]
        return rows[0]

    def wait(self, predicate: Any, what: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Poll /stats/requests until ``predicate(stats)``; fail after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            stats = self.stats()
            if predicate(stats):
                return stats
            assert time.monotonic() < deadline, f"{what} not within {timeout_s} s; last state {stats['state']}"
            time.sleep(0.2)

    def output(self) -> tuple[str, str]:
        self.stdout.seek(0)
        self.stderr.seek(0)
        return self.stdout.read(), self.stderr.read()


@contextmanager
def web_ui(*locust_args: str, sim_args: tuple[str, ...] = (), workers: int = 0) -> Iterator[WebUI]:
    """Start ``llmload sim`` and ``locust -f locustfiles/chat.py`` with its web UI on free ports; stop both."""
    sim_url, sim = start_sim(*sim_args)
    port = free_port()
    args = ["-f", "locustfiles/chat.py", "-H", sim_url, "--web-host", "127.0.0.1", "--web-port", str(port)]
    if workers:
        args += ["--processes", str(workers)]
    out = tempfile.TemporaryFile("w+")  # noqa: SIM115 -- closed below
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115 -- closed below
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        locust_argv([*args, *locust_args]), cwd=REPO_ROOT, stdout=out, stderr=err, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    ui = WebUI(f"http://127.0.0.1:{port}", sim_url, proc, out, err)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                ui.get("/stats/requests")
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, f"locust exited: {ui.output()[1][-3000:]}"
                assert time.monotonic() < deadline, "the web UI did not answer within 30 s"
                time.sleep(0.2)
        if workers:
            ui.wait(lambda s: s.get("worker_count") == workers, f"{workers} workers", 30)
        yield ui
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(10)
        stop_sim(sim)
        out.close()
        err.close()
