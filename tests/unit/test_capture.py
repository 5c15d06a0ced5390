"""capture: requests rebuilt from a classic pcap file, paired with a requests log by send order."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from llmload.capture import pair_requests, wire_requests

PORT = 8000
T0_NS = 1_700_000_000 * 1_000_000_000


def _frame(sport: int, dport: int, payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 0, 0, 5 << 4, 0x18, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, bytes([127, 0, 0, 1]), bytes(4)) + tcp
    return bytes(12) + b"\x08\x00" + ip  # Ethernet header as Linux lo shows it


def _pcap(path: Path, segments: list[tuple[float, int, int, bytes]]) -> Path:
    """Write ``segments`` (ms after T0, source port, destination port, payload) as a nanosecond pcap."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
    for at_ms, sport, dport, payload in segments:
        stamp = T0_NS + round(at_ms * 1e6)
        frame = _frame(sport, dport, payload)
        out += struct.pack("<IIII", stamp // 10**9, stamp % 10**9, len(frame), len(frame)) + frame
    path.write_bytes(bytes(out))
    return path


REQUEST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n{}"
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
TOKEN = b'data: {"choices":[{"text":"a"}]}\n\n'
DONE = b"data: [DONE]\n\n"


def test_issue19_wire_requests_time_each_post_and_its_first_token_event(tmp_path):
    pcap = _pcap(
        tmp_path / "c.pcap",
        [
            (0.0, 40001, PORT, REQUEST),
            (0.3, 40002, PORT, REQUEST),
            (1.0, PORT, 40001, HEADERS),  # headers alone are not the first token
            (50.0, PORT, 40001, TOKEN),
            (52.5, PORT, 40002, HEADERS + TOKEN),
            (60.0, PORT, 40001, TOKEN + DONE),
            (61.0, 40001, PORT, REQUEST),  # the next request on a kept-alive connection
            (62.0, PORT, 40001, DONE),  # [DONE] alone carries no token
        ],
    )
    wire = wire_requests(pcap, PORT)
    assert [w.client_port for w in wire] == [40001, 40002, 40001]
    assert wire[0].ttft_s == pytest.approx(0.050, abs=1e-9)
    assert wire[1].ttft_s == pytest.approx(0.0522, abs=1e-9)
    assert wire[2].first_ns is None


def test_issue19_pairs_give_client_minus_wire_ttft_by_send_order(tmp_path):
    pcap = _pcap(
        tmp_path / "c.pcap",
        [
            (0.0, 40001, PORT, REQUEST),  # the preflight probe: not in the log
            (5.0, PORT, 40001, TOKEN),
            (10.0, 40002, PORT, REQUEST),
            (10.1, 40003, PORT, REQUEST),
            (60.0, PORT, 40002, TOKEN),
            (62.0, PORT, 40003, TOKEN),
        ],
    )
    t0 = T0_NS / 1e9
    log = tmp_path / "requests.jsonl"
    rows = [
        # stamped 3 ms before its POST, of which 2.95 ms connecting
        {"started_at_unix": t0 + 0.007, "connect_s": 0.00295, "ttft_s": 0.0501},
        {"started_at_unix": t0 + 0.01005, "connect_s": 0.0, "ttft_s": 0.0719},
    ]
    # with --processes each worker logs its own requests: the files are merged in send order
    other = tmp_path / "requests.w1.jsonl"
    log.write_text(json.dumps(rows[1]) + "\n")
    other.write_text(json.dumps(rows[0]) + "\n")
    pairs = pair_requests(pcap, PORT, [log, other])
    assert pairs.wire_ttft_s == pytest.approx([0.050, 0.0519], abs=1e-9)
    assert pairs.errors_s == pytest.approx([0.0001, 0.020], abs=1e-9)
    # first token seen late: the client's arrival time against the wire's (its send offset included)
    assert pairs.late_s == pytest.approx([0.00005, 0.01995], abs=1e-6)
    assert any("capture holds 3 requests, the log 2" in note for note in pairs.notes)


def test_issue19_a_send_far_from_every_post_is_not_paired(tmp_path):
    pcap = _pcap(tmp_path / "c.pcap", [(0.0, 40001, PORT, REQUEST), (50.0, PORT, 40001, TOKEN)])
    log = tmp_path / "requests.jsonl"
    log.write_text(json.dumps({"started_at_unix": T0_NS / 1e9 + 0.5, "connect_s": 0.0, "ttft_s": 0.05}) + "\n")
    pairs = pair_requests(pcap, PORT, [log])
    assert pairs.errors_s == []
    assert any("1 logged sends had no POST segment within 20 ms" in note for note in pairs.notes)


def test_issue19_a_file_that_is_not_pcap_is_named(tmp_path):
    path = tmp_path / "x.pcapng"
    path.write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(40))
    with pytest.raises(ValueError, match="not a classic pcap file"):
        wire_requests(path, PORT)


