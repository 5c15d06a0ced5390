"""A loopback TCP connection whose client end reads with the kernel's receive stamps (Linux ``SO_TIMESTAMPNS``).

For tests and benches of what a read's stamp means (``llmload.net.sockets``):
``write`` sends one segment from the server end (``TCP_NODELAY``) and logs
when (``CLOCK_REALTIME`` ns, the clock of the stamps); ``read`` does one
``recvmsg`` on the client end and returns the bytes, their stamp and when
the read began. Plain blocking sockets, no event loop.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from types import TracebackType

from llmload.net.sockets import CMSG_BYTES, stamp_ns

__all__ = ["StampedLink", "StampedRead"]

_SO_TIMESTAMPNS = 35  # Linux's value; socket.SO_TIMESTAMPNS is missing on some builds


@dataclass(frozen=True, slots=True)
class StampedRead:
    """One read: ``data``, its kernel stamp ``stamp_ns`` and ``started_ns`` (when the read began), both realtime ns."""

    data: bytes
    stamp_ns: int
    started_ns: int


class StampedLink:
    """Server end writes, client end reads stamped; ``written_ns[i]`` is when write ``i`` began."""

    def __init__(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.client = socket.create_connection(listener.getsockname())
        self.client.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self.server, _ = listener.accept()
        listener.close()
        self.server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.written_ns: list[int] = []

    def write(self, data: bytes) -> None:
        """Send ``data`` from the server end (one segment when small), noting the time first."""
        self.written_ns.append(time.time_ns())
        self.server.sendall(data)

    def read(self, size: int = 16384) -> StampedRead:
        """One ``recvmsg`` of at most ``size`` bytes on the client end (blocks until bytes are there)."""
        started_ns = time.time_ns()
        data, ancillary, _flags, _address = self.client.recvmsg(size, CMSG_BYTES)
        return StampedRead(data, stamp_ns(ancillary), started_ns)

    def warm(self, round_trips: int = 20, segment_bytes: int = 100) -> None:
        """Write/read round trips 2 ms apart: the connection leaves its quick-ACK start (it delays its ACKs)."""
        for _ in range(round_trips):
            self.server.sendall(b"w" * segment_bytes)
            time.sleep(0.002)
            self.client.recv(16384)

    def close(self) -> None:
        """Close both ends."""
        self.client.close()
        self.server.close()

    def __enter__(self) -> StampedLink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
