"""The smoke overlay's pods run on one machine: sim Deployment, master Job and worker Job as processes.

``kubectl kustomize`` renders a copy of ``k8s/`` in which only what a user edits
changes (the run time in the overlay's ``locust.conf``, the worker count in its
``kustomization.yaml``); ``tests/integration/localpods.py`` runs each pod's
command, args, env and volumes as local processes with the Services on
loopback. Every process is bounded: each wait has a timeout and every pod is
killed in ``finally``. Without ``kubectl`` these tests skip and say so.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.localpods import REPO_ROOT, LocalCluster, LocalPod
from tests.integration.test_sim import metric_sum, metrics
from tests.unit.test_k8s import _kubectl

pytestmark = [pytest.mark.integration, pytest.mark.slow]

K8S = REPO_ROOT / "k8s"
SECRETS = {"llmload-api-key": {"OPENAI_API_KEY": "sk-local-pods-test"}}
RESULTS_LINE_PREFIX = "LLMLOAD_RESULTS "  # llmload.edge.hooks.RESULTS_LINE_PREFIX (importing hooks imports Locust)
EXIT_TIMEOUT_S = 60.0
WORKER_EXIT_S = 15.0  # after the master; Locust's workers give up on a silent master after 60 s


def render_smoke(workdir: Path, *, run_time: str | None = None, workers: int | None = None) -> list[dict[str, Any]]:
    """Render a copy of the smoke overlay after a user's edits: run time (locust.conf), worker count."""
    copy = workdir / "k8s"
    shutil.copytree(K8S, copy)
    overlay = copy / "overlays" / "smoke"
    if run_time is not None:
        conf = overlay / "locust.conf"
        text = conf.read_text()
        conf.write_text(re.sub(r"^run-time = .*$", f"run-time = {run_time}", text, count=1, flags=re.MULTILINE))
        assert conf.read_text() != text
    if workers is not None:
        kustomization = overlay / "kustomization.yaml"
        text = kustomization.read_text()
        kustomization.write_text(re.sub(r"(path: /spec/parallelism\n\s+value: )\d+", rf"\g<1>{workers}", text))
        assert kustomization.read_text() != text
    out = subprocess.run(
        [_kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def container(docs: list[dict[str, Any]], workload: str) -> dict[str, Any]:
    obj = next(d for d in docs if d["kind"] in {"Deployment", "Job"} and d["metadata"]["name"] == workload)
    first: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return first


@dataclass
class Run:
    """One smoke run's pods on this machine."""

    cluster: LocalCluster
    sim: LocalPod
    master: LocalPod
    workers: list[LocalPod]

    @property
    def sim_url(self) -> str:
        return self.cluster.url("llmload-sim", "http")

    def sim_completed(self) -> float:
        try:
            return metric_sum(metrics(self.sim_url), "llmload_sim_requests_completed_total")
        except OSError:  # not listening yet
            return 0.0

    def results_path(self) -> Path:
        args = container(self.cluster.docs, "llmload-master")["args"]
        path = next(a.split("=", 1)[1] for a in args if a.startswith("--results-json="))
        return self.master.local_path(path)

    def finish(self) -> tuple[int, dict[str, Any]]:
        """The master's exit status and its results file, once master and workers have ended (bounded)."""
        status = self.master.wait(EXIT_TIMEOUT_S)
        for worker in self.workers:
            if worker.main_process is not None and worker.main_process.returncode != -signal.SIGKILL:
                # Workers end with the run, status 0: the master's "quit", not its missing heartbeat (60 s).
                try:
                    assert worker.wait(WORKER_EXIT_S) == 0, worker.log()[-3000:]
                except subprocess.TimeoutExpired:
                    pytest.fail(
                        f"{worker.name} still runs {WORKER_EXIT_S} s after the master exited {status}; "
                        f"master log:\n{self.master.log()[-3000:]}"
                    )
        log = self.master.log()
        assert self.results_path().exists(), log[-3000:]
        results: dict[str, Any] = json.loads(self.results_path().read_text())
        # README recipe: kubectl logs job/llmload-master | grep '^LLMLOAD_RESULTS ' | tail -1 | cut -d' ' -f2-
        marked = [line for line in log.splitlines() if line.startswith(RESULTS_LINE_PREFIX)]
        assert len(marked) == 1, log[-3000:]
        assert json.loads(marked[-1].removeprefix(RESULTS_LINE_PREFIX)) == results
        assert results["exit_status"] == status
        # the time series and the HTML report are on the results volume beside the results file
        volume = self.results_path().parent
        rows = [json.loads(line) for line in (volume / "timeseries.jsonl").read_text().splitlines()]
        totals = {row["t"]: row for row in rows if row["endpoint"] is None}  # a later line replaces an earlier one
        assert sum(row["succeeded"] for row in totals.values()) == results["requests"]["succeeded"], log[-3000:]
        assert "<html" in (volume / "report.html").read_text()[:500].lower()
        return status, results


@contextmanager
def smoke_run(
    tmp_path: Path, *, run_time: str | None = None, workers: int | None = None, sim_args: tuple[str, ...] = ()
) -> Iterator[Run]:
    """Start the smoke overlay's pods: workers, then the master, then the sim (any order must work)."""
    docs = render_smoke(tmp_path, run_time=run_time, workers=workers)
    container(docs, "llmload-sim")["args"] += list(sim_args)  # the sim's options, as a user edits the Deployment
    cluster = LocalCluster(docs, tmp_path / "pods", SECRETS, K8S / "Dockerfile")
    try:
        parallelism = cluster.workload("llmload-workers")["spec"]["parallelism"]
        pods = [cluster.start("llmload-workers", index) for index in range(parallelism)]
        master = cluster.start("llmload-master")
        # The sim comes last, as a slow-to-schedule pod would: the master must wait for it.
        _wait_for(lambda: master.running_init() or master.ended(), 10, "the master waiting or ending")
        time.sleep(1.0)
        sim = cluster.start("llmload-sim")
        yield Run(cluster, sim, master, pods)
    finally:
        cluster.kill_all()


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.2)


def _scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=2) as reply:
            text: str = reply.read().decode()
            return text
    except OSError:
        return ""


