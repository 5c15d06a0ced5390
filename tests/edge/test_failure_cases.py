"""Failure cases over whole runs, in this process: requests in flight at the stop (BC-27).

The simulator is served here (``tests/simserver.serve``) and the locust command line runs here
(``tests/edge/cluster.run_locustfile_here``); the other failure cases are in
``tests/integration/test_failure_cases.py``.
"""

from __future__ import annotations

import json

from tests.edge.cluster import run_locustfile_here as run_locust
from tests.simserver import serve


# Case BC-27 C: the run stops while 50 streams are mid-generation -> cancelled_at_stop = 50.
def test_bc27_requests_in_flight_at_stop_are_cancelled_not_failed(tmp_path):
    out = tmp_path / "r.json"
    with serve("--decode-step-ms", "10", "--prefill-base-ms", "0") as sim:
        url = sim.url
        proc = run_locust(
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", url, "-u", "50", "-r", "50",
                "-t", "3s", "--ignore-eos", "--max-tokens", "2000", "--skip-preflight", "--results-json", str(out),
            ]
        )  # fmt: skip
    results = json.loads(out.read_text())
    assert results["requests"]["cancelled"] == 50
    assert results["requests"]["failed"] == 0
    assert results["requests"]["succeeded"] == 0
    assert results["latency"]["e2e_s"]["count"] == 0
    assert proc.returncode == 1  # nothing finished: not a passing benchmark
    assert "Cancelled at stop:" in proc.stdout
