"""``llmload sim`` served from the test process: the simulator's own app, engine and counters, no subprocess.

``SimThread`` runs it in a thread of its own with its own gevent hub, so tests that talk to it
with the standard library (or start ``locust`` against it) need no simulator process; the edge
tests, whose process is monkey-patched, serve it on their own hub (``serve``). What needs the
real process (its exit status, stderr, signals) uses ``tests.integration.test_sim.start_sim``.
"""

from __future__ import annotations

import resource
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gevent.pywsgi import WSGIServer
from prometheus_client import CollectorRegistry

from llmload.sim.app import SimApp
from llmload.sim.config import parse_config
from llmload.sim.engine import Engine
from llmload.sim.metrics import SimMetrics
from llmload.sim.server import listen

__all__ = ["InProcessSim", "SimThread", "serve"]

_OPEN_FILES = 8192  # as `llmload sim` raises its own limit: many concurrent streams


@dataclass(frozen=True)
class InProcessSim:
    """A served simulator: its base URL and its ground-truth counters."""

    url: str
    registry: CollectorRegistry

    def total(self, name: str, endpoint: str) -> float:
        """A ground-truth counter, e.g. ``total("requests_completed", "/v1/chat/completions")``."""
        value = self.registry.get_sample_value(f"llmload_sim_{name}_total", {"endpoint": endpoint})
        return 0.0 if value is None else value


def _raise_open_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < _OPEN_FILES:
        resource.setrlimit(resource.RLIMIT_NOFILE, (_OPEN_FILES if hard == resource.RLIM_INFINITY else
                                                    min(_OPEN_FILES, hard), hard))  # fmt: skip


@contextmanager
def serve(*args: str) -> Iterator[InProcessSim]:
    """Serve the simulator with ``args`` (``llmload sim`` options) on this thread's gevent hub until exit."""
    config = parse_config(["--host", "127.0.0.1", "--port", "0", *args])
    _raise_open_files()
    listener = listen(config.host, config.port, config.backlog)
    registry = CollectorRegistry()
    engine = Engine(config)
    metrics = SimMetrics(
        registry, engine, model=config.model, max_num_seqs=config.max_num_seqs, metric_names=config.shapes.metric_names
    )
    server = WSGIServer(listener, SimApp(config=config, engine=engine, metrics=metrics, registry=registry), log=None)
    server.start()
    engine.start()
    host, port = listener.getsockname()[:2]
    try:
        yield InProcessSim(f"http://{host}:{port}", registry)
    finally:
        server.stop(timeout=config.shutdown_grace_s)
        engine.stop()


class SimThread:
    """The simulator in a daemon thread with its own gevent hub; ``stop()`` ends it (bounded)."""

    def __init__(self, *args: str, startup_timeout_s: float = 15.0) -> None:
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._sim: InProcessSim | None = None
        self._thread = threading.Thread(target=self._run, args=args, name="llmload-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(startup_timeout_s):
            raise RuntimeError(f"the simulator did not start within {startup_timeout_s:g} s")
        if self._failed is not None:
            raise self._failed

    def _run(self, *args: str) -> None:
        import gevent

        try:
            with serve(*args) as sim:
                self._sim = sim
                self._ready.set()
                while not self._stop.is_set():
                    gevent.sleep(0.05)
        except BaseException as exc:  # reported to the starting thread
            self._failed = exc
            self._ready.set()

    @property
    def url(self) -> str:
        assert self._sim is not None
        return self._sim.url

    @property
    def sim(self) -> InProcessSim:
        assert self._sim is not None
        return self._sim

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the simulator thread did not stop"