def test_issue19_worker_logs_with_shifted_stamps_are_put_back_on_the_wire_clock(tmp_path):
    # two workers; the second's stamps are mapped onto the master's clock 40 ms early. Their
    # sends interleave on the wire; E2E (exact on the client) tells the close ones apart.
    segments = []
    rows: dict[str, list[dict]] = {"w0": [], "w1": []}
    t0 = T0_NS / 1e9
    for i in range(12):
        at_ms = 10.0 * i
        port = 41000 + i
        ttft_ms, e2e_ms = 50.0 + i, 100.0 + 3 * i
        segments += [
            (at_ms, port, PORT, REQUEST),
            (at_ms + ttft_ms, PORT, port, TOKEN),
            (at_ms + e2e_ms, PORT, port, DONE),
        ]
        worker = "w0" if i % 2 == 0 else "w1"
        shift_s = -0.040 if worker == "w1" else 0.0
        late_s = 0.002 if i == 5 else 0.0  # one first token read 2 ms late
        rows[worker].append(
            {
                "started_at_unix": t0 + at_ms / 1e3 + shift_s,
                "connect_s": 0.0,
                "ttft_s": ttft_ms / 1e3 + late_s,
                "e2e_s": e2e_ms / 1e3,
            }
        )
    segments.sort()
    pcap = _pcap(tmp_path / "c.pcap", segments)
    logs = []
    for worker, worker_rows in rows.items():
        log = tmp_path / f"requests.{worker}.jsonl"
        log.write_text("".join(json.dumps(row) + "\n" for row in worker_rows))
        logs.append(log)
    pairs = pair_requests(pcap, PORT, logs)
    assert len(pairs.errors_s) == 12
    assert sorted(pairs.errors_s) == pytest.approx([0.0] * 11 + [0.002], abs=1e-6)
    assert any("requests.w1.jsonl: its send stamps are +40.0 ms off" in note for note in pairs.notes)
    assert not any("requests.w0.jsonl" in note for note in pairs.notes)


def test_issue19_a_pair_is_bounded_by_its_send_lag_when_larger_than_its_read_lag(tmp_path):
    # a request whose clock started 1.7 ms before its POST left (the kernel held the client inside
    # the send) with every read on time: its own bound is the send lag, not the read lag of 0
    pcap = _pcap(tmp_path / "c.pcap", [(0.0, 40001, PORT, REQUEST), (50.0, PORT, 40001, TOKEN)])
    log = tmp_path / "requests.jsonl"
    t0 = T0_NS / 1e9
    rows = [
        {
            "started_at_unix": t0 - 0.0017,
            "connect_s": 0.0,
            "ttft_s": 0.0517,
            "read_lag_max_s": 0.0,
            "send_lag_s": 0.0018,
        },
    ]
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    pairs = pair_requests(pcap, PORT, [log])
    assert pairs.errors_s == pytest.approx([0.0017], abs=1e-9)
    assert pairs.lag_s == [0.0018]
    log.write_text(json.dumps({**rows[0], "send_lag_s": None}) + "\n")  # TLS: no send lag, the read lag alone
    assert pair_requests(pcap, PORT, [log]).lag_s == [0.0]
    log.write_text(json.dumps({**rows[0], "read_lag_max_s": None, "send_lag_s": None}) + "\n")
    assert pair_requests(pcap, PORT, [log]).lag_s == [None]
