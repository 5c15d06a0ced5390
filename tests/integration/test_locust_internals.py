"""Issue 24: a worker no longer builds Locust's argument parser once per option of every spawn message.

That filter used to hold a worker's gevent loop for 1-2 s per spawn message (107 parser builds),
so during a ramp-up its heartbeats starved and the master dropped it as missing
(tests/integration/test_ramp_stop.py under coverage on a busy machine). See
llmload/edge/locust_internals.py. A process of its own: the filter is measured before llmload's hooks are
installed. The other Locust-table checks run in process: ``tests/edge/test_locust_tables.py``.
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
