"""A soak run of the Kubernetes manifests on this machine, with a fault halfway (a demonstration; figures, not a test).

The smoke overlay is rendered after a user's edits (run time, users, worker
count, thresholds, checkpoint interval, the sim's faults) and its pods run as
local processes (``tests/integration/localpods.py``: sim Deployment, master
Job, worker Job, Services on loopback). The sim starts failing
``--fail-rate`` of its requests ``--fault-at`` of the way into the run
(``llmload sim --faults-after``); the ``--abort-on`` threshold should stop the
run soon after, with exit status 1. While it runs, the results file on the
master's results "volume" is read every few seconds to show the checkpoints;
at the end the volume (results, time series, HTML report) and the master's
log are copied to ``--out``.

    python bench/soak_k8s_local.py                         # 30 minutes, fault at 15
    python bench/soak_k8s_local.py --minutes 4 --fault-at 0.5 --checkpoint-interval 30
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from benchlib import REPO

sys.path.insert(0, str(REPO))

from tests.integration.localpods import LocalCluster
from tests.integration.test_k8s_local import K8S, SECRETS, container
from tests.unit.test_k8s import _kubectl


def render(workdir: Path, conf_lines: dict[str, str], workers: int) -> list[dict[str, Any]]:
    """The smoke overlay rendered after editing its locust.conf (``key = value`` lines) and worker count."""
    copy = workdir / "k8s"
    shutil.copytree(K8S, copy)
    overlay = copy / "overlays" / "smoke"
    conf = overlay / "locust.conf"
    text = conf.read_text()
    for key, value in conf_lines.items():
        line = f"{key} = {value}"
        text, n = re.subn(rf"^{re.escape(key)} = .*$", line, text, count=1, flags=re.MULTILINE)
        if not n:
            text += line + "\n"
    conf.write_text(text)
    kustomization = overlay / "kustomization.yaml"
    kustomization.write_text(
        re.sub(r"(path: /spec/parallelism\n\s+value: )\d+", rf"\g<1>{workers}", kustomization.read_text())
    )
    out = subprocess.run(
        [_kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60, check=True
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="planned run time")
    parser.add_argument("--fault-at", type=float, default=0.5, help="share of the run time before the sim breaks")
    parser.add_argument("--fail-rate", type=float, default=0.2, help="share of requests the broken sim fails")
    parser.add_argument("--abort-on", default="error_ratio>0.05 for 60s", help="the run's threshold")
    parser.add_argument("--checkpoint-interval", type=float, default=60.0, help="seconds between checkpoints")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "soak-k8s-local")
    args = parser.parse_args()
    run_s = int(args.minutes * 60)
    conf = {
        "run-time": f"{run_s}s",
        "users": str(args.users),
        "spawn-rate": str(args.users),
        "abort-on": args.abort_on,
        "checkpoint-interval": f"{args.checkpoint_interval:g}",
        "max-failure-ratio": "0.01",
    }
    workdir = Path(tempfile.mkdtemp(prefix="llmload-soak-"))
    docs = render(workdir, conf, args.workers)
    fault_s = run_s * args.fault_at
    container(docs, "llmload-sim")["args"] += ["--fail-rate", str(args.fail_rate), "--faults-after", str(fault_s)]
    cluster = LocalCluster(docs, workdir / "pods", SECRETS, K8S / "Dockerfile")
    started = time.monotonic()
    checkpoints: list[tuple[float, int, bool]] = []  # (seconds since start, requests finished, partial)
    try:
        workers = [cluster.start("llmload-workers", i) for i in range(args.workers)]
        master = cluster.start("llmload-master")
        sim = cluster.start("llmload-sim")
        master_args = container(docs, "llmload-master")["args"]
        results_arg = next(a.split("=", 1)[1] for a in master_args if a.startswith("--results-json="))
        results_path = master.local_path(results_arg)
        print(
            f"soak: {run_s} s planned, {args.users} users, {args.workers} workers; sim fails "
            f"{args.fail_rate:.0%} from {fault_s:.0f} s; --abort-on {args.abort_on!r}",
            flush=True,
        )
        last_seen = 0.0
        while master.main_process is None or master.main_process.poll() is None:
            if time.monotonic() - started > run_s + 600:
                master.signal(signal.SIGTERM)
                print("soak: the master outlived its run time by 600 s; SIGTERM", flush=True)
                break
            time.sleep(5)
            try:
                stat = results_path.stat()
            except FileNotFoundError:
                continue
            if stat.st_mtime != last_seen:
                last_seen = stat.st_mtime
                doc = json.loads(results_path.read_text())  # written atomically: always whole
                requests = doc.get("requests", {})
                finished = int(requests.get("succeeded", 0)) + int(requests.get("failed", 0))
                checkpoints.append((time.monotonic() - started, finished, bool(doc.get("partial"))))
                print(
                    f"soak: t={checkpoints[-1][0]:.0f}s results file: {finished} requests, "
                    f"partial={doc.get('partial')}",
                    flush=True,
                )
        status = master.wait(120)
        for worker in workers:
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                print(f"soak: {worker.name} still running 60 s after the master", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        for item in results_path.parent.iterdir():
            shutil.copy2(item, args.out / item.name)
        (args.out / "master.log").write_text(master.log())
        (args.out / "sim.log").write_text(sim.log())
        results = json.loads((args.out / results_path.name).read_text())
        print(json.dumps({
            "exit_status": status,
            "verdict": results.get("verdict"),
            "aborted": results.get("aborted"),
            "duration_s": results.get("duration_s"),
            "requests": results.get("requests"),
            "partial": results.get("partial"),
            "checkpoints_seen": len(checkpoints),
            "timeseries_lines": len((args.out / "timeseries.jsonl").read_text().splitlines()),
            "wall_s": round(time.monotonic() - started, 1),
            "out": str(args.out),
        }, indent=2), flush=True)  # fmt: skip
        return 0
    finally:
        cluster.kill_all()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
