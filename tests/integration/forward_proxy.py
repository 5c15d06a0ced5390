"""A minimal HTTP forward proxy on 127.0.0.1 for tests: logs what clients asked it for.

Plain http: each request must use an absolute-form target (``GET http://host:port/path``);
it is forwarded in origin form, without ``Proxy-Authorization``, over one upstream
connection per client connection, and the upstream's bytes are piped back as they come
(keep-alive and streaming preserved). ``CONNECT host:port``: answered 200 and piped both
ways. With ``require`` set, a request or CONNECT without that exact ``Proxy-Authorization``
value is answered 407 and the connection closed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

__all__ = ["ForwardProxy", "ProxiedRequest"]

_HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """One request the proxy received: method, target as sent, and its Proxy-Authorization (or None)."""

    method: str
    target: str
    proxy_authorization: str | None


class ForwardProxy:
    """A threaded forward proxy (context manager); ``log`` lists what it was asked."""

    def __init__(self, require: str | None = None) -> None:
        """Create the proxy (started by ``__enter__``); ``require``: the Proxy-Authorization value to demand."""
        self._require = require
        self._lock = threading.Lock()
        self._log: list[ProxiedRequest] = []
        self._socks: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]  # the listening port

    @property
    def log(self) -> list[ProxiedRequest]:
        """A copy of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._log)

    def __enter__(self) -> Self:
        threading.Thread(target=self._accept_loop, daemon=True).start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _track(self, sock: socket.socket) -> socket.socket:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # relay each write at once, as it came
        with self._lock:
            self._socks.add(sock)
        return sock

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(self._track(conn),), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        upstream_origin = ""
        pending = b""
        try:
            while True:
                head, pending = _read_head(client, pending)
                if head is None:
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                fields = [line for line in lines[1:] if line]
                auth = next(
                    (v.strip() for n, _, v in (f.partition(":") for f in fields) if n.lower() == "proxy-authorization"),
                    None,
                )
                with self._lock:
                    self._log.append(ProxiedRequest(method, target, auth))
                if self._require is not None and auth != self._require:
                    client.sendall(
                        b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
                        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    return
                if method == "CONNECT":
                    host, _, port = target.rpartition(":")
                    upstream = self._track(socket.create_connection((host, int(port)), timeout=5))
                    upstream.settimeout(None)
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
                    if pending:
                        upstream.sendall(pending)
                    _pipe(client, upstream)
                    return
                parts = urlsplit(target)
                if parts.scheme != "http" or not parts.hostname:
                    client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                origin = f"{parts.hostname}:{parts.port or 80}"
                if upstream is None or origin != upstream_origin:
                    if upstream is not None:
                        return  # one origin per client connection is all the tests need
                    upstream = self._track(socket.create_connection((parts.hostname, parts.port or 80), timeout=5))
                    upstream.settimeout(None)
                    upstream_origin = origin
                    threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
                length = 0
                kept = []
                for f in fields:
                    name = f.partition(":")[0].strip().lower()
                    if name == "proxy-authorization":
                        continue
                    if name == "content-length":
                        length = int(f.partition(":")[2])
                    kept.append(f)
                while len(pending) < length:
                    more = client.recv(65536)
                    if not more:
                        return
                    pending += more
                body, pending = pending[:length], pending[length:]
                path = parts.path or "/"
                if parts.query:
                    path += "?" + parts.query
                upstream.sendall(f"{method} {path} {version}\r\n".encode("latin-1") + _join(kept) + body)
        except OSError:
            return
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    sock.close()


def _join(fields: list[str]) -> bytes:
    return "".join(f"{f}\r\n" for f in fields).encode("latin-1") + b"\r\n"


def _read_head(sock: socket.socket, pending: bytes) -> tuple[bytes | None, bytes]:
    """One request head (without the blank line) and the bytes after it; None when the client closed."""
    data = pending
    while b"\r\n\r\n" not in data:
        if len(data) > _HEAD_LIMIT:
            return None, b""
        more = sock.recv(65536)
        if not more:
            return None, b""
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes from ``source`` to ``sink`` until either side closes; then close both for writing."""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (sink, source):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
