"""RequestBudget: the per-process share of --num-requests; Runtime.hand_off: each request in the series and stats."""

import time

from llmload.aggregate.series import FoldedTotal, IntervalSeries
from llmload.edge.run_parts import RequestBudget
from llmload.edge.runtime import RunState, Runtime
from llmload.request.record import RequestRecord, TokenCount, TokenSource
from llmload.settings.config import RunConfig


def test_budget_grants_exactly_its_limit_and_reports_done_once():
    done = []
    budget = RequestBudget(3, on_done=lambda: done.append(True))
    grants = [budget.try_acquire() for _ in range(5)]
    assert grants == [True, True, True, False, False]
    budget.release()
    budget.release()
    assert done == []
    budget.release()
    assert done == [True]
    assert budget.try_acquire() is False
    assert done == [True]


def test_budget_zero_share_is_done_at_first_attempt():
    done = []
    budget = RequestBudget(0, on_done=lambda: done.append(True))
    assert budget.try_acquire() is False
    assert done == [True]


def test_budget_unlimited_never_exhausts():
    budget = RequestBudget(None)
    assert all(budget.try_acquire() for _ in range(10_000))
    assert budget.exhausted is False


def _finished(completion: int) -> RequestRecord:
    times = [0.1 + 0.01 * i for i in range(completion)]
    return RequestRecord(
        endpoint="chat",
        model="m",
        started_at_unix=1_700_000_000.0,
        token_times_s=times,
        first_content_s=times[0],
        end_s=times[-1],
        prompt_tokens=TokenCount(5, TokenSource.SERVER),
        completion_tokens=TokenCount(completion, TokenSource.SERVER),
    )


def test_runtime_worker_counts_each_request_once_in_the_series_and_reports_both() -> None:
    runtime = Runtime(config=RunConfig())
    runtime.run = RunState(local_total=None, run_started_s=time.perf_counter())  # a worker's run
    runtime.hand_off(_finished(3))
    runtime.hand_off(_finished(4))
    runtime.count_cancelled("chat", "m")
    assert runtime.run.stats.is_empty()  # nothing counted twice on a worker
    assert runtime.run.has_unreported()
    stats, series = runtime.take_delta()
    assert stats == series.total()
    total = stats.total()
    assert (total.succeeded, total.cancelled, total.completion_tokens_sum) == (2, 1, 7)
    assert series.indices() == [0]  # finished within the first interval of 10 s
    assert not runtime.run.has_unreported()


def test_runtime_single_process_counts_each_request_once_and_derives_its_totals_from_the_series() -> None:
    runtime = Runtime(config=RunConfig())
    runtime.run = RunState(run_started_s=time.perf_counter())
    runtime.hand_off(_finished(3))
    runtime.count_cancelled("chat", "m")
    assert runtime.run.stats.is_empty()  # counted once, in the series
    assert runtime.run.totals() == runtime.run.series.total()
    total = runtime.run.totals().total()
    assert (total.succeeded, total.cancelled, total.completion_tokens_sum) == (1, 1, 3)


def test_folded_total_equals_the_merge_of_every_interval_at_every_step() -> None:
    series, folded = IntervalSeries.empty(), FoldedTotal()
    for index, completion in [(0, 1), (0, 2), (3, 4), (3, 5), (4, 6), (9, 7)]:
        series.add(index, _finished(completion))
        assert folded.of(series) == series.total()
    assert folded.of(series).total().completion_tokens_sum == 1 + 2 + 4 + 5 + 6 + 7


def test_closed_budget_grants_nothing_and_reports_nothing():
    done = []
    budget = RequestBudget(3, on_done=lambda: done.append(True))
    assert budget.try_acquire() is True
    budget.close()
    assert [budget.try_acquire() for _ in range(3)] == [False, False, False]
    assert budget.issued == 1
    assert done == []


def test_end_run_closes_the_budget_and_remembers_the_run():
    from llmload.edge.runtime import Runtime
    from llmload.settings.config import RunConfig

    runtime = Runtime(config=RunConfig())
    runtime.run.run_id = "r1"
    runtime.end_run()
    assert runtime.run.budget.closed
    assert runtime.run.budget.try_acquire() is False
    assert runtime.process.ended_run_id == "r1"


def test_runtime_worker_keeps_stats_added_outside_hand_off_in_the_interval_of_the_report() -> None:
    runtime = Runtime(config=RunConfig())
    runtime.run = RunState(local_total=None, run_started_s=time.perf_counter())  # a worker's run
    runtime.hand_off(_finished(3))
    runtime.run.stats.add(_finished(2))  # a path that bypassed hand_off(): not lost, and still in the series
    stats, series = runtime.take_delta()
    assert stats == series.total()
    assert stats.total().completion_tokens_sum == 5
    assert runtime.run.stats.is_empty()


def test_workers_in_flight_is_kept_once_per_worker_and_is_zero_once_the_figures_are_final() -> None:
    from llmload.aggregate.stats import LLMStats
    from llmload.edge.runtime import ExportState
    from llmload.exporters.window import SlidingWindow

    runtime = Runtime(config=RunConfig())
    runtime.master.worker_in_flight.update({"w1": 3, "w2": 4})
    assert runtime.workers_in_flight() == 7  # without the exporter too (the time series' gauge)
    runtime.process.export = ExportState(exporter=None, window=SlidingWindow(), grace_s=0.0)  # type: ignore[arg-type]
    assert runtime.workers_in_flight() == 7
    runtime.process.export.final_stats = LLMStats.empty()  # the run's end: scrapes report its final figures
    assert runtime.workers_in_flight() == 0


def test_a_new_state_shares_no_mutable_value_with_an_earlier_one() -> None:
    """A run starts with a new RunState/MasterState/TimelineState, not a reset: nothing of the last one may leak."""
    import dataclasses

    from llmload.edge.runtime import MasterState, TimelineState

    for kind in (RunState, MasterState, TimelineState):
        old, new = kind(), kind()
        for f in dataclasses.fields(kind):
            value = getattr(new, f.name)
            if value is None or isinstance(value, int | float | str | bool):
                continue
            assert value is not getattr(old, f.name), f"{kind.__name__}.{f.name} is shared between runs"
    old = RunState(run_id="r1", blocked="x", stopping=True, in_flight=2)
    old.failure_samples["timeout"] = "read timed out"
    old.budget.close()
    new = RunState()
    assert (new.run_id, new.blocked, new.stopping, new.in_flight, new.failure_samples) == ("", None, False, 0, {})
    assert not new.budget.closed
