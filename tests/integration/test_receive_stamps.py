"""The kernel's TCP receive stamps that arrival times rest on (Linux ``SO_TIMESTAMPNS`` over loopback).

``llmload.net.transport`` times each read at its stamp. That is never
earlier than any byte the read returned only because Linux stamps a receive
with its newest segment: the skb the read copied from last, whose stamp is
that of the newest segment merged into it (``tcp_try_coalesce`` and the
backlog's coalescing copy the appended segment's stamp; Linux commit
98aaa913b4ed, "tcp: Extend SOF_TIMESTAMPING_RX_SOFTWARE to TCP recvmsg").
These tests hold the kernel to that: a read is stamped after the write of
its last byte and before the read itself, and queued segments come back
with the newest one's stamp however little is read (so piled-up events are
timed late, never early). Plain blocking sockets, no event loop; the
writes are ordered by sleeps of several ms, and every bound is an ordering
of clock readings, not a tolerance.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from llmload.testing.stamped_link import StampedLink, StampedRead

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS receive stamps are Linux only"),
]

_GAP_S = 0.008  # between writes: each is its own segment, well apart in time
_SETTLE_S = 0.002  # after a write, before reading: the segment is in the receive queue


@pytest.fixture
def link() -> Iterator[StampedLink]:
    with StampedLink() as pair:
        yield pair


def test_segments_queued_behind_an_unread_one_come_back_in_one_read_stamped_with_the_newest(link):
    link.write(b"a" * 100)
    time.sleep(_GAP_S)
    link.write(b"b" * 100)
    time.sleep(_SETTLE_S)
    read = link.read()
    assert read.data == b"a" * 100 + b"b" * 100
    assert link.written_ns[1] <= read.stamp_ns <= read.started_ns  # the newest segment's stamp, not the first's


def test_reading_only_the_oldest_queued_segment_still_gets_the_newest_stamp(link):
    # Reading less than is queued does not recover the older segment's own stamp:
    # its bytes are timed at the newest segment's arrival (late by the gap, never early).
    link.write(b"a" * 100)
    time.sleep(_GAP_S)
    link.write(b"b" * 100)
    time.sleep(_GAP_S)
    link.write(b"c" * 100)
    time.sleep(_SETTLE_S)
    reads = [link.read(100) for _ in range(3)]
    assert [r.data for r in reads] == [b"a" * 100, b"b" * 100, b"c" * 100]
    for read in reads:
        assert link.written_ns[2] <= read.stamp_ns <= reads[0].started_ns


def test_the_rest_of_a_partly_read_segment_is_stamped_with_the_segment_that_joined_it(link):
    link.write(b"a" * 100)
    time.sleep(_SETTLE_S)
    first = link.read(40)  # part of the only segment queued: its own stamp
    assert link.written_ns[0] <= first.stamp_ns <= first.started_ns
    time.sleep(_GAP_S)
    link.write(b"b" * 100)
    time.sleep(_SETTLE_S)
    rest = link.read()
    assert rest.data == b"a" * 60 + b"b" * 100
    assert link.written_ns[1] <= rest.stamp_ns <= rest.started_ns


def test_issue19_no_read_is_stamped_before_the_write_of_its_last_byte(link):
    # Reads of every size against writes that queue or not: each read's stamp lies between
    # the write of the last byte it returned and the read itself. This is what makes an
    # arrival time taken from the stamp late at worst, never earlier than the bytes.
    sizes = [100, 100, 30, 170, 100, 100, 100]
    script: list[tuple[str, int]] = [  # (action, size or number of writes)
        ("write", 1), ("read", 16384),  # one segment, read at once
        ("write", 2), ("read", 16384),  # two queued, one read
        ("write", 1), ("read", 50), ("write", 1), ("read", 16384),  # partial read, then more joins the rest
        ("write", 2), ("read", 100), ("read", 16384),  # two queued, read piece by piece
    ]  # fmt: skip
    ends: list[int] = []  # stream offset after each write
    reads: list[StampedRead] = []
    offset = 0
    for action, amount in script:
        if action == "write":
            for _ in range(amount):
                size = sizes[len(ends)]
                link.write(bytes([97 + len(ends)]) * size)
                offset += size
                ends.append(offset)
                time.sleep(_GAP_S)
        else:
            reads.append(link.read(amount))
    received = 0
    for read in reads:
        assert read.data
        received += len(read.data)
        last_write = next(i for i, end in enumerate(ends) if end >= received)  # the write of the read's last byte
        assert read.stamp_ns >= link.written_ns[last_write], f"read ending at byte {received} stamped too early"
        assert read.stamp_ns <= read.started_ns
    assert received == offset
