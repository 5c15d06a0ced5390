"""Drift end to end: ``llmload sim`` restarted mid-run with slower decoding; the summary and results flag it.

One process runs against the simulator on loopback; halfway through the run
the simulator is stopped and started again on the same port with every
latency larger (its reply lengths unchanged), as a server that
degrades during a soak would. Bounded by ``-t`` and subprocess timeouts.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from tests.integration.procs import free_port, locust_argv
from tests.integration.test_sim import REPO_ROOT, start_sim, stop_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_S = 22
INTERVAL_S = 2
FAST = ("--decode-step-ms", "4", "--output-len-mean", "16")
# every request held 0.5 s before it is queued (TTFT, E2E; far above a loaded machine's jitter), decode steps
# twice as long
SLOW = ("--decode-step-ms", "8", "--output-len-mean", "16", "--stall-rate", "1", "--stall-first-token-s", "0.5")


def test_drift_of_a_server_that_slows_down_mid_run_is_flagged(tmp_path):
    port = free_port()
    out = tmp_path / "r.json"
    url, sim = start_sim("--port", str(port), *FAST)
    try:
        locust = subprocess.Popen(
            locust_argv(
                [
                    "-f", "locustfiles/chat.py", "--headless", "-H", url, "-u", "48", "-r", "48",
                    "-t", f"{RUN_S}s", "--max-tokens", "32", "--timeseries-interval", str(INTERVAL_S),
                    "--results-json", str(out), "--skip-preflight", "--max-failure-ratio", "1",
                ]
            ),
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            time.sleep(RUN_S / 2)
            stop_sim(sim)
            url, sim = start_sim("--port", str(port), *SLOW)
            stdout, stderr = locust.communicate(timeout=RUN_S + 60)
        finally:
            if locust.poll() is None:
                locust.kill()
                locust.wait(timeout=10)
    finally:
        stop_sim(sim)
    assert locust.returncode == 0, stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    drift = results["drift"]
    metrics = drift["metrics"]
    assert drift["judged"] is True
    assert drift["intervals"] >= 10
    # ITL p99 is left out: on a loaded shared machine the client's scheduling jitter (tens of ms) hides a
    # decode step change of a few ms; unit tests check its rule, which is the same as TTFT's
    for name in ("ttft_p99_s", "e2e_p99_s"):
        assert metrics[name]["enough_samples"] is True, {
            n: (m["samples"], m["first"], m["last"]) for n, m in metrics.items()
        }
        assert metrics[name]["change"] > 0.25, name
        assert metrics[name]["flagged"] is True, name
    assert metrics["output_tokens_per_s"]["change"] < -0.25
    assert metrics["output_tokens_per_s"]["flagged"] is True
    assert metrics["error_ratio"]["flagged"] is False  # the restart's failures fall between the stretches
    assert metrics["client_rss_bytes"]["first"] > 0
    assert "--- Drift (first vs last 10%)" in stdout
    warning = next(line for line in stdout.splitlines() if line.startswith("WARNING: drift beyond tolerance:"))
    for name in ("ttft_p99_s", "e2e_p99_s", "output_tokens_per_s"):
        assert name in warning
    print("\n".join(line for line in stdout.splitlines() if "->" in line or "Drift" in line or "Stretches" in line))
