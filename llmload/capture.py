"""Wire truth from a loopback packet capture: when each request left and its first token came back.

``Capture`` runs ``tcpdump`` on ``lo`` for one TCP port (payload-bearing
segments only) into a classic pcap file with nanosecond stamps: the instant
each segment passed through the kernel, the same clock for client and server
and independent of both. ``wire_requests`` rebuilds every request from it:
per connection, a client segment starting with ``POST `` opens a request
(``send_unix``), and the first server segment after it holding a ``data:``
event other than ``[DONE]`` is its first token (``first_unix``). Wire TTFT is
first − send.

``pair_requests`` pairs those with a run's ``--requests-log``: both sorted by
send time and paired in that order, each pair's sends within
``PAIR_WITHIN_S`` (the client stamps its send just before the write, the
wire a few microseconds later; two sends closer than the jitter may swap, and
their errors with them). Client − wire TTFT per pair is the client's error
(where its clock starts included).
IPv4 loopback only (the simulator listens on 127.0.0.1); pcapng is not read.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PAIR_WITHIN_S", "Capture", "Pairs", "WireRequest", "capture_available", "pair_requests", "wire_requests"]

PAIR_WITHIN_S = 0.020
"""Largest gap (s) between a logged send and the wire's POST segment for the two to be paired.

Wide enough to keep a client whose loop was late to write the request (the
gap is then part of its TTFT error), narrow enough to refuse a log and a
capture that do not line up at all.
"""

_NS = 1_000_000_000
_SETTLE_S = 1.5  # tcpdump hands packets to its file in blocks, at least once a second: wait before stopping it
# segments that carry payload (pure ACKs are neither copied nor written), IPv4
_PAYLOAD = "(((ip[2:2] - ((ip[0]&0xf)<<2)) - ((tcp[12]&0xf0)>>2)) != 0)"


def capture_available() -> bool:
    """True when ``tcpdump`` is on PATH and this process is root (the rights to capture on ``lo``)."""
    return shutil.which("tcpdump") is not None and hasattr(os, "geteuid") and os.geteuid() == 0


class Capture:
    """``tcpdump`` on ``lo`` for TCP ``port``, writing ``path``; ``start`` then ``stop``."""

    def __init__(self, path: Path, port: int, *, prefix: tuple[str, ...] = ()) -> None:
        """``prefix``: argv put before ``tcpdump`` (``("taskset", "-c", "1")`` keeps it off the client's core)."""
        self.path = path
        self.port = port
        self._prefix = prefix
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = path.with_suffix(".tcpdump.log")

    def start(self, within_s: float = 10.0) -> None:
        """Start tcpdump and return once it is listening.

        Raises:
            RuntimeError: tcpdump exited or did not say it was listening within ``within_s`` (its log is named).
        """
        argv = [
            *self._prefix, "tcpdump", "-i", "lo", "-n", "-s", "256", "-B", "32768", "--time-stamp-precision", "nano",
            "-w", str(self.path), f"tcp port {self.port} and {_PAYLOAD}",
        ]  # fmt: skip
        with self._log.open("wb") as err:
            self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if b"listening on" in self._log.read_bytes():
                return
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"tcpdump did not start capturing (log {self._log})")

    def stop(self) -> None:
        """Let the last packets reach the file, then stop tcpdump (SIGINT: it flushes on exit). Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            time.sleep(_SETTLE_S)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request as the wire saw it (wall-clock ns stamps); ``first_ns`` None when no token came."""

    client_port: int
    send_ns: int
    first_ns: int | None

    @property
    def send_unix(self) -> float:
        """The first request segment, wall-clock seconds."""
        return self.send_ns / _NS

    @property
    def ttft_s(self) -> float | None:
        """Wire TTFT: first token segment − first request segment (s); None without a token."""
        return None if self.first_ns is None else (self.first_ns - self.send_ns) / _NS


