"""Many machines, one timeline: worker stamps and offsets from the master's plan (``llmload.run.clock``)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.aggregate.series import IntervalSeries, interval_index
from llmload.aggregate.stats import LLMStats
from llmload.edge.runtime import Runtime
from llmload.exporters.results import RunOutcome, build_results
from llmload.exporters.timeseries import series_rows
from llmload.run.clock import (
    CLOCK_OFFSET_WARN_S,
    OffsetEstimate,
    RunStart,
    align_to_master,
    note_worker_clock,
    offset_warning,
)
from llmload.settings.config import RunConfig
from llmload.testing import ok_record

MASTER_START_UNIX = 1_750_000_000.0
PLANNED_AFTER_S = 0.04
DELIVERY_S = 0.003
INTERVAL_S = 1.0


def test_align_to_master_maps_the_monotonic_clock_onto_the_master_start():
    start = align_to_master(MASTER_START_UNIX, PLANNED_AFTER_S, now_s=500.0, now_unix=MASTER_START_UNIX + 300.0)
    assert start.started_s == pytest.approx(500.0 - PLANNED_AFTER_S)
    assert start.started_at_unix == MASTER_START_UNIX
    assert start.unix(502.0) == pytest.approx(MASTER_START_UNIX + 2.0 + PLANNED_AFTER_S)
    assert start.clock_offset_s == pytest.approx(300.0 - PLANNED_AFTER_S)


def test_align_to_master_without_a_master_start_keeps_the_local_clock():
    start = align_to_master(0.0, 0.0, now_s=7.0, now_unix=1_000.0)
    assert start == RunStart(started_s=7.0, started_at_unix=1_000.0, clock_offset_s=None)


def test_offset_warning_only_beyond_the_bound_and_says_which_way():
    assert offset_warning("w1", None) is None
    assert offset_warning("w1", CLOCK_OFFSET_WARN_S) is None
    assert offset_warning("w1", -0.2) is None
    ahead = offset_warning("w1", 300.0)
    behind = offset_warning("w2", -300.0)
    assert ahead is not None
    assert "worker w1's wall clock is 300 s ahead of the master's" in ahead
    assert behind is not None
    assert "300 s behind the master's" in behind
    assert "NTP" in behind


def test_runtime_now_unix_reads_the_monotonic_clock_from_the_run_start():
    runtime = Runtime(config=RunConfig())
    runtime.run.started_at_unix = MASTER_START_UNIX
    runtime.run.run_started_s = 0.0  # perf_counter's zero: now_unix is MASTER_START_UNIX + perf_counter()
    before = time.perf_counter()
    now = runtime.now_unix()
    after = time.perf_counter()
    assert MASTER_START_UNIX + before <= now <= MASTER_START_UNIX + after


def test_runtime_rss_bytes_reads_this_process():
    rss = Runtime(config=RunConfig()).process.rss_bytes()
    assert rss is not None
    assert rss > 1 << 20


# ── a worker's wall clock off by minutes changes nothing ─────────────────────
Request = tuple[float, float]  # (send, seconds after the worker's plan arrived; E2E)


def _run(requests_by_worker: list[list[Request]], shifts_s: list[float], *, own_wall_clock: bool = False) -> Any:
    """The results of a master + workers run where worker i's wall clock is ``shifts_s[i]`` off.

    Each worker gets the plan at its own (arbitrary) ``perf_counter`` reading,
    ``DELIVERY_S`` after the master built it, and stamps its requests as
    ``Runtime.now_unix`` does; ``own_wall_clock`` stamps them with its wall
    clock instead (what llmload did before).
    """
    stats = LLMStats.empty()
    series = IntervalSeries.empty()
    offsets = {}
    for n, (requests, shift_s) in enumerate(zip(requests_by_worker, shifts_s, strict=True)):
        arrival_s = 1_000.0 * (n + 1) + 0.123  # each machine's monotonic clock has its own zero
        true_arrival_unix = MASTER_START_UNIX + PLANNED_AFTER_S + DELIVERY_S
        start = align_to_master(
            MASTER_START_UNIX, PLANNED_AFTER_S, now_s=arrival_s, now_unix=true_arrival_unix + shift_s
        )
        offsets[f"w{n}"] = start.clock_offset_s
        for send_s, e2e_s in requests:
            sent_at_s = arrival_s + send_s
            stamp = true_arrival_unix + shift_s + send_s if own_wall_clock else start.unix(sent_at_s)
            record = ok_record((0.05, 0.05 + (e2e_s - 0.05) / 2), end_s=e2e_s, start_unix=stamp)
            stats.add(record)
            series.add(interval_index(sent_at_s + e2e_s - start.started_s, INTERVAL_S), record)
    end_s = max(s + e for requests in requests_by_worker for s, e in requests) + PLANNED_AFTER_S + DELIVERY_S
    rows = series_rows(series, INTERVAL_S, end_s=end_s)
    results = build_results(
        RunOutcome(stats, RunConfig(), workers=len(shifts_s), started_at_unix=MASTER_START_UNIX, timeseries=tuple(rows))
    )
    return results, offsets


_requests = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=30.0), st.floats(min_value=0.06, max_value=5.0)),
    min_size=1,
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(a=_requests, b=_requests, shift_s=st.sampled_from([-300.0, 300.0]))
def test_a_worker_clock_off_by_300_s_leaves_duration_throughput_and_series_unchanged(a, b, shift_s):
    truth, _ = _run([a, b], [0.0, 0.0])
    shifted, offsets = _run([a, b], [0.0, shift_s])
    for key in ("duration_s", "send_span_s", "throughput", "timeseries", "requests", "latency"):
        assert shifted[key] == truth[key], key
    assert offsets["w0"] == pytest.approx(DELIVERY_S, abs=1e-6)
    assert offsets["w1"] == pytest.approx(shift_s + DELIVERY_S, abs=1e-6)


def test_stamping_with_the_workers_own_wall_clock_would_move_duration_by_the_offset():
    """The check above can fail: stamps from a wall clock 300 s ahead stretch duration_s by 300 s."""
    a, b = [(0.0, 1.0), (2.0, 1.0)], [(0.5, 1.0)]
    truth, _ = _run([a, b], [0.0, 0.0], own_wall_clock=True)
    shifted, _ = _run([a, b], [0.0, 300.0], own_wall_clock=True)
    assert truth["duration_s"] == pytest.approx(3.0)
    assert shifted["duration_s"] == pytest.approx(300.0 + 0.5 + 1.0)  # first send on w0, last end on w1
    assert shifted["throughput"]["output_tokens_per_s"] < truth["throughput"]["output_tokens_per_s"] / 50


# ── the master's bracket of a worker's offset ───────────────────────────────
def test_offset_estimate_brackets_the_offset_with_the_plan_and_the_reports():
    true_offset_s = 300.0
    clock = OffsetEstimate()
    assert clock.offset_s is None
    clock.note_upper(true_offset_s + 0.9)  # the plan took 0.9 s to arrive
    assert clock.offset_s == pytest.approx(300.9)
    assert clock.error_s is None
    master_now = MASTER_START_UNIX + 5.0
    clock.note_report(master_now + true_offset_s - 0.3, master_now)  # a report 0.3 s in transit
    clock.note_report(master_now + true_offset_s - 0.1 + 3.0, master_now + 3.0)  # a faster one: tighter
    clock.note_report(master_now + true_offset_s - 2.0 + 6.0, master_now + 6.0)  # a slow one changes nothing
    assert clock.lower_s == pytest.approx(299.9)
    assert clock.offset_s == pytest.approx(300.4)
    assert clock.error_s == pytest.approx(0.5)
    assert abs(clock.offset_s - true_offset_s) <= clock.error_s


def test_offset_estimate_is_surely_beyond_the_bound_only_when_the_whole_bracket_is():
    slow_plan = OffsetEstimate()
    slow_plan.note_upper(1.4)  # a true clock whose plan took 1.4 s on a busy machine
    assert not slow_plan.surely_beyond(CLOCK_OFFSET_WARN_S)
    slow_plan.note_report(MASTER_START_UNIX - 0.05, MASTER_START_UNIX)
    assert not slow_plan.surely_beyond(CLOCK_OFFSET_WARN_S)
    ahead, behind = OffsetEstimate(), OffsetEstimate()
    ahead.note_report(MASTER_START_UNIX + 299.0, MASTER_START_UNIX)
    behind.note_upper(-299.0)
    assert ahead.surely_beyond(CLOCK_OFFSET_WARN_S)
    assert behind.surely_beyond(CLOCK_OFFSET_WARN_S)


# ── the master noting reports: offsets kept, one warning per worker ──────────
def test_note_worker_clock_keeps_each_workers_bracket_and_warns_once():
    clocks: dict[str, OffsetEstimate] = {}
    now = MASTER_START_UNIX + 10.0
    notes = [
        note_worker_clock(clocks, "w-true", upper_s=0.02, taken_at_unix=now, received_at_unix=now + 0.01),
        note_worker_clock(clocks, "w-ahead", upper_s=300.5, taken_at_unix=None, received_at_unix=now),
    ]
    assert notes == [None, None]  # an upper bound alone does not prove the clock is ahead
    notes = [
        note_worker_clock(clocks, "w-ahead", upper_s=300.5, taken_at_unix=now + 299.9, received_at_unix=now),
        note_worker_clock(clocks, "w-ahead", upper_s=300.5, taken_at_unix=now + 300.0, received_at_unix=now),
        note_worker_clock(clocks, "w-old", upper_s=None, taken_at_unix=None, received_at_unix=now),
    ]
    assert notes[0] is not None
    assert "worker w-ahead's wall clock is 300 s ahead of the master's" in notes[0]
    assert notes[1:] == [None, None]
    assert set(clocks) == {"w-true", "w-ahead"}
    assert clocks["w-ahead"] == OffsetEstimate(upper_s=300.5, lower_s=300.0)
    assert clocks["w-ahead"].offset_s == pytest.approx(300.25)
    assert clocks["w-true"].error_s == pytest.approx(0.015)
