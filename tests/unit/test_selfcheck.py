"""selfcheck: the streams-per-core estimate and the spec's checks (the runs: tests/integration/test_selfcheck.py)."""

from __future__ import annotations

import re

import pytest

from llmload.selfcheck import STREAM_CORE_SHARE, SelfcheckSpec, format_report, streams_per_core


def test_issue19_streams_per_core_is_the_core_share_over_one_streams_cpu():
    # 20 us per chunk at ITL 10 ms: one stream takes 0.2% of a core; 70% of a core holds 350
    assert STREAM_CORE_SHARE == 0.7
    assert streams_per_core(20.0, 10.0) == 350
    assert streams_per_core(20.0, 1.0) == 35
    assert streams_per_core(None, 10.0) is None
    assert streams_per_core(1e6, 1.0) == 1  # never 0: one stream always runs


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (SelfcheckSpec(users=0), "--users must be at least 1, got 0"),
        (SelfcheckSpec(users=4, processes=5), "--processes must be between 1 and --users (4), got 5"),
        (SelfcheckSpec(itl_ms=0), "--itl must be > 0"),
        (SelfcheckSpec(max_tokens=1), "--max-tokens must be at least 2"),
    ],
)
def test_issue19_selfcheck_spec_names_the_bad_value(spec, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        spec.check()


def test_issue19_selfcheck_defaults_burst_one_request_per_user_and_steady_six():
    spec = SelfcheckSpec(users=10)
    assert (spec.burst, spec.steady) == (10, 60)


def test_issue19_selfcheck_report_names_truth_error_lag_and_the_processes_needed():
    phase = {
        "name": "steady", "requests": 600, "failed": 0, "truth": "capture", "paired_requests": 598,
        "uncovered_requests": 0,
        "client_ttft_mean_s": 0.0512, "truth_ttft_mean_s": 0.0505, "ttft_error_mean_s": 0.0007,
        "ttft_error_p99_s": 0.0031, "ttft_error_max_s": 0.012, "read_lag_p99_s": 0.0009,
        "read_lag_max_s": 0.012, "lagged_requests": 1, "client_saturated": True, "cpu_us_per_chunk": 25.0,
        "notes": [],
    }  # fmt: skip
    report = {
        "spec": {"users": 1000, "processes": 1, "ttft_ms": 50.0, "itl_ms": 10.0, "max_tokens": 128},
        "machine": {"cpus": 2, "load_average_1m": 0.5},
        "phases": [phase],
        "streams_per_core": 280,
        "stream_core_share": 0.7,
        "processes_for_users": 4,
        "steady_held": False,
    }
    text = format_report(report)
    assert "-- steady: 600 requests (0 failed), truth: capture, 598 requests paired" in text
    assert "client - truth mean +0.70, P99 +3.10, max +12.00 ms" in text
    assert "requests maybe > 10 ms off: 1; client_saturated: true; CPU 25.0 us/chunk" in text
    assert "requests off by more than their own read lag + 1 ms: 0 of 598" in text
    assert "about 280" in text
    assert "1000 users need --processes 4 or more (one core each) (the estimate alone says 4" not in text
    assert "1000 users need --processes 4 or more (one core each)" in text
    assert (
        "WARNING: the steady phase was flagged (read lag or CPU): with 1000 users per process, events piled up" in text
    )
    # the estimate (32 users at 84 streams per core: one process) and what the run measured (one did not hold)
    small = {**report, "spec": {**report["spec"], "users": 32}, "streams_per_core": 84, "processes_for_users": 2}
    assert "32 users need --processes 2 or more (one core each) (the estimate alone says 1; 1 did not hold them" in (
        format_report(small)
    )
