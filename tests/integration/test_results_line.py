"""A headless run's last output line is the results JSON, marked, so `kubectl logs` recovers it."""

from __future__ import annotations

import pytest

from llmload.exporters.console import RESULTS_LINE_PREFIX
from tests.integration.procs import run_locust
from tests.integration.test_sim import start_sim, stop_sim

pytestmark = pytest.mark.integration


def test_a_terminal_gets_the_summary_without_the_results_line(tmp_path):
    import os
    import pty
    import subprocess

    from tests.integration.procs import locust_argv
    from tests.integration.test_sim import REPO_ROOT

    base_url, sim = start_sim()
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen(
            locust_argv(["-f", "locustfiles/chat.py", "--headless", "-H", base_url, "-u", "2", "-r", "2",
                         "--num-requests", "4", "--max-tokens", "8"]),
            cwd=REPO_ROOT, stdout=secondary, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(secondary)
        chunks = []
        while True:  # read the terminal until the process closes it (EIO on Linux)
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=90) == 0
    finally:
        os.close(primary)
        stop_sim(sim)
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert "PASSED: 4/4 requests succeeded" in shown
    assert RESULTS_LINE_PREFIX not in shown


def test_num_requests_run_without_time_limit_does_not_say_no_limit_use_ctrl_c(tmp_path):
    """Locust logs "No run time limit set, use CTRL+C to interrupt" for every headless run without -t,
    although --num-requests ends this one on its own: llmload says what ends it instead."""
    base_url, sim = start_sim()
    try:
        out = run_locust(
            [*("-f", "locustfiles/chat.py", "--headless", "-H", base_url, "-u", "2", "-r", "2"),
             *("--num-requests", "4", "--max-tokens", "8")],
            timeout_s=90,
        )  # fmt: skip
        timed = run_locust(
            ["-f", "locustfiles/chat.py", "--headless", "-H", base_url, "-u", "1", "-r", "1", "-t", "1s",
             "--max-tokens", "8"],
            timeout_s=90,
        )  # fmt: skip
    finally:
        stop_sim(sim)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "No run time limit set" not in out.stderr
    assert "llmload: no -t time limit: the run ends when --num-requests 4 requests have finished" in out.stderr
    # This run is here for its log lines, not its verdict: on a busy machine (the suite spread over more
    # processes than cores) its one user's first request can outlast the 1 s, and a run with no finished
    # request fails with exit status 1, rightly.
    no_request = "FAILED: no request finished" in timed.stdout
    assert timed.returncode == (1 if no_request else 0), timed.stderr[-2000:]
    assert "Run time limit set to 1 seconds" in timed.stderr
    assert "--num-requests" not in timed.stderr
