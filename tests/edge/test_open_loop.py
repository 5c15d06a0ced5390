"""Open-loop load (cases BC-20 and BC-23) in this process: measured queueing, inf bounded, sentinels refused.

The simulator is served here (``tests/simserver.serve``) and each locust command line runs here
(``tests/edge/cluster.run_locustfile_here``), bounded by --num-requests and -t. The rate-accuracy
runs (BC-23's drift and split, P3, the sweeps) stay process tests in ``tests/integration/test_open_loop.py``.
"""

from __future__ import annotations

import json
import time

import gevent
import pytest

from tests.edge.cluster import CompletedRun
from tests.edge.cluster import run_locustfile_here as run_locust
from tests.integration.test_sim import metrics
from tests.simserver import serve


def _run(url: str, tmp_path, *args: str, timeout_s: float = 150) -> tuple[CompletedRun, dict]:
    out = tmp_path / "r.json"
    proc = run_locust(
        ["-f", "locustfiles/completions.py", "--headless", "--only-summary", "-H", url, "--skip-preflight",
         "--results-json", str(out), *args],
        timeout_s=timeout_s,
    )  # fmt: skip
    assert out.exists(), proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


# Case BC-20: client-side queueing is measured, not hidden.
def test_bc20_dispatch_delay_and_latency_from_schedule_are_reported(tmp_path):
    # every request: TTFT ~100 ms (90 ms queue delay + one 10 ms step), then 39 tokens at 10 ms: ~0.5 s
    with serve("--queue-delay-ms", "90", "--decode-step-ms", "10", "--decode-ms-per-seq", "0",
               "--prefill-base-ms", "0", "--prefill-ms-per-token", "0") as sim:  # fmt: skip
        url = sim.url
        proc, results = _run(
            url, tmp_path, "-u", "4", "-r", "4", "--request-rate", "10", "--arrival", "constant",
            "--max-concurrency", "1", "--num-requests", "20", "-t", "60s", "--ignore-eos", "--max-tokens", "40",
        )  # fmt: skip
    assert results["requests"]["succeeded"] == 20
    latency, load = results["latency"], results["load"]
    # request k is due at 0.1 k s but can only start at ~0.5 k s: delay ~0.4 k s, mean ~3.8 s
    assert 3.3 <= latency["dispatch_delay_s"]["mean"] <= 4.3
    assert 0.40 <= latency["e2e_s"]["mean"] <= 0.65  # from the actual send
    assert 3.8 <= latency["e2e_from_schedule_s"]["mean"] <= 4.9  # from the intended send
    assert 1.7 <= load["achieved_rate_per_s"] <= 2.3
    assert load["rate_shortfall"] is True
    assert "--max-concurrency" in load["warning"]
    assert "target rate 10 req/s not met" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--request-rate", "0"], "--request-rate inf for unlimited"),
        (["--request-rate", "-1"], "got '-1'"),
        (["--max-concurrency", "0"], "0 never means unlimited"),
        (["--arrival", "gamma"], "add --request-rate"),
    ],
)
# Case BC-23: sentinel values are refused with the accepted forms, never silently "unlimited".
def test_bc23_zero_and_negative_rates_are_refused_before_load(args, needle):
    proc = run_locust(
        ["-f", "locustfiles/chat.py", "--headless", "-H", "http://127.0.0.1:9", "-u", "1", "-t", "5s", *args],
        timeout_s=60,
    )
    assert proc.returncode == 2
    assert needle in proc.stderr


# Case BC-23: inf = every request eligible at once, bounded only by --max-concurrency.
def test_bc23_inf_rate_is_bounded_by_max_concurrency(tmp_path):
    seen: list[float] = []
    out = tmp_path / "r.json"
    with serve("--decode-step-ms", "10", "--decode-ms-per-seq", "0", "--prefill-base-ms", "0",
               "--max-num-seqs", "512") as sim:  # fmt: skip
        url = sim.url
        run = gevent.spawn(
            run_locust,
            ["-f", "locustfiles/completions.py", "--headless", "--only-summary", "-H", url,
             "--skip-preflight", "--processes", "2", "-u", "128", "-r", "128", "--request-rate", "inf",
             "--max-concurrency", "64", "--num-requests", "256", "-t", "60s", "--ignore-eos",
             "--max-tokens", "100", "--results-json", str(out)],
            timeout_s=90,
        )  # fmt: skip
        try:
            for _ in range(300):
                if run.ready():
                    break
                seen.append(metrics(url).get(("llmload_sim_requests_running", ()), 0.0))
                gevent.sleep(0.1)
        finally:
            run.get(timeout=90)
    results = json.loads(out.read_text())
    assert results["requests"]["succeeded"] == 256
    assert max(seen) == 64
    assert results["load"]["unlimited_rate"] is True
    # 2 processes x 64 users = -u 128 over the run, above --max-concurrency 64: the cap is what bound the load
    assert (results["load"]["in_flight_cap"], results["load"]["in_flight_cap_by"]) == (64, "max_concurrency")


def test_issue19_an_open_loop_user_due_to_send_caps_the_loops_hold(monkeypatch):
    # The loop holds its polls up to 2 ms while users wait for bytes (LoopTurns._pace); a user asleep
    # until its arrival tells the loop when it is due, so no hold runs past its send time.
    from llmload.edge.runtime import Runtime
    from llmload.edge.users import CompletionUser
    from llmload.net.turns import LoopTurns
    from llmload.settings.config import RunConfig
    from llmload.workload.arrivals import Arrival, ArrivalSchedule

    runtime = Runtime(config=RunConfig())
    runtime.run.schedule = ArrivalSchedule(rate=50.0, arrival=Arrival.CONSTANT)  # offsets 0, 20 ms, 40 ms
    noted: list[int] = []
    monkeypatch.setattr(LoopTurns, "due", lambda _turns, at_ns: noted.append(at_ns))
    monkeypatch.setattr(gevent, "sleep", lambda _seconds: None)  # no sleeping: a busy machine cannot make one due late
    started_ns = time.time_ns()
    intended = [CompletionUser._wait_for_arrival(runtime) for _ in range(3)]
    assert intended[2] - intended[0] == pytest.approx(0.04)
    assert len(noted) == 2  # the first arrival was due at once: nothing to note
    for due_ns, expected_s in zip(noted, (0.02, 0.04), strict=True):
        assert due_ns - started_ns == pytest.approx(expected_s * 1e9, abs=3e6)
