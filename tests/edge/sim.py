"""``llmload sim`` served from this process (gevent), for the edge tests: same app, engine and counters."""

from __future__ import annotations

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

__all__ = ["InProcessSim", "in_process_sim"]


@dataclass(frozen=True)
class InProcessSim:
    url: str
    registry: CollectorRegistry

    def total(self, name: str, endpoint: str) -> float:
        """A ground-truth counter, e.g. ``total("requests_completed", "/v1/chat/completions")``."""
        value = self.registry.get_sample_value(f"llmload_sim_{name}_total", {"endpoint": endpoint})
        return 0.0 if value is None else value


@contextmanager
def in_process_sim(*args: str) -> Iterator[InProcessSim]:
    """The simulator with ``args`` (``llmload sim`` options) on a loopback port the kernel picks."""
    config = parse_config(["--host", "127.0.0.1", "--port", "0", *args])
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
        server.stop(timeout=1)
        engine.stop()
