"""Shared by the bench/ scripts: start `llmload sim`, pin to a core, a private Locust master port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent

__all__ = ["REPO", "pin", "private_master_port", "start_sim"]


def pin(core: int) -> list[str]:
    """`taskset -c CORE` when available on a multi-core machine, else nothing."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(core)]
    return []


def start_sim(
    *args: str, core: int | None = None, cwd: Path = REPO, stderr: IO[str] | None = None
) -> tuple[str, subprocess.Popen[str]]:
    """Start `python -m llmload.sim --port 0 ARGS` in ``cwd`` (pinned to ``core`` if given); return its URL and process.

    ``python -m`` imports from ``cwd`` first, so ``cwd`` chooses which checkout's simulator runs;
    ``stderr`` receives the simulator's log lines (default: this process's stderr).
    """
    proc = subprocess.Popen(
        [*(pin(core) if core is not None else []), sys.executable, "-m", "llmload.sim", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=cwd,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if "http://" not in line:
        proc.kill()
        raise SystemExit(f"sim did not start: {line!r}")
    return line[line.index("http://") :], proc


def private_master_port() -> list[str]:
    """Locust master arguments for a free port on loopback, so a Locust already running here does not collide."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    return ["--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port]
