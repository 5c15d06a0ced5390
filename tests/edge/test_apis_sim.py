"""The mixed locustfile (chat, Responses and embeddings users, 3:1:1) over two workers against `llmload sim`, here.

The simulator is served here (``tests/simserver.serve``) and the locust command line runs here
(``tests/edge/cluster.run_locustfile_here``, ``--processes 2``: a master and two workers).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.checks import check_against_sim
from tests.edge.cluster import run_locustfile_here as run_locust
from tests.integration.test_apis_sim import _truth
from tests.simserver import serve


@pytest.fixture
def sim_url() -> Iterator[str]:
    with serve("--decode-step-ms", "5", "--output-len-mean", "20") as sim:
        yield sim.url


def _run(locustfile: str, url: str, out: Path, n: int, *extra: str) -> dict[str, Any]:
    proc = run_locust(
        [
            "-f", f"locustfiles/{locustfile}.py", "--headless", "--only-summary", "-H", url, "--processes", "2",
            "-u", "16", "-r", "16", "--num-requests", str(n), "-t", "90s", "--max-tokens", "24",
            "--results-json", str(out), *extra,
        ],
        timeout_s=150,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    results["_stdout"] = proc.stdout
    return results


def test_mixed_locustfile_per_endpoint_figures_sum_to_totals(sim_url, tmp_path):
    results = _run("mixed", sim_url, tmp_path / "r.json", 150)
    entries = {entry["endpoint"]: entry for entry in results["by_endpoint"]}
    assert set(entries) == {"chat", "responses", "embeddings"}
    for key in ("total", "succeeded", "failed"):
        assert sum(e["requests"][key] for e in entries.values()) == results["requests"][key]
    assert sum(e["tokens"]["prompt"] for e in entries.values()) == results["tokens"]["prompt"]
    generating = [e for name, e in entries.items() if name != "embeddings"]
    assert sum(e["tokens"]["completion"] for e in generating) == results["tokens"]["completion"]
    assert results["tokens"]["completion_source"] == "server"  # embeddings count as neither known nor unknown
    succeeded = sum(e["requests"]["succeeded"] for e in generating)
    assert results["tokens"]["avg_completion_per_request"] == results["tokens"]["completion"] / succeeded
    assert results["requests"]["total"] == 150
    for endpoint, entry in entries.items():
        check_against_sim(entry, _truth(sim_url, endpoint), endpoint)
    assert sorted(results["run"]["user_classes"]) == ["Chat", "Embeddings", "Responses"]  # weights 3:1:1 of 16 users
    rows = {row["endpoint"] for row in results["timeseries"]}
    assert {"chat", "responses", "embeddings", None} <= rows
    assert "--- Per endpoint ---" in results["_stdout"]
    assert "responses (llmload-sim):" in results["_stdout"]
