"""Cost of the web UI's ``/llmload/timeseries.json`` for a 1-hour run (figures, not a test).

For 10 s intervals (200 requests each) and 1 s intervals (20 requests each),
3,600 s of run: the time to compute each complete interval's chart row once
(``RowCache``, as the route does while the run goes), then the answer's size and
time (``series_payload`` + ``json.dumps``, median of 5) for a page that opens
late (every row), for a poll (one new row) and once the run ended (the
results' rows). The route adds Flask's overhead on top.

Run: ``python bench/timeseries_route_cost.py`` from the repository root.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from llmload.aggregate.series import IntervalSeries
from llmload.exporters.timeline import Timeline
from llmload.exporters.web_charts import RowCache, series_payload
from llmload.request.record import RequestRecord, TokenCount, TokenSource

RUN_S = 3600
TOKENS = 20


def _record(rng: random.Random) -> RequestRecord:
    e2e_s = rng.uniform(0.5, 3.0)
    times = sorted(rng.uniform(0.02, e2e_s) for _ in range(TOKENS))
    return RequestRecord(
        endpoint="chat", model="m", started_at_unix=1.7e9, token_times_s=times, first_content_s=times[0], end_s=e2e_s,
        prompt_tokens=TokenCount(100, TokenSource.SERVER), completion_tokens=TokenCount(TOKENS, TokenSource.SERVER),
    )  # fmt: skip


def _median_s(call: Callable[[], str]) -> tuple[int, float]:
    times, size = [], 0
    for _ in range(5):
        start = time.perf_counter()
        size = len(call())
        times.append(time.perf_counter() - start)
    return size, statistics.median(times)


def measure(interval_s: float, per_interval: int) -> str:
    """One line of figures for a run of ``RUN_S`` seconds in intervals of ``interval_s``."""
    rng = random.Random(1)
    count = int(RUN_S / interval_s)
    timeline, series = Timeline(interval_s), IntervalSeries.empty()
    for index in range(count + 1):
        for _ in range(per_interval):
            series.add(index, _record(rng))
        timeline.sample((index + 0.5) * interval_s, {"in_flight_requests": 16, "users": 16, "workers": 2})
    cache = RowCache()
    start = time.perf_counter()
    for index in range(1, count + 1):  # as the run goes: an interval completes, the page polls
        timeline.due_rows(series, index * interval_s)
        series_payload("r", "running", timeline=timeline, series=series, results=None, cache=cache)
    per_row_ms = (time.perf_counter() - start) / count * 1000

    def answer(**kw: Any) -> Callable[[], str]:
        args: dict[str, Any] = {"timeline": timeline, "series": series, "results": None, "cache": cache, **kw}
        return lambda: json.dumps(series_payload("r", "running", **args))

    full = _median_s(answer())
    poll = _median_s(answer(since_t=(count - 2) * interval_s))
    results = {"timeseries": timeline.rows(series, (count + 0.5) * interval_s)}
    ended = _median_s(answer(results=results))
    return (
        f"{interval_s:g} s intervals ({count}, {per_interval} requests each): a row computed once in "
        f"{per_row_ms:.2f} ms; every row {full[0] / 1024:.0f} KiB in {full[1] * 1000:.1f} ms; "
        f"a poll (1 new row) {poll[0]} B in {poll[1] * 1000:.2f} ms; ended {ended[0] / 1024:.0f} KiB "
        f"in {ended[1] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    print(measure(10.0, 200))
    print(measure(1.0, 20))
