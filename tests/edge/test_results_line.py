"""A headless run's last output line is the results JSON, marked, so `kubectl logs` recovers it: a run here.

The simulator is served here and the locust command line runs here (``tests/edge/cluster.run_locustfile_here``;
its stdout is not a terminal). What a terminal shows, and Locust's own log lines, are checked with
``locust`` processes in ``tests/integration/test_results_line.py``.
"""

from __future__ import annotations

import json

from llmload.exporters.console import RESULTS_LINE_PREFIX
from tests.edge.cluster import run_locustfile_here as run_locust
from tests.simserver import serve


def test_headless_run_ends_with_one_marked_line_holding_the_results_file(tmp_path):
    with serve() as sim:
        base_url = sim.url
        results_path = tmp_path / "results.json"
        out = run_locust(
            [
                *("-f", "locustfiles/chat.py", "--headless", "-H", base_url, "-u", "2", "-r", "2"),
                *("--num-requests", "6", "--max-tokens", "8", "--results-json", str(results_path)),
            ],
            timeout_s=90,
        )
    assert out.returncode == 0, out.stderr[-2000:]
    last = out.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith(RESULTS_LINE_PREFIX)
    assert json.loads(last.removeprefix(RESULTS_LINE_PREFIX)) == json.loads(results_path.read_text())
    assert sum(line.startswith(RESULTS_LINE_PREFIX) for line in out.stdout.splitlines()) == 1
