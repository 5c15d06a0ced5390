"""``ScriptedServer``: a scripted HTTP/1.1 server on plain sockets and threads (see ``llmload.testing``)."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from http import HTTPStatus
from types import TracebackType
from typing import Any, Self

from llmload.testing.notation import W, Write

__all__ = ["Ending", "Framing", "ReceivedRequest", "Reply", "ScriptedServer", "SendLog", "json_reply"]

_MAX_HEAD_BYTES = 64 * 1024


class Framing(Enum):
    """How the reply body is delimited."""

    CHUNKED = "chunked"  # each Write is one HTTP chunk
    CONTENT_LENGTH = "content-length"  # raw bytes; length = sum of writes unless Reply.content_length
    UNTIL_CLOSE = "until-close"  # raw bytes; the body ends when the server closes


class Ending(Enum):
    """What happens after the last write."""

    COMPLETE = "complete"  # end the message (last chunk); keep the connection unless keep_alive=False
    CLOSE = "close"  # close the connection (FIN) without ending a chunked/length body
    RESET = "reset"  # abort the connection (RST)
    STALL = "stall"  # send nothing more and hold the connection until the server stops


@dataclass(frozen=True, slots=True)
class Reply:
    """The script for answering one request. Times are ms after the request was fully received."""

    writes: Sequence[Write] = ()
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})
    headers_at_ms: float = 0.0
    framing: Framing = Framing.CHUNKED
    ending: Ending = Ending.COMPLETE
    keep_alive: bool = True
    content_length: int | None = None  # CONTENT_LENGTH framing: announce this instead of the sum
    close_after_ms: float | None = None  # complete the reply as keep-alive, then close the idle connection
    raw: bool = False  # no status line or headers: the writes are the whole answer, then close (not HTTP/1.1)


def json_reply(status: int, body: str | bytes, *, at_ms: float = 0.0) -> Reply:
    """A Content-Length JSON reply (``application/json``) sent ``at_ms`` after the request."""
    return Reply(
        writes=[W(at_ms, body)],
        status=status,
        headers={"Content-Type": "application/json"},
        headers_at_ms=at_ms,
        framing=Framing.CONTENT_LENGTH,
    )


@dataclass(slots=True)
class SendLog:
    """When the server actually sent each part of one reply (``time.perf_counter`` seconds).

    Lets same-process tests compare client timestamps with real send times
    instead of scheduled ones, so a briefly overloaded machine does not fail them.
    """

    arrived_s: float  # request fully received
    headers_s: float | None = None  # status line and headers sent
    writes_s: list[float] = field(default_factory=list)  # one per Write, in order


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """One request as the server received it; header names are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class ScriptedServer:
    """A real HTTP/1.1 server on 127.0.0.1 that plays scripted replies."""

    def __init__(self, replies: Reply | Sequence[Reply] | Callable[[ReceivedRequest], Reply]) -> None:
        """Create the server (not started).

        Args:
            replies: one ``Reply`` for every request; a sequence, used in
                request order (the last one repeats); or a function of the request.
        """
        self._replies = replies
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[ReceivedRequest] = []
        self._send_logs: list[SendLog] = []
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self.connections_accepted = 0

    @property
    def port(self) -> int:
        """The bound port (after ``start``)."""
        if self._listener is None:
            raise RuntimeError("ScriptedServer is not started; use it as a context manager")
        port: int = self._listener.getsockname()[1]
        return port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def send_log(self, index: int) -> SendLog:
        """Actual send times of the reply to request ``index`` (0-based, arrival order)."""
        with self._lock:
            return self._send_logs[index]

    def start(self) -> None:
        """Bind port 0 and start accepting in a background thread."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        self._listener = listener
        self._spawn(self._accept_loop, listener)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, cut open connections and join the threads."""
        self._stopping.set()
        if self._listener is not None:
            _shutdown(self._listener)
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            _shutdown(conn)
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name="scripted-server", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                break
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections_accepted += 1
                self._conns.add(conn)
            if self._stopping.is_set():  # accepted while stop() was cutting connections
                _shutdown(conn)
            self._spawn(self._serve, conn)
        listener.close()

    def _serve(self, conn: socket.socket) -> None:
        pending = b""
        try:
            while not self._stopping.is_set():
                received = _read_request(conn, pending)
                if received is None:
                    return
                request, pending = received
                log = SendLog(time.perf_counter())
                with self._lock:
                    index = len(self._requests)
                    self._requests.append(request)
                    self._send_logs.append(log)
                reply = self._reply_for(request, index)
                if not self._play(conn, reply, log):
                    return
                if reply.close_after_ms is not None:  # announced keep-alive, then hangs up while idle
                    self._stopping.wait(reply.close_after_ms / 1000)
                    return
        except OSError:
            return  # the client went away
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _reply_for(self, request: ReceivedRequest, index: int) -> Reply:
        replies = self._replies
        if isinstance(replies, Reply):
            return replies
        if callable(replies):
            return replies(request)
        return replies[min(index, len(replies) - 1)]

    def _play(self, conn: socket.socket, reply: Reply, log: SendLog) -> bool:
        """Send one reply; return True when the connection may serve another request."""
        if reply.raw:  # a port that speaks another protocol (HTTP/2 frames, TLS): bytes as they are, then close
            for write in reply.writes:
                if not self._sleep_until(log.arrived_s + write.at_ms / 1000):
                    return False
                log.writes_s.append(time.perf_counter())
                conn.sendall(write.data)
            return False
        chunked = reply.framing is Framing.CHUNKED
        head = [f"HTTP/1.1 {reply.status} {_phrase(reply.status)}"]
        head += [f"{name}: {value}" for name, value in reply.headers.items()]
        if chunked:
            head.append("Transfer-Encoding: chunked")
        elif reply.framing is Framing.CONTENT_LENGTH:
            length = reply.content_length
            head.append(f"Content-Length: {sum(len(w.data) for w in reply.writes) if length is None else length}")
        keep = reply.keep_alive and reply.framing is not Framing.UNTIL_CLOSE and reply.ending is Ending.COMPLETE
        if not keep:
            head.append("Connection: close")
        arrived = log.arrived_s
        if not self._sleep_until(arrived + reply.headers_at_ms / 1000):
            return False
        log.headers_s = time.perf_counter()
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        for write in reply.writes:
            if not self._sleep_until(arrived + write.at_ms / 1000):
                return False
            log.writes_s.append(time.perf_counter())
            if chunked and write.data:
                conn.sendall(b"%x\r\n%s\r\n" % (len(write.data), write.data))
            elif not chunked:
                conn.sendall(write.data)
        if reply.ending is Ending.COMPLETE:
            if chunked:
                conn.sendall(b"0\r\n\r\n")
            return keep
        if reply.ending is Ending.RESET:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif reply.ending is Ending.STALL:
            self._stopping.wait()
        return False

    def _sleep_until(self, when: float) -> bool:
        """Sleep until ``when`` (perf_counter seconds); False if the server is stopping."""
        remaining = when - time.perf_counter()
        if remaining > 0:
            return not self._stopping.wait(remaining)
        return not self._stopping.is_set()


def _read_request(conn: socket.socket, pending: bytes) -> tuple[ReceivedRequest, bytes] | None:
    """Read one request; None when the client closed the connection between requests."""
    data = pending
    while b"\r\n\r\n" not in data:
        if len(data) > _MAX_HEAD_BYTES:
            raise OSError("request head too large")
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise OSError("ScriptedServer needs request bodies with Content-Length")
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        more = conn.recv(65536)
        if not more:
            return None
        rest += more
    return ReceivedRequest(method, path, headers, rest[:length]), rest[length:]


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed or never connected
        sock.shutdown(socket.SHUT_RDWR)
