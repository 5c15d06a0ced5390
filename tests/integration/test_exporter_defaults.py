"""Issue 24: the exporter's defaults are safe on a shared machine.

Loopback by default (run information is not shown to the network), a busy default port is a
warning and a run without an exporter (a second run on the same machine), and one stray
`curl /metrics` does not keep a finished run up for the whole --prometheus-grace.
Real `locust` processes against `llmload sim`, each bounded by -t and a subprocess timeout.
"""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import time
import urllib.request

import psutil
import pytest

from tests.integration.procs import free_port, locust_argv, run_locust
from tests.integration.test_sim import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_DEFAULT_PORT = 9646
_RUN = ["-f", "locustfiles/chat.py", "--headless", "--only-summary", "-u", "2", "-r", "2", "--max-tokens", "8"]


@pytest.fixture(scope="module")
def sim_url(module_sim_server) -> str:
    return module_sim_server("--decode-step-ms", "5")


def _listening_ips(pid: int, port: int) -> set[str]:
    """The addresses process ``pid`` listens on at TCP ``port`` (empty until it does)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {c.laddr.ip for c in connections if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def test_issue24_exporter_listens_on_loopback_and_a_stray_scrape_does_not_hold_the_end(sim_url, tmp_path):
    port = free_port()
    out = tmp_path / "r.json"
    args = [*_RUN, "-H", sim_url, "-t", "4s", "--prometheus-port", str(port), "--prometheus-grace", "120",
            "--results-json", str(out)]  # fmt: skip
    proc = subprocess.Popen(locust_argv(args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (ips := _listening_ips(proc.pid, port)):
            assert proc.poll() is None, "locust exited before its exporter listened"
            assert time.monotonic() < deadline, "the exporter never listened"
            time.sleep(0.1)
        assert ips == {"127.0.0.1"}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:  # one stray scrape
            assert answer.status == 200
        # --prometheus-grace is 120 s: a run that waited for a second scrape would time out here
        _stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    assert f"Prometheus metrics at http://127.0.0.1:{port}/metrics" in stderr
    assert "no scraper is scraping regularly now: not waiting for it" in stderr, stderr[-3000:]
    assert json.loads(out.read_text())["requests"]["succeeded"] > 0


def test_issue24_default_port_in_use_is_a_warning_and_the_run_goes_on(sim_url, tmp_path):
    out = tmp_path / "r.json"
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", _DEFAULT_PORT))
            taken.listen()
        except OSError as exc:  # already held by something else on this machine: busy all the same
            if exc.errno != errno.EADDRINUSE:
                raise
        proc = run_locust(
            [*_RUN, "-H", sim_url, "--num-requests", "4", "--prometheus-port", str(_DEFAULT_PORT),
             "--results-json", str(out)],
            timeout_s=90,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"cannot serve Prometheus metrics on 127.0.0.1:{_DEFAULT_PORT}" in proc.stderr, proc.stderr[-3000:]
    assert "This run serves no /metrics." in proc.stderr
    assert json.loads(out.read_text())["requests"]["succeeded"] == 4
