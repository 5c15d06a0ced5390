"""The master/worker protocol in one process: plan, shares, reports, flush and finals, lost workers.

Locust's own master and worker runners (``tests/edge/cluster.py``) over in-process queues, against
the simulator served in this process, whose counters are the ground truth. What needs real
processes (signals, a worker killed by the OS, timing across processes) stays in
``tests/integration/test_distributed.py`` and ``test_stop_paths.py``.
"""

from __future__ import annotations

from locust.rpc import Message

import copy
import logging
from array import array
from typing import Any

import gevent
import pytest

from llmload.aggregate.histogram import MAX_INDEX, MIN_INDEX
from llmload.edge.users import ChatUser, CompletionUser
from llmload.exporters.timeseries import outcome_columns
from llmload.run.wire_reports import report_from_wire
from tests.edge.cluster import EdgeCluster, edge_cluster, wait_until
from tests.simserver import InProcessSim, serve


def _finished(cluster: EdgeCluster, timeout_s: float = 60) -> dict[str, Any]:
    wait_until(lambda: cluster.runtime.run.results is not None, timeout_s, "the run finished")
    results = cluster.runtime.run.results
    assert results is not None
    return results


def test_num_requests_over_two_workers_totals_equal_the_simulators(sim: InProcessSim, tmp_path) -> None:
    """--num-requests 30 over two workers: exactly 30, each counted once, tokens equal the server's."""
    out = tmp_path / "r.json"
    args = ["--headless", "-u", "8", "--num-requests", "30", "--max-tokens", "16", "--results-json", str(out)]
    with edge_cluster(CompletionUser, sim.url, args) as cluster:
        cluster.start(8)
        results = _finished(cluster)
        shares = cluster.messages("llmload_share")
        finals = cluster.messages("llmload_final")
        run_id = cluster.runtime.run.run_id
        done_bytes, flush_bytes = cluster.wire_bytes("llmload_done"), cluster.wire_bytes("llmload_flush")
    assert out.exists()
    requests = results["requests"]
    assert (requests["total"], requests["succeeded"], requests["failed"], requests["cancelled"]) == (30, 30, 0, 0)
    assert results["run"]["workers"] == 2
    # each worker got its own share (not the whole table), the quotas add up to the limit
    assert sorted(m.node_id for m in shares) == ["worker-0", "worker-1"]
    assert sum(m.data["share"]["quota_requests"] for m in shares) == 30
    assert sorted(m.node_id for m in finals) == ["worker-0", "worker-1"]
    # the typed done and flush messages are, byte for byte, the plain dicts earlier versions sent
    assert sorted(done_bytes) == sorted(
        Message("llmload_done", {"run_id": run_id}, node).serialize() for node in ("worker-0", "worker-1")
    )
    assert sorted(flush_bytes) == sorted(
        Message("llmload_flush", {"run_id": run_id}, node).serialize() for node in ("worker-0", "worker-1")
    )
    # the simulator also served the one preflight probe (same prompt, max_tokens 2)
    endpoint = "/v1/completions"
    assert sim.total("requests_completed", endpoint) == 31
    assert results["tokens"]["prompt"] * 31 == sim.total("prompt_tokens", endpoint) * 30
    assert 1 <= sim.total("completion_tokens", endpoint) - results["tokens"]["completion"] <= 2
    assert results["tokens"]["completion_source"] == "server"
    latency = results["latency"]
    assert latency["e2e_s"]["count"] == 30
    # TTFT with the connection set-up travels from both workers: one per success, never below TTFT
    assert latency["ttft_with_connect_s"]["count"] == 30
    assert latency["ttft_with_connect_s"]["mean"] >= latency["ttft_s"]["mean"]
    assert latency["ttft_with_connect_s"]["mean"] - latency["ttft_s"]["mean"] == pytest.approx(
        results["client"]["connect_s"]["mean"], abs=1e-6
    )


def test_quit_mid_run_counts_in_flight_requests_as_cancelled(sim: InProcessSim) -> None:
    """A stop without a stop timeout (as -t does): requests in flight are cancelled, neither success nor failure."""
    args = ["--headless", "-u", "16", "--ignore-eos", "--skip-preflight", "--max-tokens", "150"]
    with edge_cluster(ChatUser, sim.url, args) as cluster:
        cluster.start(16)
        gevent.sleep(1.0)
        gevent.spawn(cluster.master.quit)  # what Locust's -t greenlet does in a headless run
        results = _finished(cluster)
    endpoint = "/v1/chat/completions"
    started = sim.total("requests_completed", endpoint) + sim.total("requests_aborted", endpoint)
    requests = results["requests"]
    assert requests["failed"] == 0
    assert requests["cancelled"] > 0
    # a request the simulator finished just as the client was stopped may be counted as cancelled
    assert requests["succeeded"] + requests["cancelled"] == started
    assert requests["succeeded"] <= sim.total("requests_completed", endpoint)
    assert results["latency"]["e2e_s"]["count"] == requests["succeeded"]


INTERVAL_S = 0.5


