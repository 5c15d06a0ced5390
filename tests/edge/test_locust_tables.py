"""Locust's own tables fed by llmload: plain failure messages, and worker statistics on the master's clock."""

from __future__ import annotations

from locust.stats import RequestStats, StatsEntry, StatsEntryDict

import time
from typing import Any

from llmload.edge.locust_internals import STAMPED_ENTRY_KEYS, on_master_clock
from llmload.errors import HTTPStatusError, StreamError, TransportError


def test_locust_error_table_shows_plain_messages_not_exception_reprs() -> None:
    # Locust renders (and groups) its failure table by repr() of the request event's exception.
    stats = RequestStats()
    errors = [
        HTTPStatusError("HTTP 502 (e.g. Bad gateway)"),
        HTTPStatusError("HTTP 502 (e.g. Bad gateway)"),
        StreamError("stream error (e.g. closed mid-body)"),
        TransportError('transport error (e.g. "refused")'),
    ]
    for error in errors:
        stats.log_error("POST", "chat", error)
    rows = sorted((e.to_name(), e.occurrences, e.to_dict()["error"]) for e in stats.errors.values())
    assert rows == [
        ("POST chat: HTTP 502 (e.g. Bad gateway)", 2, "HTTP 502 (e.g. Bad gateway)"),
        ("POST chat: stream error (e.g. closed mid-body)", 1, "stream error (e.g. closed mid-body)"),
        ('POST chat: transport error (e.g. "refused")', 1, 'transport error (e.g. "refused")'),
    ]


def _worker_report(now: float, requests: int) -> dict[str, Any]:
    stats = RequestStats()
    entry = stats.get("/v1/chat/completions", "POST")
    entry.start_time = now - 5
    for i in range(requests):
        t = int(now - 5 + i * 5 / requests)
        entry.num_requests += 1
        entry.num_reqs_per_sec[t] = entry.num_reqs_per_sec.get(t, 0) + 1
        entry.last_request_timestamp = t + 0.5
    stats.log_error("POST", "/v1/chat/completions", "boom")
    error = next(iter(stats.errors.values()))
    error.first_seen, error.last_seen = now - 4, now - 1
    total = entry.serialize()  # before serialize_stats, which resets the entries
    return {"stats": stats.serialize_stats(), "stats_total": total, "errors": stats.serialize_errors()}


def _merged(shift: bool) -> dict[str, float]:
    master = RequestStats()
    now = time.time()
    master.reset_all()  # as the master does at the test start: its own clock
    for offset in (0.0, 300.0):  # one worker on time, one 300 s ahead
        report = _worker_report(now + offset, 50)
        if shift:
            on_master_clock(report, offset)
        for data in report["stats"]:
            incoming = StatsEntry.unserialize(data, master)
            master.get(incoming.name, incoming.method).extend(incoming)
        master.total.extend(StatsEntry.unserialize(report["stats_total"], master))
    entry = master.get("/v1/chat/completions", "POST")
    assert entry.last_request_timestamp is not None
    return {
        "span_s": entry.last_request_timestamp - entry.start_time,
        "requests": entry.num_requests,
        "total_rps": entry.total_rps,
        "seconds": max(entry.num_reqs_per_sec) - min(entry.num_reqs_per_sec),
    }


def test_issue24_locust_tables_on_the_master_use_the_masters_clock_not_the_workers() -> None:
    """Locust's statistics in a worker report are stamped with the worker's wall clock; with one worker 300 s
    ahead the master's merged table spanned 305 s (total RPS / 60). Workers now stamp them on the master's clock."""
    report = _worker_report(1_000_000.0, 4)
    # the tripwire: Locust's report dicts still stamp these keys
    assert sorted(set(STAMPED_ENTRY_KEYS) - set(StatsEntryDict.__annotations__) - set(report["stats"][0])) == []
    before, after = _merged(False), _merged(True)
    assert before["span_s"] > 300  # what the master's Locust table did on its own
    assert before["total_rps"] < 1
    assert after["span_s"] < 6
    assert after["requests"] == 100
    assert after["total_rps"] > 15
    assert after["seconds"] < 6
    same = _worker_report(1_000_000.0, 4)
    on_master_clock(same, 0.9)
    assert same == _worker_report(1_000_000.0, 4)  # a small offset changes nothing
    on_master_clock(report, 300.0)
    error = next(iter(report["errors"].values()))
    assert [error["first_seen"], error["last_seen"]] == [1_000_000.0 - 4 - 300, 1_000_000.0 - 1 - 300]
    assert report["stats_total"]["start_time"] == 1_000_000.0 - 5 - 300
    assert min(report["stats"][0]["num_reqs_per_sec"]) == 1_000_000 - 5 - 300
