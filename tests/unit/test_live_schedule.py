"""When workers send their live deltas: spread over the interval, each at a fixed offset (``live_send_offset_s``)."""

from __future__ import annotations

import itertools
import math

import pytest

from llmload.exporters.window import live_send_delay_s, live_send_offset_s

INTERVAL_S = 0.5


@pytest.mark.parametrize("workers", [2, 10, 150, 1000, 2000])
def test_live_send_offsets_spread_workers_over_the_interval(workers: int) -> None:
    """Issue 20: no instant of the interval gets many more workers' reports than an even spread would.

    With every worker on the same offset (the wall clock's half seconds) a master of N workers
    got N reports at once and held its loop for N merges while heartbeats waited behind them.
    """
    offsets = sorted(live_send_offset_s(i, INTERVAL_S) for i in range(workers))
    assert all(0.0 <= o < INTERVAL_S for o in offsets)
    even_s = INTERVAL_S / workers
    # the golden-ratio sequence: every gap between neighbours is within a small factor of the even one
    gaps = [b - a for a, b in itertools.pairwise(offsets)] + [INTERVAL_S - offsets[-1] + offsets[0]]
    assert min(gaps) > even_s / 3
    assert max(gaps) < even_s * 3
    # the busiest tenth of the interval holds at most twice its even share of the workers
    tenth = [0] * 10
    for o in offsets:
        tenth[int(o / INTERVAL_S * 10)] += 1
    assert max(tenth) <= 2 * math.ceil(workers / 10)


def test_live_send_delay_lands_on_the_workers_offset() -> None:
    """The next send is within one interval and falls on the worker's own offset in the wall clock's interval."""
    for index in (0, 1, 7, 999):
        offset_s = live_send_offset_s(index, INTERVAL_S)
        for now_unix in (1_700_000_000.0, 1_700_000_000.123, 1_700_000_000.4999, 1_700_000_000.0 + offset_s):
            delay_s = live_send_delay_s(now_unix, index, INTERVAL_S)
            assert 0.0 < delay_s <= INTERVAL_S
            assert (now_unix + delay_s - offset_s) % INTERVAL_S == pytest.approx(0.0, abs=1e-6) or (
                now_unix + delay_s - offset_s
            ) % INTERVAL_S == pytest.approx(INTERVAL_S, abs=1e-6)


def test_live_send_offset_is_fixed_per_worker() -> None:
    """A worker keeps its offset (its counters reach the master with a constant lag, which rate() cancels)."""
    assert live_send_offset_s(5, INTERVAL_S) == live_send_offset_s(5, INTERVAL_S)
    assert live_send_offset_s(0, INTERVAL_S) == 0.0
    assert len({live_send_offset_s(i, INTERVAL_S) for i in range(100)}) == 100