def test_k8s_local_smoke_pods_pass_and_the_master_exit_status_is_the_verdict(tmp_path):
    with smoke_run(tmp_path, run_time="8s") as run:
        scrapes: list[str] = []
        metrics_url = run.cluster.url("llmload-master", "metrics")
        # Prometheus (the PodMonitor) scrapes the master's named port until the pod ends.
        while run.master.main_process is None or run.master.main_process.poll() is None:
            assert len(scrapes) < EXIT_TIMEOUT_S, run.master.log()[-3000:]
            scrapes.append(_scrape(metrics_url))
            time.sleep(1)
        status, results = run.finish()
    assert status == 0, run.master.log()[-3000:]
    assert results["passed"] is True
    assert results["run"]["workers"] == 1
    assert results["requests"]["succeeded"] > 0
    assert results["requests"]["failed"] == 0
    assert any("llmload_requests" in text for text in scrapes)


def test_k8s_local_smoke_against_a_failing_sim_fails_the_job(tmp_path):
    with smoke_run(tmp_path, run_time="5s", sim_args=("--fail-rate", "0.5")) as run:
        status, results = run.finish()
    assert status == 1, run.master.log()[-3000:]
    assert results["passed"] is False
    assert results["requests"]["failed"] > 0


def test_k8s_local_smoke_job_deletion_sigterm_still_writes_results(tmp_path):
    with smoke_run(tmp_path) as run:  # the overlay's own run time (5 minutes)
        _wait_for(lambda: "All users spawned" in run.master.log(), 60, "the ramp-up")
        _wait_for(lambda: run.sim_completed() > 50, 60, "requests reaching the sim")
        run.master.signal(signal.SIGTERM)  # what `kubectl delete job llmload-master` sends
        status, results = run.finish()
    assert status == 0, run.master.log()[-3000:]
    assert results["requests"]["succeeded"] > 50
    assert results["duration_s"] < 60


def test_k8s_local_smoke_killed_worker_is_lost_and_the_run_goes_on(tmp_path):
    with smoke_run(tmp_path, run_time="14s", workers=2) as run:
        assert {"name": "LOCUST_EXPECT_WORKERS", "value": "2"} in container(run.cluster.docs, "llmload-master")["env"]
        _wait_for(lambda: run.sim_completed() > 50, 60, "requests reaching the sim")
        time.sleep(3.5)  # past one worker report interval (3 s)
        run.workers[0].kill()  # the pod dies; backoffLimitPerIndex 0: not replaced
        killed_at = run.sim_completed()
        status, results = run.finish()
        after = run.sim_completed() - killed_at
    assert status == 0, run.master.log()[-3000:]
    assert len(results["lost_workers"]) == 1
    assert after > 50  # the other worker went on
    assert results["run"]["workers"] == 2
