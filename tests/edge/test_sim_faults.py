"""The simulator's faults over a whole run of a master and two workers, in this process.

The simulator is served here (``tests/simserver.serve``) and the locust command line runs here
(``tests/edge/cluster.run_locustfile_here``, ``--processes 2``: a master and two workers); the
faults' own shapes are checked in ``tests/integration/test_sim_faults.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.edge.cluster import run_locustfile_here as run_locust
from tests.integration.test_sim import metrics
from tests.integration.test_sim_faults import completed, injected
from tests.simserver import serve


@pytest.mark.slow
def test_fault_locust_run_failures_and_tokens_equal_sim_counters(tmp_path: Path):
    """Master + 2 workers, 200 requests, 5% injected 500s plus mid-stream errors and drops.

    ``requests.failed`` equals the injected faults, ``succeeded`` the completed
    requests, and the token totals the simulator's counters: failures' partial
    tokens are excluded.
    """
    out = tmp_path / "r.json"
    with serve(
        "--decode-step-ms", "2", "--output-len-mean", "24", "--seed", "3",
        "--fail-rate", "0.05", "--midstream-error-rate", "0.03", "--drop-rate", "0.02",
    ) as sim:  # fmt: skip
        url = sim.url
        run = run_locust(
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary",
                "-H", url, "--processes", "2", "-u", "32", "-r", "32", "--num-requests", "200",
                "-t", "60s", "--max-tokens", "48", "--results-json", str(out), "--skip-preflight",
                "--prometheus-port", "0",
            ],
            timeout_s=120,
        )  # fmt: skip
        samples = metrics(url)
    assert out.exists(), run.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    endpoint = "/v1/chat/completions"
    faults = sum(injected(samples, kind, endpoint) for kind in ("fail", "midstream_error", "drop"))
    assert results["requests"]["total"] == 200
    assert results["requests"]["cancelled"] == 0
    assert results["requests"]["failed"] == faults > 0
    assert results["requests"]["succeeded"] == completed(samples, endpoint) == 200 - faults
    assert (
        results["tokens"]["completion"] == samples[("llmload_sim_completion_tokens_total", (("endpoint", endpoint),))]
    )
    assert results["tokens"]["prompt"] == samples[("llmload_sim_prompt_tokens_total", (("endpoint", endpoint),))]
    by_category = {e["category"]: e["count"] for e in results["errors"]}
    assert by_category["HTTP 500 InternalServerError"] == injected(samples, "fail", endpoint)
    assert by_category["InternalServerError/500"] == injected(samples, "midstream_error", endpoint)
    assert by_category["stream ended before completion"] == injected(samples, "drop", endpoint)
