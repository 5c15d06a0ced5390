"""Failure cases over whole runs, in this process: every user a stream (BC-24), requests in flight at the stop (BC-27).

The simulator is served here (``tests/simserver.serve``) and the locust command line runs here
(``tests/edge/cluster.run_locustfile_here``); the other failure cases are in
``tests/integration/test_failure_cases.py``.
"""

from __future__ import annotations

import json

import gevent

from tests.edge.cluster import run_locustfile_here as run_locust
from tests.integration.test_sim import metrics
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


# Case BC-24: 256 users give 256 concurrent streams at the server (no client-side pool cap).
def test_bc24_server_sees_every_user_as_a_concurrent_stream(tmp_path):
    seen = []
    with serve("--decode-step-ms", "10", "--prefill-base-ms", "0", "--max-num-seqs", "512") as sim:
        url = sim.url
        run = gevent.spawn(
            run_locust,
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary",
                "-H", url, "-u", "256", "-r", "256", "-t", "8s", "--ignore-eos", "--max-tokens", "400",
                "--skip-preflight",
            ],
        )  # fmt: skip
        try:
            for _ in range(60):
                if run.ready():
                    break
                samples = metrics(url)
                seen.append(samples.get(("llmload_sim_requests_running", ()), 0.0))
                gevent.sleep(0.1)
        finally:
            run.get(timeout=60)
    assert max(seen) == 256
