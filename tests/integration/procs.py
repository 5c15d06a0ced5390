"""Running `locust` in subprocesses for integration tests (bounded, loopback only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.integration.test_sim import REPO_ROOT

__all__ = ["final_results_written", "free_port", "locust_argv", "run_locust", "web_ui_stop"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def locust_argv(args: list[str]) -> list[str]:
    """`python -m locust ARGS` without the Prometheus exporter (unless asked for) and, with
    --processes, a private master port, so parallel runs never collide."""
    argv = [sys.executable, "-m", "locust", *args]
    if "--prometheus-port" not in args:
        argv += ["--prometheus-port", "0"]  # the exporter has its own tests; parallel runs must not collide
    if "--processes" in args and "--master-bind-port" not in args:
        port = str(free_port())
        argv += ["--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port]
    return argv


def run_locust(
    args: list[str],
    *,
    timeout_s: float = 120,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run locust to completion from the repository root; raises TimeoutExpired after ``timeout_s``."""
    return subprocess.run(
        locust_argv(args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        check=False,
        preexec_fn=preexec,
    )


def web_ui_stop(port: int, results: Path, *, timeout_s: float = 30) -> None:
    """Press STOP in the Locust web UI on ``port``; wait until the run has written ``results``."""
    stop = urllib.request.Request(f"http://127.0.0.1:{port}/stop", data=b"", method="POST")
    with urllib.request.urlopen(stop, timeout=timeout_s) as answer:
        assert answer.status == 200
    deadline = time.monotonic() + timeout_s
    while not final_results_written(results):
        assert time.monotonic() < deadline, f"no final results file within {timeout_s:g} s of STOP"
        time.sleep(0.2)


def final_results_written(results: Path) -> bool:
    """True once ``results`` holds the run's final document (checkpoints during the run say ``partial``)."""
    if not results.exists():
        return False
    return json.loads(results.read_text()).get("partial") is False
