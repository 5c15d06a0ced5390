"""Process entry point of ``llmload sim``: listen, run the engine, stop on a signal."""

from __future__ import annotations

import errno
import resource
import signal
import socket
import struct
import sys
from typing import Any

import gevent
from gevent import socket as gsocket
from gevent.event import Event
from gevent.pywsgi import WSGIHandler, WSGIServer
from prometheus_client import CollectorRegistry

from llmload.errors import ConfigError
from llmload.sim.app import SimApp
from llmload.sim.config import SimConfig, parse_config
from llmload.sim.engine import Engine
from llmload.sim.metrics import SimMetrics

__all__ = ["RECEIVED_NS_KEY", "listen", "run"]

RECEIVED_NS_KEY = "llmload.sim.received_ns"
"""WSGI environ key: kernel receive stamp (CLOCK_REALTIME ns) of a request's first bytes; 0 if unknown."""

# SO_TIMESTAMPNS (Linux asm-generic/socket.h; not exported by Python): receive stamps
# as a struct timespec in an SCM_TIMESTAMPNS control message.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_CMSG_BYTES = 64


class _StampedConnection(gsocket.socket):  # type: ignore[misc]
    """An accepted connection that remembers when the kernel received the first bytes of each request.

    The simulator's TTFT starts there (not when its handler got round to the
    request), so it is what a client on the same machine can measure: under a
    burst of new connections a request may wait in the kernel while earlier
    ones are parsed.
    """

    __slots__ = ("first_stamp_ns",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_stamp_ns = 0

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        """``recv_into`` as gevent does it, keeping the first kernel stamp since ``first_stamp_ns`` was reset."""
        view = memoryview(buffer)
        if nbytes:
            view = view[:nbytes]
        while True:
            try:
                size, ancillary, _flags, _address = self._sock.recvmsg_into([view], _CMSG_BYTES, flags)
            except BlockingIOError:
                if self.timeout == 0.0:
                    raise
                self._wait(self._read_event)
                continue
            if not self.first_stamp_ns:
                for _level, kind, value in ancillary:
                    if kind == _SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
                        seconds, nanoseconds = _TIMESPEC.unpack_from(value)
                        self.first_stamp_ns = seconds * 1_000_000_000 + nanoseconds
            return int(size)


class _StampingHandler(WSGIHandler):  # type: ignore[misc]
    """Puts the request's kernel receive stamp into the environ (``RECEIVED_NS_KEY``)."""

    def handle_one_request(self) -> Any:
        if isinstance(self.socket, _StampedConnection):
            self.socket.first_stamp_ns = 0
        return super().handle_one_request()

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        environ[RECEIVED_NS_KEY] = getattr(self.socket, "first_stamp_ns", 0)
        return environ


class _StampingServer(WSGIServer):  # type: ignore[misc]
    """A WSGI server whose accepted connections are ``_StampedConnection``s."""

    handler_class = _StampingHandler

    def do_read(self) -> tuple[_StampedConnection, Any] | None:
        listener = self.socket
        try:
            fd, address = listener._accept()
        except BlockingIOError:
            if not listener.timeout:
                return None
            raise
        return _StampedConnection(listener.family, listener.type, listener.proto, fileno=fd), address


def listen(host: str, port: int, backlog: int) -> gsocket.socket:
    """Return a listening gevent socket with ``TCP_NODELAY`` and receive stamps (inherited by accepted sockets).

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
        if sys.platform.startswith("linux"):
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)  # inherited by accepted sockets
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
        0 after a signal, 1 if the engine loop failed, 2 on a bad option or
        an address that cannot be bound (in use, or not this machine's).
    """
    try:
        config = parse_config(argv)
    except ConfigError as exc:
        print(f"llmload sim: {exc}", file=sys.stderr)
        return 2
    return serve(config)


def _listen_fix(exc: OSError) -> str:
    """What to change when listening failed with ``exc``: the port (in use, not allowed) or the host."""
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return "--host must be an address of this machine (127.0.0.1, 0.0.0.0 for all, or one of its own)"
    return "pick another --port, or --port 0 for any free port"


def serve(config: SimConfig) -> int:
    """Serve ``config`` until SIGTERM or SIGINT; see ``run``."""
    _raise_open_file_limit(8192)
    try:
        listener = listen(config.host, config.port, config.backlog)
    except OSError as exc:
        print(f"llmload sim: cannot listen on {config.host}:{config.port}: {exc}; {_listen_fix(exc)}", file=sys.stderr)
        return 2
    registry = CollectorRegistry()
    engine = Engine(config)
    metrics = SimMetrics(
        registry,
        engine,
        model=config.model,
        max_num_seqs=config.max_num_seqs,
        metric_names=config.shapes.metric_names,
    )
    app = SimApp(config=config, engine=engine, metrics=metrics, registry=registry)
    server = _StampingServer(listener, app, log=None)
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
