"""Why a late read cannot get each queued event's own receive stamp on Linux (figures, not a test).

A server writes four 170-byte segments 20 ms apart on loopback while the
client does not read; then the client reads exactly one segment per
``recvmsg`` with ``SO_TIMESTAMPNS``. Linux merges segments that queue behind
an unread one into one buffer carrying the newest segment's stamp, so every
read reports the stamp of the *last* write (printed: stamp minus each
write's own time, about +60/+40/+20/0 ms), however small the reads. This is
why ``llmload.net.transport`` bounds the error of such reads with the read
lag (a bound on what the late read cost) rather than reading in smaller pieces.

Run: ``python bench/stamp_merge.py`` (Linux only).
"""

from __future__ import annotations

import socket
import struct
import threading
import time

_SO_TIMESTAMPNS = 35
_SEGMENT = b"x" * 170
_WRITES = 4


def main() -> None:
    """Print, for each segment read on its own, its stamp minus its write time and minus the last write's."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    peer, _ = server.accept()
    written_ns: list[int] = []

    def write() -> None:
        for _ in range(_WRITES):
            time.sleep(0.02)
            peer.send(_SEGMENT)
            written_ns.append(time.time_ns())

    writer = threading.Thread(target=write)
    writer.start()
    writer.join()
    time.sleep(0.05)  # all four segments wait in the client's receive queue
    for index in range(_WRITES):
        data, ancillary, _flags, _address = client.recvmsg(len(_SEGMENT), 64)
        seconds, nanoseconds = struct.unpack_from("@ll", ancillary[0][2])
        stamp_ns = seconds * 1_000_000_000 + nanoseconds
        print(
            f"read {index}: {len(data)} bytes; stamp - its write {(stamp_ns - written_ns[index]) / 1e6:+.3f} ms, "
            f"stamp - last write {(stamp_ns - written_ns[-1]) / 1e6:+.3f} ms"
        )
    for sock in (client, peer, server):
        sock.close()


if __name__ == "__main__":
    main()
