"""Wire truth from a loopback packet capture: when each request left and its first token came back.

``Capture`` runs ``tcpdump`` on ``lo`` for one TCP port (payload-bearing
segments only) into a classic pcap file with nanosecond stamps: the instant
each segment passed through the kernel, the same clock for client and server
and independent of both. ``wire_requests`` rebuilds every request from it:
per connection, a client segment starting with ``POST `` opens a request
(``send_unix``), and the first server segment after it holding a ``data:``
event other than ``[DONE]`` is its first token (``first_unix``). Wire TTFT is
first − send.

``pair_requests`` pairs those with a run's ``--requests-log``: each logged
request with the nearest unpaired wire request sent within ``PAIR_WITHIN_S``
of it (with ``--processes``, each worker's log is first shifted onto the
wire's clock and the E2E, send → the reply's last segment, tells close sends
apart). Client − wire TTFT per pair is the client's error (where its clock
starts included).
IPv4 loopback only (the simulator listens on 127.0.0.1); pcapng is not read.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    """One request as the wire saw it (wall-clock ns stamps); ``first_ns``/``last_ns`` None when no reply came."""

    client_port: int
    send_ns: int
    first_ns: int | None
    last_ns: int | None = None

    @property
    def send_unix(self) -> float:
        """The first request segment, wall-clock seconds."""
        return self.send_ns / _NS

    @property
    def ttft_s(self) -> float | None:
        """Wire TTFT: first token segment − first request segment (s); None without a token."""
        return None if self.first_ns is None else (self.first_ns - self.send_ns) / _NS

    @property
    def e2e_s(self) -> float | None:
        """Wire E2E: the reply's last segment before the connection's next request − the send (s)."""
        return None if self.last_ns is None else (self.last_ns - self.send_ns) / _NS


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
    open_requests: dict[int, list[int | None]] = {}  # client port -> [send ns, first ns, last ns]
    done: list[WireRequest] = []

    def close(client: int) -> None:
        sent, first, last = open_requests.pop(client)
        assert sent is not None
        done.append(WireRequest(client, sent, first, last))

    for stamp, sport, dport, payload in _segments(path):
        if dport == port and payload.startswith(b"POST "):
            if sport in open_requests:
                close(sport)
            open_requests[sport] = [stamp, None, None]
        elif sport == port and dport in open_requests:
            times = open_requests[dport]
            times[2] = stamp
            if times[1] is None:
                for event in payload.split(b"data:")[1:]:
                    if not event.lstrip().startswith(b"[DONE]"):
                        times[1] = stamp
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
    """Per pair: the request's own bound of its error: the larger of its largest read lag (``read_lag_max_s``) and
    its send lag (``send_lag_s``); None: neither known."""
    notes: list[str] = field(default_factory=list)


_Logged = tuple[float, float | None, float | None, float | None]  # send (s), TTFT, E2E, own lag bound


def _own_lag_s(row: dict[str, Any]) -> float | None:
    """A ``--requests-log`` line's bound of its own error (s): the larger of read_lag_max_s and send_lag_s."""
    lags = [lag for lag in (row.get("read_lag_max_s"), row.get("send_lag_s")) if lag is not None]
    return max(lags) if lags else None


def _near(wire: list[WireRequest], sends: list[float], sent: float, e2e: float | None, within_s: float) -> list[int]:
    """Indexes of the wire requests sent within ``within_s`` of ``sent`` (and, with ``e2e``, as long within 2 ms)."""
    lo, hi = bisect.bisect_left(sends, sent - within_s), bisect.bisect_right(sends, sent + within_s)
    return [i for i in range(lo, hi) if e2e is None or (w_e2e := wire[i].e2e_s) is None or abs(w_e2e - e2e) <= 0.002]


def _clock_offset_s(rows: list[_Logged], wire: list[WireRequest], sends: list[float]) -> float:
    """The shift (s) of one log's send stamps that matches most of a sample of its rows to the wire.

    A row matches when a wire request was sent within 1 ms of its shifted send
    and lasted as long (E2E within 2 ms: the client's E2E is exact). Candidates
    are the gaps from the first few rows to every wire send within 1 s; 0 when
    nothing is near.
    """
    if not rows or not sends:
        return 0.0
    ordered = sorted(rows)
    sample = ordered[:: max(1, len(ordered) // 40)]
    best, best_hits = 0.0, -1
    for anchor, _, _, _ in ordered[:4]:
        lo, hi = bisect.bisect_left(sends, anchor - 1.0), bisect.bisect_right(sends, anchor + 1.0)
        for candidate in [0.0, *(send - anchor for send in sends[lo:hi])]:
            hits = sum(bool(_near(wire, sends, t + candidate, e2e, 0.001)) for t, _, e2e, _ in sample)
            if hits > best_hits or (hits == best_hits and abs(candidate) < abs(best)):
                best, best_hits = candidate, hits
    return best


def pair_requests(pcap: Path, port: int, requests_logs: Sequence[Path]) -> Pairs:
    """Pair the logged requests with the wire's and return their TTFT differences.

    ``requests_logs``: every ``--requests-log`` file of the run (one per worker
    with ``--processes``; each file's stamps are first shifted onto the wire's
    clock, ``_clock_offset_s``). Each logged request, in send order, takes the
    unpaired wire request sent within ``PAIR_WITHIN_S`` closest to its send;
    with several logs (shifted stamps), the one whose E2E is closest to its own
    (E2E is exact on a client that keeps up, and does not lean on the TTFT
    being measured).
    """
    pairs = Pairs()
    wire = wire_requests(pcap, port)
    sends = [w.send_unix for w in wire]
    logged: list[_Logged] = []
    for log in requests_logs:
        rows: list[_Logged] = []
        for line in log.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            # the wall-clock stamp is taken before the connection is made ready; the POST follows it
            sent = row["started_at_unix"] + (row.get("connect_s") or 0.0)
            rows.append((sent, row.get("ttft_s"), row.get("e2e_s"), _own_lag_s(row)))
        offset_s = _clock_offset_s(rows, wire, sends) if len(requests_logs) > 1 else 0.0
        if abs(offset_s) > 0.001:
            pairs.notes.append(
                f"{log.name}: its send stamps are {offset_s * 1e3:+.1f} ms off the wire's (a worker's clock mapped "
                "onto the master's): shifted before pairing; first-token lateness is relative to that shift"
            )
        logged.extend((sent + offset_s, ttft, e2e, lag) for sent, ttft, e2e, lag in rows)
    logged.sort()
    if len(wire) != len(logged):
        pairs.notes.append(f"the capture holds {len(wire)} requests, the log {len(logged)}")
    used: set[int] = set()
    shifted = len(requests_logs) > 1  # stamps shifted by an estimate: the E2E tells close sends apart
    far = 0
    for sent, ttft, e2e, lag in logged:
        free = [i for i in _near(wire, sends, sent, None, PAIR_WITHIN_S) if i not in used]
        if not free:
            far += 1
            continue

        def distance(i: int, sent: float = sent, e2e: float | None = e2e) -> float:
            w_e2e = wire[i].e2e_s
            gap = abs(sends[i] - sent)
            return gap if not shifted or e2e is None or w_e2e is None else abs(w_e2e - e2e) + gap / 10

        best = min(free, key=distance)
        used.add(best)
        w = wire[best]
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
