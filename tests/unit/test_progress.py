"""The progress line logged per interval's total row."""

from llmload.aggregate.stats import LLMStats
from llmload.exporters.progress import progress_line
from llmload.exporters.timeseries import interval_rows
from tests.unit.test_timeseries import _failed, _ok


def test_progress_line_with_time_limit() -> None:
    stats = LLMStats.empty()
    for _ in range(9):
        stats.add(_ok(completion=10, ttft_s=0.25))
    stats.add(_failed())
    (row, _) = interval_rows(5, stats, 10.0, gauges={"in_flight_requests": 7, "users": 16, "workers": 2})
    line = progress_line(row, elapsed_s=60.0, run_time_s=300.0)
    assert line == (
        "llmload: [1m00s/5m00s, 4m00s left] last 10s: 0.90 req/s, 9.0 output tok/s, TTFT p99 250 ms, "
        "1 errors (10.0%), 7 in flight, 16 users, 2 workers"
    )


def test_progress_line_with_request_count_and_no_requests() -> None:
    (row,) = interval_rows(0, LLMStats.empty(), 10.0)
    line = progress_line(row, elapsed_s=10.0, finished=40, num_requests=100)
    assert line == (
        "llmload: [0m10s, 40/100 requests, 60 left] last 10s: 0.00 req/s, 0.0 output tok/s, TTFT p99 n/a, "
        "0 errors, n/a in flight, n/a users, n/a workers"
    )


def test_progress_line_of_a_single_process_names_no_workers() -> None:
    # a new user read "0 workers" on a single-process run as workers lost; a master's line keeps the count
    (row,) = interval_rows(0, LLMStats.empty(), 10.0, gauges={"in_flight_requests": 0, "users": 4, "workers": 0})
    line = progress_line(row, elapsed_s=10.0, with_workers=False)
    assert line.endswith("0 errors, 0 in flight, 4 users")
    assert progress_line(row, elapsed_s=10.0).endswith("0 in flight, 4 users, 0 workers")
