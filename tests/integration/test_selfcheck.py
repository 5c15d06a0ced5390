"""``llmload selfcheck --quick``: the short form runs end to end against the simulator (CI), bounded in time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmload.capture import capture_available
from tests.integration.test_sim import REPO_ROOT

pytestmark = pytest.mark.integration


def test_issue19_selfcheck_quick_reports_error_lag_cpu_and_streams_per_core(tmp_path):
    out = tmp_path / "selfcheck.json"
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", "selfcheck", "--quick", "--no-capture", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO_ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    burst, steady = report["phases"]
    assert (burst["name"], steady["name"]) == ("burst", "steady")
    assert (burst["requests"], steady["requests"]) == (32, 96)
    assert burst["failed"] == steady["failed"] == 0
    for phase in (burst, steady):
        assert phase["truth"] == "simulator"
        assert phase["chunks"] == phase["requests"] * 64  # --quick: 64 tokens per reply, one per chunk
        # the simulator's TTFT is at least its 50 ms queue delay; the client's error is what it adds
        assert phase["truth_ttft_mean_s"] >= 0.05
        assert phase["ttft_error_mean_s"] == pytest.approx(phase["client_ttft_mean_s"] - phase["truth_ttft_mean_s"])
        assert phase["read_lag_p99_s"] is not None
    # the burst's few chunks may cost less CPU than the start-up's noise; the steady phase's do not
    assert burst["cpu_us_per_chunk"] is None or burst["cpu_us_per_chunk"] > 0
    assert steady["cpu_us_per_chunk"] > 0
    assert report["streams_per_core"] >= 1
    assert report["processes_for_users"] >= 1
    assert "streams per core at ITL" in proc.stdout
    assert "-- steady: 96 requests (0 failed), truth: simulator" in proc.stdout


def test_issue19_selfcheck_refuses_more_processes_than_users():
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", "selfcheck", "--users", "2", "--processes", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=False,
    )
    assert proc.returncode == 2
    assert "--processes must be between 1 and --users (2), got 3" in proc.stderr


# In the timing pass: it asserts how well the client's times match the wire. Beside the parallel pass
# and a CPU hog (2026-12-07) 2 of 32 paired requests were off by more than their read lag + 1 ms.
@pytest.mark.timing
@pytest.mark.skipif(not capture_available(), reason="needs tcpdump and root to capture loopback")
def test_issue19_selfcheck_against_a_packet_capture_pairs_requests_and_the_lag_bounds_their_error(tmp_path):
    out = tmp_path / "selfcheck.json"
    proc = subprocess.run(
        [sys.executable, "-m", "llmload", "selfcheck", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO_ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for phase in json.loads(out.read_text())["phases"]:
        assert phase["truth"] == "capture", phase["notes"]
        assert phase["paired_requests"] >= 0.9 * phase["requests"]
        # the per-request read lag bounds the TTFT error (a few sends may leave late: not a read's lag)
        assert phase["uncovered_requests"] <= 0.05 * phase["paired_requests"]
        assert phase["ttft_error_max_s"] >= phase["ttft_error_mean_s"]