def _frames(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(stamp ns, link type, frame) of every record of a classic pcap file."""
    data = path.read_bytes()
    if len(data) < 24:
        return
    magic = data[:4]
    orders = {
        b"\xd4\xc3\xb2\xa1": ("<", 1000),
        b"\xa1\xb2\xc3\xd4": (">", 1000),
        b"\x4d\x3c\xb2\xa1": ("<", 1),
        b"\xa1\xb2\x3c\x4d": (">", 1),
    }
    if magic not in orders:
        raise ValueError(f"{path}: not a classic pcap file (magic {magic.hex()})")
    endian, scale = orders[magic]
    link = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
    record = struct.Struct(endian + "IIII")
    offset = 24
    while offset + 16 <= len(data):
        seconds, fraction, captured, _ = record.unpack_from(data, offset)
        offset += 16
        yield seconds * _NS + fraction * scale, link, data[offset : offset + captured]
        offset += captured


_IP_OFFSET = {1: 14, 113: 16, 276: 20, 0: 4, 12: 0, 101: 0}  # Ethernet, Linux SLL, SLL2, BSD null, raw IP


def _segments(path: Path) -> Iterator[tuple[int, int, int, bytes]]:
    """(stamp ns, source port, destination port, payload) of every IPv4 TCP segment."""
    for stamp, link, frame in _frames(path):
        start = _IP_OFFSET.get(link)
        if start is None or len(frame) < start + 20:
            continue
        ip = frame[start:]
        if ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        tcp = ip[(ip[0] & 0x0F) * 4 :]
        if len(tcp) < 20:
            continue
        sport, dport = struct.unpack_from("!HH", tcp, 0)
        yield stamp, sport, dport, tcp[(tcp[12] >> 4) * 4 :]


def wire_requests(path: Path, port: int) -> list[WireRequest]:
    """Every request to ``port`` in the capture, in order of their first segment."""
    open_requests: dict[int, tuple[int, int | None]] = {}  # client port -> (send ns, first ns)
    done: list[WireRequest] = []

    def close(client: int) -> None:
        sent, first = open_requests.pop(client)
        done.append(WireRequest(client, sent, first))

    for stamp, sport, dport, payload in _segments(path):
        if dport == port and payload.startswith(b"POST "):
            if sport in open_requests:
                close(sport)
            open_requests[sport] = (stamp, None)
        elif sport == port and dport in open_requests and open_requests[dport][1] is None:
            for event in payload.split(b"data:")[1:]:
                if not event.lstrip().startswith(b"[DONE]"):
                    open_requests[dport] = (open_requests[dport][0], stamp)
                    break
    for client in list(open_requests):
        close(client)
    done.sort(key=lambda r: r.send_ns)
    return done


@dataclass(slots=True)
class Pairs:
    """Client − wire TTFT of every paired success (s), the wire TTFTs of those pairs, and what could not pair.

    ``errors_s`` and ``wire_ttft_s`` are in the same order (one entry per pair).
    """

    errors_s: list[float] = field(default_factory=list)
    wire_ttft_s: list[float] = field(default_factory=list)
    late_s: list[float] = field(default_factory=list)
    """Per pair: when the client says its first token arrived − when it crossed the wire (s)."""
    lag_s: list[float | None] = field(default_factory=list)
    """Per pair: the request's largest read lag (``read_lag_max_s``; None: no stamped read)."""
    notes: list[str] = field(default_factory=list)


def pair_requests(pcap: Path, port: int, requests_log: Path) -> Pairs:
    """Pair the logged requests with the wire's (by send order) and return their TTFT differences."""
    pairs = Pairs()
    wire = wire_requests(pcap, port)
    logged: list[tuple[float, float | None, float | None]] = []
    for line in requests_log.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        # the wall-clock stamp is taken before the connection is made ready; the POST follows it
        logged.append(
            (row["started_at_unix"] + (row.get("connect_s") or 0.0), row.get("ttft_s"), row.get("read_lag_max_s"))
        )
    logged.sort()
    posts = wire
    if len(posts) != len(logged):
        pairs.notes.append(f"the capture holds {len(posts)} requests, the log {len(logged)}: paired by send order")
    # the client may send requests the log does not hold (the preflight probe): align on the last ones
    skip = max(0, len(posts) - len(logged))
    far = 0
    for (sent, ttft, lag), w in zip(logged, posts[skip:], strict=False):
        if abs(w.send_unix - sent) > PAIR_WITHIN_S:
            far += 1
            continue
        wire_ttft = w.ttft_s
        if ttft is None or wire_ttft is None or w.first_ns is None:
            continue
        pairs.errors_s.append(ttft - wire_ttft)
        pairs.wire_ttft_s.append(wire_ttft)
        pairs.late_s.append(sent + ttft - w.first_ns / _NS)
        pairs.lag_s.append(lag)
    if far:
        pairs.notes.append(f"{far} logged sends had no POST segment within {PAIR_WITHIN_S * 1e3:g} ms: not paired")
    return pairs
