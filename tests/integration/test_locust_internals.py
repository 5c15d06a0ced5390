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
