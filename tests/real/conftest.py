"""Fixtures for tests against a real llama.cpp ``llama-server`` (``make test-real``).

These tests are opt-in: they are skipped unless ``LLMLOAD_REAL=1`` (the
``test-real`` target sets it after building the server). The server kit is
``../shared/realserver`` next to the repository (``setup.sh`` builds
``llama-server`` once, ``start.sh``/``stop.sh`` run it on loopback);
``LLMLOAD_REALSERVER_DIR`` points elsewhere.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = "/tmp/rs/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server"
START_TIMEOUT_S = 90.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every ``real``-marked test unless ``LLMLOAD_REAL=1``."""
    if os.environ.get("LLMLOAD_REAL") == "1":
        return
    skip = pytest.mark.skip(reason="needs llama.cpp's llama-server: run `make test-real` (sets LLMLOAD_REAL=1)")
    for item in items:
        if "real" in item.keywords:
            item.add_marker(skip)


def realserver_dir() -> Path:
    """Return the real-server kit: ``$LLMLOAD_REALSERVER_DIR``, else ``../shared/realserver`` beside the repo.

    Fails the test (not a skip: ``LLMLOAD_REAL=1`` asked for it) when neither has ``start.sh``.
    """
    candidates = [REPO_ROOT.parent / "shared" / "realserver"]
    if os.environ.get("LLMLOAD_REALSERVER_DIR"):
        candidates.insert(0, Path(os.environ["LLMLOAD_REALSERVER_DIR"]))
    for path in candidates:
        if (path / "start.sh").is_file():
            return path
    pytest.fail(
        f"real-server kit not found in {', '.join(map(str, candidates))}; "
        "set LLMLOAD_REALSERVER_DIR to the directory holding setup.sh/start.sh"
    )


@dataclass(frozen=True)
class LlamaServer:
    """A running ``llama-server`` on loopback.

    Attributes:
        url: base URL, ``http://127.0.0.1:PORT``.
        model: the served model id (start.sh's alias).
        parallel: number of slots (``--parallel``).
    """

    url: str
    model: str
    parallel: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def start_llama_server() -> Iterator[Callable[[str], LlamaServer]]:
    """Factory ``start(extra_args) -> LlamaServer``; servers are stopped at the end of the session.

    Each call starts one more server on a free port with ``start.sh cpp`` (tiny
    random-weight model, 8 slots, 1 thread) and ``EXTRA_ARGS=extra_args``.
    """
    kit = realserver_dir()
    binary = os.environ.get("LLAMA_SERVER_BIN", DEFAULT_BIN)
    if not os.access(binary, os.X_OK):
        pytest.fail(f"llama-server binary not found at {binary}; run {kit / 'setup.sh'} first (make test-real does)")
    ports: list[int] = []

    def start(extra_args: str) -> LlamaServer:
        port = _free_port()
        env = {**os.environ, "EXTRA_ARGS": extra_args, "PARALLEL": "8", "THREADS": "1", "MODEL_ALIAS": "tiny"}
        proc = subprocess.run(
            [str(kit / "start.sh"), "cpp", "/tmp/rs/models/tiny.gguf", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"start.sh cpp failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        ports.append(port)
        return LlamaServer(url=f"http://127.0.0.1:{port}", model="tiny", parallel=8)

    yield start
    for port in ports:
        subprocess.run([str(kit / "stop.sh"), "cpp", str(port)], capture_output=True, timeout=30, check=False)
