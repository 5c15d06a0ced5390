"""The Responses, Messages and embeddings users over two workers: totals equal the simulator's counters.

A master and two workers in this process (``tests/edge/cluster.py``) against the simulator served
here. The preflight sends one probe per user class (max_tokens 2), which the simulator counts too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmload.edge.api_users import EmbeddingsUser, MessagesUser, ResponsesUser
from tests.checks import check_against_sim
from tests.edge.cluster import edge_cluster, wait_until
from tests.simserver import InProcessSim, serve

_USERS = {"responses": ResponsesUser, "messages": MessagesUser, "embeddings": EmbeddingsUser}
_PATHS = {"responses": "/v1/responses", "messages": "/v1/messages", "embeddings": "/v1/embeddings"}


@pytest.fixture
def api_sim() -> Iterator[InProcessSim]:
    with serve("--decode-step-ms", "5", "--output-len-mean", "20") as sim:
        yield sim


def _truth(sim: InProcessSim, endpoint: str) -> dict[str, float]:
    names = ("requests_completed", "requests_aborted", "prompt_tokens", "completion_tokens")
    return {name: sim.total(name, _PATHS[endpoint]) for name in names}


def _run(sim: InProcessSim, endpoint: str, n: int, *extra: str) -> tuple[dict[str, Any], int]:
    """A --num-requests ``n`` run of 16 users over two workers; its results and exit status."""
    args = ["--headless", "--only-summary", "-u", "16", "--num-requests", str(n), "--max-tokens", "24", *extra]
    with edge_cluster(_USERS[endpoint], sim.url, args) as cluster:
        cluster.start(16)
        wait_until(lambda: cluster.runtime.run.results is not None, 90, "the run finished")
        status = cluster.shutdown()
        results = cluster.runtime.run.results
    assert results is not None
    return results, status


@pytest.mark.parametrize("endpoint", ["responses", "messages", "embeddings"])
def test_api_user_totals_equal_sim_over_two_workers(api_sim, endpoint, capsys) -> None:
    extra = ("--batch-size", "3") if endpoint == "embeddings" else ()
    results, status = _run(api_sim, endpoint, 60, *extra)
    assert status == 0
    assert results["requests"]["total"] == 60
    assert results["run"]["workers"] == 2
    check_against_sim(results, _truth(api_sim, endpoint), endpoint)
    if endpoint == "embeddings":
        assert results["throughput"]["inputs_per_s"] == pytest.approx(180 / results["duration_s"])
        assert "Embedded inputs/s:" in capsys.readouterr().out
    assert [row["endpoint"] for row in results["timeseries"] if row["endpoint"]] != []


@pytest.mark.parametrize("history", ["client", "server"])
def test_multi_turn_responses_totals_equal_sim_with_either_history(api_sim, history) -> None:
    results, _ = _run(api_sim, "responses", 36, "--turns", "3", "--responses-history", history)
    truth = _truth(api_sim, "responses")
    # every previous_response_id sent was one the simulator stores
    assert (
        sum(
            s.value
            for family in api_sim.registry.collect()
            for s in family.samples
            if s.name == "llmload_sim_requests_rejected_total"
        )
        == 0
    )
    done = results["requests"]["succeeded"]
    assert results["requests"]["failed"] == 0
    assert done == 36
    assert truth["requests_completed"] == done + 1  # the preflight probe
    tokens = results["tokens"]
    assert tokens["prompt_source"] == "server"
    probe_prompt_tokens = truth["prompt_tokens"] - tokens["prompt"]
    assert 0 < probe_prompt_tokens < tokens["avg_prompt_per_request"]  # later turns carry the conversation
    assert 1 <= truth["completion_tokens"] - tokens["completion"] <= 2  # the probe's tokens


@pytest.mark.parametrize("endpoint", ["responses", "messages", "embeddings"])
def test_open_loop_request_rate_drives_the_new_users(api_sim, endpoint) -> None:
    results, _ = _run(api_sim, endpoint, 30, "--request-rate", "20", "--arrival", "constant")
    assert results["requests"]["succeeded"] == 30
    assert results["requests"]["failed"] == 0
    load = results["load"]
    assert load["target_rate_per_s"] == 20
    assert 10 <= load["achieved_rate_per_s"] <= 24  # 30 arrivals at 20/s over two workers (10/s each)
    assert results["latency"]["dispatch_delay_s"]["count"] == 30  # every request had an intended send time
    assert results["latency"]["e2e_from_schedule_s"]["count"] == 30
    check_against_sim(results, _truth(api_sim, endpoint), endpoint)
