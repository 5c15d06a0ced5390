"""Process entry point of ``llmload sim``: listen, run the engine, stop on a signal."""

from __future__ import annotations

import resource
import signal
import socket
import sys

import gevent
from gevent import socket as gsocket
from gevent.event import Event
from gevent.pywsgi import WSGIServer
from prometheus_client import CollectorRegistry

from llmload.errors import ConfigError
from llmload.sim.app import SimApp
from llmload.sim.config import SimConfig, parse_config
from llmload.sim.engine import Engine
from llmload.sim.metrics import SimMetrics

__all__ = ["listen", "run"]


def listen(host: str, port: int, backlog: int) -> gsocket.socket:
    """Return a listening gevent socket with ``TCP_NODELAY`` (inherited by accepted sockets).

    Nagle's algorithm would hold back small SSE writes while an earlier one is
    unacknowledged, adding up to a delayed-ACK timeout (~40 ms) to chunk times.

    Raises:
        OSError: the address cannot be bound (in use, not local).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = gsocket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _raise_open_file_limit(wanted: int) -> None:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (bounded by the hard limit); warn if short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < wanted:
            print(
                f"llmload sim: open-file limit {target} < {wanted}; at most ~{target - 16} concurrent "
                "connections (raise it with `ulimit -n`)",
                file=sys.stderr,
            )


def run(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT; return the exit status.

    The first stdout line is ``llmload sim listening on http://HOST:PORT``
    (flushed), with the port the kernel chose when ``--port 0``.

    Returns:
        0 after a signal, 1 if the address cannot be bound or the engine
        loop failed, 2 on a bad option.
    """
    try:
        config = parse_config(argv)
    except ConfigError as exc:
        print(f"llmload sim: {exc}", file=sys.stderr)
        return 2
    return serve(config)


def serve(config: SimConfig) -> int:
    """Serve ``config`` until SIGTERM or SIGINT; see ``run``."""
    _raise_open_file_limit(8192)
    try:
        listener = listen(config.host, config.port, config.backlog)
    except OSError as exc:
        print(
            f"llmload sim: cannot listen on {config.host}:{config.port}: {exc}; "
            "pick another --port, or --port 0 for any free port",
            file=sys.stderr,
        )
        return 1
    registry = CollectorRegistry()
    engine = Engine(config)
    metrics = SimMetrics(registry, engine)
    app = SimApp(config=config, engine=engine, metrics=metrics, registry=registry)
    server = WSGIServer(listener, app, log=None)
    stop = Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGTERM, signal.SIGINT)]
    failures: list[BaseException] = []

    def engine_failed(exc: BaseException) -> None:
        failures.append(exc)
        stop.set()

    try:
        server.start()
        engine.start(on_failure=engine_failed)
        host, port = listener.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"llmload sim listening on http://{shown}:{port}", flush=True)
        stop.wait()
    finally:
        server.stop(timeout=config.shutdown_grace_s)
        engine.stop()
        for handler in handlers:
            handler.cancel()
    if failures:
        print(f"llmload sim: engine loop failed: {failures[0]!r}; stopped", file=sys.stderr)
        return 1
    print("llmload sim: stopped", file=sys.stderr)
    return 0
