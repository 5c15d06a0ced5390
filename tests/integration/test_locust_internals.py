"""Issue 24: a worker no longer builds Locust's argument parser once per option of every spawn message.

That filter used to hold a worker's gevent loop for 1-2 s per spawn message (107 parser builds),
so during a ramp-up its heartbeats starved and the master dropped it as missing
(tests/integration/test_ramp_stop.py under coverage on a busy machine). See
llmload/edge/locust_internals.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.test_sim import REPO_ROOT

pytestmark = pytest.mark.integration


def test_issue24_spawn_message_filter_builds_locusts_parser_once():
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.spawn_filter_probe"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    # the tripwire: Locust's worker still filters spawn options this way (else locust_internals can go)
    assert seen["locust_filters_per_option"], "Locust changed WorkerRunner.handle_message; revisit locust_internals"
    assert seen["options"] > 100
    assert seen["builds_before"] == seen["options"]  # what Locust does on its own: one parser per option
    assert seen["builds_after"] == 1
    assert seen["same_result"]
    assert seen["llmload_options_kept"]


_ERROR_TABLE_PROBE = """
import json
from locust.stats import RequestStats, StatsError
from llmload.errors import HTTPStatusError, StreamError, TransportError

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
print(json.dumps(rows))
"""


def test_locust_error_table_shows_plain_messages_not_exception_reprs():
    # Locust renders (and groups) its failure table by repr() of the request event's exception.
    proc = subprocess.run(
        [sys.executable, "-c", _ERROR_TABLE_PROBE], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rows == [
        ["POST chat: HTTP 502 (e.g. Bad gateway)", 2, "HTTP 502 (e.g. Bad gateway)"],
        ["POST chat: stream error (e.g. closed mid-body)", 1, "stream error (e.g. closed mid-body)"],
        ['POST chat: transport error (e.g. "refused")', 1, 'transport error (e.g. "refused")'],
    ]


_CLOCK_PROBE = """
import json, time
from locust.stats import RequestStats, StatsEntry, StatsEntryDict
from llmload.edge.locust_internals import STAMPED_ENTRY_KEYS, on_master_clock

def worker_report(now, requests):
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

def merged(shift):
    master = RequestStats()
    now = time.time()
    master.reset_all()  # as the master does at the test start: its own clock
    for offset in (0.0, 300.0):  # one worker on time, one 300 s ahead
        report = worker_report(now + offset, 50)
        if shift:
            on_master_clock(report, offset)
        for data in report["stats"]:
            incoming = StatsEntry.unserialize(data, master)
            master.get(incoming.name, incoming.method).extend(incoming)
        master.total.extend(StatsEntry.unserialize(report["stats_total"], master))
    entry = master.get("/v1/chat/completions", "POST")
    return {"span_s": entry.last_request_timestamp - entry.start_time, "requests": entry.num_requests,
            "total_rps": entry.total_rps, "seconds": max(entry.num_reqs_per_sec) - min(entry.num_reqs_per_sec)}

report = worker_report(1_000_000.0, 4)
keys = sorted(set(STAMPED_ENTRY_KEYS) - set(StatsEntryDict.__annotations__) - set(report["stats"][0]))
same = worker_report(1_000_000.0, 4)
on_master_clock(same, 0.9)
on_master_clock(report, 300.0)
error = next(iter(report["errors"].values()))
print(json.dumps({
    "missing_keys": keys, "before": merged(False), "after": merged(True),
    "small_offset_unchanged": same == worker_report(1_000_000.0, 4),
    "error_stamps": [error["first_seen"], error["last_seen"]], "total_start": report["stats_total"]["start_time"],
    "first_second": min(report["stats"][0]["num_reqs_per_sec"]),
}))
"""


def test_issue24_locust_tables_on_the_master_use_the_masters_clock_not_the_workers():
    """Locust's statistics in a worker report are stamped with the worker's wall clock; with one worker 300 s
    ahead the master's merged table spanned 305 s (total RPS / 60). Workers now stamp them on the master's clock."""
    proc = subprocess.run(
        [sys.executable, "-c", _CLOCK_PROBE], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["missing_keys"] == []  # the tripwire: Locust's report dicts still stamp these keys
    before, after = seen["before"], seen["after"]
    assert before["span_s"] > 300  # what the master's Locust table did on its own
    assert before["total_rps"] < 1
    assert after["span_s"] < 6
    assert after["requests"] == 100
    assert after["total_rps"] > 15
    assert after["seconds"] < 6
    assert seen["small_offset_unchanged"] is True
    assert seen["error_stamps"] == [1_000_000.0 - 4 - 300, 1_000_000.0 - 1 - 300]
    assert seen["total_start"] == 1_000_000.0 - 5 - 300
    assert seen["first_second"] == 1_000_000 - 5 - 300
