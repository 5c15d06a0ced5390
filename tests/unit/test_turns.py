"""How long the loop holds a poll while users wait for bytes (``LoopTurns._pace``), with the sleep recorded."""

from __future__ import annotations

import time

import pytest

from llmload.net.turns import GAP_WINDOW_NS, PACE_MAX_NS, PACE_NS, LoopTurns

_SLACK_NS = 200_000  # the clock moves between the test's read and _pace's


def _paced(gap_ns: int | None = None, *, due_in_ns: int | None = None, behind: bool = False, waiting: int = 1) -> float:
    """The one sleep ``_pace`` takes right after a poll, seconds (0.0: none); ``waiting`` users wait for bytes."""
    turns = LoopTurns()
    slept: list[float] = []
    turns._sleep = slept.append
    turns.waiting = waiting
    if gap_ns is not None:
        turns.gap_ns = gap_ns
    if behind:
        turns.queued.append((lambda _value: None, 0))
    now_ns = time.time_ns()
    if due_in_ns is not None:
        turns._due.append(now_ns + due_in_ns)
    turns.check_ns = now_ns
    turns._pace()
    assert len(slept) <= 1
    return slept[0] if slept else 0.0


def test_issue19_no_receive_gap_seen_holds_the_shortest():
    assert (PACE_NS - _SLACK_NS) * 1e-9 <= _paced() <= PACE_NS * 1e-9


@pytest.mark.parametrize(
    ("gap_ns", "hold_ns"),
    [
        (10_000_000, PACE_MAX_NS),  # tokens 10 ms apart: a quarter is past the longest hold
        (3_000_000, 750_000),  # a quarter of the gap
        (1_000_000, PACE_NS),  # a quarter is under the shortest hold
        (0, PACE_NS),  # an unstamped receive (its time is the clock's when it is read)
    ],
)
def test_issue19_the_hold_is_a_quarter_of_the_shortest_receive_gap_of_one_reply(gap_ns, hold_ns):
    assert (hold_ns - _SLACK_NS) * 1e-9 <= _paced(gap_ns) <= hold_ns * 1e-9


def test_issue19_no_hold_runs_past_a_time_a_user_is_due_to_send():
    # a hold that would end later ends just past the due time (50 µs: the user's timer, started right
    # after it noted the time, has expired when the loop polls), however short
    slow_ns = 10_000_000  # receives 10 ms apart: the longest hold, 2 ms
    assert 0.60e-3 <= _paced(slow_ns, due_in_ns=600_000) <= 0.65e-3
    assert 0.0 < _paced(slow_ns, due_in_ns=20_000) <= 0.07e-3
    assert 0.0 < _paced(slow_ns, due_in_ns=-20_000) <= 0.03e-3  # just past: its timer may not have fired yet
    assert _paced(slow_ns, due_in_ns=-2_000_000) >= (PACE_MAX_NS - _SLACK_NS) * 1e-9  # long past: dropped
    assert _paced(slow_ns, due_in_ns=30_000_000) >= (PACE_MAX_NS - _SLACK_NS) * 1e-9  # later than the hold


def test_issue19_with_no_user_waiting_for_bytes_the_loop_still_wakes_on_time_for_one_due_within_a_hold():
    # libev rounds a poll's timeout up to whole ms: without this the user due in 0.6 ms would wake at 1 ms
    assert 0.60e-3 <= _paced(due_in_ns=600_000, waiting=0) <= 0.65e-3
    assert _paced(due_in_ns=5_000_000, waiting=0) == 0.0  # not within a hold: the loop polls (and blocks) as usual
    assert _paced(waiting=0) == 0.0


def test_issue19_a_process_behind_holds_the_shortest():
    assert (PACE_NS - _SLACK_NS) * 1e-9 <= _paced(10_000_000, behind=True) <= PACE_NS * 1e-9


def test_issue19_no_hold_while_no_user_waits_for_bytes():
    turns = LoopTurns()
    slept: list[float] = []
    turns._sleep = slept.append
    turns.check_ns = time.time_ns()
    turns._pace()
    assert slept == []


def test_issue19_a_receive_gap_counts_for_one_to_two_windows():
    turns = LoopTurns()
    slept: list[float] = []
    turns._sleep = slept.append
    turns.waiting = 1

    def pace(window_over: bool = False) -> None:
        if window_over:
            turns._gap_window_ns = time.time_ns()
        turns.check_ns = time.time_ns()
        turns._pace()

    pace()  # opens a window, no gap seen yet: the shortest hold
    turns.gap_ns = 3_000_000  # a receive 3 ms after the last of its reply, in this window
    pace()
    pace(window_over=True)  # the 3 ms gap's window is now the one before: still counted
    turns.gap_ns = 20_000_000  # a receive 20 ms after the last of its reply, in this window
    pace(window_over=True)  # two windows on, the 3 ms gap is forgotten: the 20 ms one counts
    pace(window_over=True)  # no gap in the last two windows
    holds = [round(s * 1e9 / 50_000) * 50_000 for s in slept]
    assert holds == [PACE_NS, 750_000, 750_000, PACE_MAX_NS, PACE_NS]
    assert GAP_WINDOW_NS >= 50 * PACE_MAX_NS  # a window holds many polls


def test_issue19_a_gap_seen_before_an_idle_spell_of_two_windows_is_forgotten():
    turns = LoopTurns()
    slept: list[float] = []
    turns._sleep = slept.append
    turns.waiting = 1
    turns.check_ns = time.time_ns()
    turns._pace()  # opens a window
    turns.gap_ns = 20_000_000  # receives 20 ms apart: the longest hold
    turns.check_ns = time.time_ns()
    turns._pace()
    turns.waiting = 0  # no user waits; the loop blocks in its poll for more than two windows
    turns._gap_window_ns = time.time_ns() - GAP_WINDOW_NS - 1
    turns.waiting = 1
    turns.check_ns = time.time_ns()
    turns._pace()
    holds = [round(s * 1e9 / 50_000) * 50_000 for s in slept]
    assert holds == [PACE_NS, PACE_MAX_NS, PACE_NS]


def test_issue19_after_an_iteration_that_worked_longer_than_the_shortest_hold_the_hold_is_the_shortest():
    # receives 10 ms apart would allow 2 ms, but the loop's last iteration ran 0.6 ms of work since its
    # poll: the hold stays PACE_NS from that poll, so none is left (a busy loop's turns are not stretched)
    turns = LoopTurns()
    slept: list[float] = []
    turns._sleep = slept.append
    turns.waiting = 1
    turns.gap_ns = 10_000_000
    turns.check_ns = time.time_ns() - 600_000
    turns._pace()
    assert slept == []
    turns.check_ns = time.time_ns() - 300_000  # a light iteration: the long hold, less the work
    turns._pace()
    assert (PACE_MAX_NS - 300_000 - _SLACK_NS) * 1e-9 <= slept[0] <= (PACE_MAX_NS - 300_000) * 1e-9
