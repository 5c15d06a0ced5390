"""Which kernel receive stamp a late read gets on Linux, case by case (figures, not a test).

A server writes 100-byte segments on loopback (``TCP_NODELAY``) while the
client does not read; then the client reads with ``recvmsg`` and
``SO_TIMESTAMPNS``. For each case the table names the write whose time each
read's stamp is (the newest write sent before the stamp) and how many bytes
it returned, over several fresh connections.

What it shows (Linux 6.18): a read's stamp is never older than the write of
the last byte it returned. Segments that queue behind an unread one are
merged into one buffer that carries the newest segment's stamp, so a read of
only the oldest segment's bytes is stamped with the newest write; on a
fresh connection (which acknowledges every segment at once) that is always
so. On a warm connection, which delays its ACKs, segments that arrive within
the delayed-ACK time stay apart and a read of one segment's size gets that
segment's own stamp. One read of everything queued carries the newest stamp
either way: piled-up events are timed late, never early.

Run: ``python bench/stamp_merge.py`` (Linux only).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from llmload.testing.stamped_link import StampedLink

_SEGMENT_BYTES = 100
_SETTLE_S = 0.002  # after the last write, before reading
_RUNS = 6


class _Link(StampedLink):
    """``StampedLink`` whose reads are told as which write (A, B, C) their stamp is."""

    def write_letter(self, letter: str, gap_s: float) -> None:
        self.write(letter.encode() * _SEGMENT_BYTES)
        time.sleep(gap_s)

    def read_told(self, size: int) -> str:
        read = self.read(size)
        before = [i for i, at in enumerate(self.written_ns) if at <= read.stamp_ns]
        which = "ABC"[before[-1]] if before else "older than every write"
        return f"{len(read.data)} B stamped {which}"


def _queued(*, warm: bool, gap_s: float, sizes: tuple[int, ...], writes: int = 2) -> Callable[[], str]:
    def case() -> str:
        link = _Link()
        try:
            if warm:
                link.warm(segment_bytes=_SEGMENT_BYTES)
            for index in range(writes):
                link.write_letter("ABC"[index], gap_s)
            time.sleep(_SETTLE_S)
            return "; ".join(link.read_told(size) for size in sizes)
        finally:
            link.close()

    return case


def _partial_then_more() -> str:
    link = _Link()
    try:
        link.write_letter("A", _SETTLE_S)
        first = link.read_told(40)
        link.write_letter("B", _SETTLE_S)
        return f"{first}; {link.read_told(16384)}"
    finally:
        link.close()


CASES: list[tuple[str, Callable[[], str]]] = [
    ("fresh: A, 8 ms, B queued; one read", _queued(warm=False, gap_s=0.008, sizes=(16384,))),
    ("fresh: A, 8 ms, B queued; read 100 B, then the rest", _queued(warm=False, gap_s=0.008, sizes=(100, 16384))),
    ("fresh: A, B, C 8 ms apart; three reads of 100 B", _queued(warm=False, gap_s=0.008, sizes=(100,) * 3, writes=3)),
    ("fresh: A; read 40 B; B joins the rest; read", _partial_then_more),
    ("warm: A, B, C 1 ms apart; three reads of 100 B", _queued(warm=True, gap_s=0.001, sizes=(100,) * 3, writes=3)),
    ("warm: A, B, C 8 ms apart; three reads of 100 B", _queued(warm=True, gap_s=0.008, sizes=(100,) * 3, writes=3)),
    ("warm: A, B, C 50 ms apart; three reads of 100 B", _queued(warm=True, gap_s=0.05, sizes=(100,) * 3, writes=3)),
    ("warm: A, B, C 8 ms apart; one read", _queued(warm=True, gap_s=0.008, sizes=(16384,), writes=3)),
]


def main() -> None:
    """Print each case's outcomes over ``_RUNS`` fresh connections."""
    for title, case in CASES:
        outcomes = Counter(case() for _ in range(_RUNS))
        print(title)
        for outcome, count in outcomes.most_common():
            print(f"    {count}x  {outcome}")


if __name__ == "__main__":
    main()