def test_timeseries_over_two_workers_sums_equal_totals() -> None:
    """The per-interval rows merged from two workers' reports add up to the run's totals, outcome by outcome."""
    with serve(
        "--decode-step-ms", "4", "--output-len-mean", "30", "--fail-rate", "0.1", "--overload-rate", "0.1"
    ) as sim:
        args = ["--headless", "-u", "8", "--num-requests", "120", "--max-tokens", "32", "--max-failure-ratio", "1"]
        args += ["--timeseries-interval", str(INTERVAL_S)]
        with edge_cluster(CompletionUser, sim.url, args) as cluster:
            cluster.start(8)
            for _ in range(3):  # regular reports mid-run, as every 3 s
                gevent.sleep(0.3)
                cluster.report()
            results = _finished(cluster)
    rows = [r for r in results["timeseries"] if r["endpoint"] is None]
    requests, tokens = results["requests"], results["tokens"]
    assert requests["total"] == 120
    assert requests["failed"] > 0
    assert sum(r["succeeded"] + r["failed"] for r in rows) == 120
    assert sum(r["succeeded"] for r in rows) == requests["succeeded"]
    assert sum(r["failed"] for r in rows) == requests["failed"]
    assert sum(r["cancelled"] for r in rows) == requests["cancelled"]
    for outcome in outcome_columns():
        assert sum(r[outcome] for r in rows) == requests["by_outcome"][outcome], outcome
    assert sum(r["output_tokens"] for r in rows) == tokens["completion"]
    assert sum(r["prompt_tokens"] for r in rows) == tokens["prompt"]
    assert [r["t"] for r in rows] == [i * INTERVAL_S for i in range(len(rows))]
    assert max(w for r in rows if (w := r["workers"]) is not None) == 2  # None: no report in that interval


def test_fewer_users_than_workers_with_num_requests_is_blocked_not_short(sim: InProcessSim) -> None:
    """-u 1 over 2 workers with --num-requests 6: one worker would have no user; blocked at once, naming the fix."""
    args = ["--headless", "-u", "1", "--num-requests", "6"]
    with edge_cluster(ChatUser, sim.url, args) as cluster:
        cluster.master.start(1, 1)
        results = _finished(cluster)
    assert results["requests"]["total"] == 0
    assert "Set the number of users (-u) to 2 or more" in results["blocked"]
    assert sim.total("requests_completed", "/v1/chat/completions") == 1  # the preflight probe only


def test_lost_worker_is_named_and_a_num_requests_run_ends_without_it(sim: InProcessSim, caplog) -> None:
    """A worker lost mid-run: what it reported stays, the results name it, the run ends when the rest are done."""
    args = ["--headless", "-u", "4", "--num-requests", "60", "--max-tokens", "8", "--skip-preflight"]
    endpoint = "/v1/chat/completions"
    with caplog.at_level(logging.WARNING, "llmload"), edge_cluster(ChatUser, sim.url, args) as cluster:
        cluster.start(4)
        wait_until(lambda: sim.total("requests_completed", endpoint) >= 8, 30, "8 requests served")
        cluster.report()  # both workers' requests so far reach the master
        reported = _reported(cluster, "worker-1")
        lost = cluster.lose(1)
        results = _finished(cluster)
    assert lost == "worker-1"
    assert reported > 0
    assert results["lost_workers"] == [lost]
    assert "worker worker-1 lost mid-run" in caplog.text
    requests = results["requests"]
    assert requests["succeeded"] == requests["total"]
    assert 30 + reported <= requests["total"] < 60  # worker-0's whole share and what worker-1 had reported


def _reported(cluster: EdgeCluster, worker: str) -> int:
    """Requests (any outcome) in the reports ``worker`` sent so far, read from the messages as the master got them."""
    counted = 0
    for msg in cluster.messages("stats") + cluster.messages("llmload_final"):
        if msg.node_id == worker:
            payload = msg.data.get("llmload") if msg.type == "stats" else msg.data
            if payload is not None:
                total = report_from_wire(payload).stats.total()
                counted += total.succeeded + total.failed
    return counted


def _with_bucket_index(payload: dict[str, Any], index: int) -> dict[str, Any]:
    """A copy of a v2 report whose first packed histogram ends at bucket ``index`` (a corrupted report)."""
    corrupted = copy.deepcopy(payload)
    item = next(item for item in corrupted["series"] if item["stats"]["endpoints"])
    raw = next(iter(item["stats"]["endpoints"][0]["hist"].values()))
    indexes = array("i", raw["idx"])
    indexes[-1] = index
    raw["idx"] = indexes.tobytes()
    return corrupted


def test_a_late_report_of_another_run_and_a_malformed_one_are_dropped(sim: InProcessSim, caplog) -> None:
    """A report of an older run is ignored and a malformed one logged; neither changes the totals.

    Malformed: a table where the statistics go, or a bucket index beyond the histograms' range.
    """
    args = ["--headless", "-u", "2", "--num-requests", "60", "--max-tokens", "8", "--skip-preflight"]
    endpoint = "/v1/chat/completions"
    with caplog.at_level(logging.ERROR, "llmload"), edge_cluster(ChatUser, sim.url, args) as cluster:
        cluster.start(2)
        wait_until(lambda: sim.total("requests_completed", endpoint) >= 4, 30, "4 requests served")
        cluster.report()
        worker = cluster.workers[0]
        payload = next(m.data["llmload"] for m in cluster.messages("stats") if m.node_id == worker.client_id)
        assert report_from_wire(payload).run_id == cluster.runtime.run.run_id
        worker.send_message("llmload_live", {**payload, "run_id": "an-older-run"})
        worker.send_message("llmload_live", {**payload, "stats": "not a table"})
        worker.send_message("llmload_live", _with_bucket_index(payload, MAX_INDEX + 1))
        results = _finished(cluster)
    assert results["requests"]["total"] == 60  # a merged copy would count its requests twice
    assert "dropped a report from worker worker-0" in caplog.text
    assert f"bucket indexes from {MIN_INDEX} to {MAX_INDEX}, got {MAX_INDEX + 1}" in caplog.text
