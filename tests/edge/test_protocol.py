"""The master/worker protocol in one process: plan, shares, reports, flush and finals, lost workers."""

from __future__ import annotations

from llmload.edge.users import CompletionUser
from tests.edge.cluster import edge_cluster, wait_until
from tests.edge.sim import InProcessSim


def test_num_requests_over_two_workers_totals_equal_the_simulators(sim: InProcessSim, tmp_path) -> None:
    out = tmp_path / "r.json"
    args = ["--headless", "-u", "8", "--num-requests", "30", "--max-tokens", "16", "--results-json", str(out)]
    with edge_cluster(CompletionUser, sim.url, args) as cluster:
        cluster.start(8)
        wait_until(lambda: cluster.runtime.results is not None, 60, "the run finished")
        results = cluster.runtime.results
    assert results is not None
    assert results["requests"]["total"] == 30
    assert results["requests"]["succeeded"] == 30
    assert results["run"]["workers"] == 2
    # the simulator also served the preflight probe
    assert sim.total("requests_completed", "/v1/completions") == 31
