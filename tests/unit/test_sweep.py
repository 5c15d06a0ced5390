"""Sweep parsing and the saturation knee."""

import math

import pytest

from llmload.errors import ConfigError
from llmload.sweep import SweepSpec, find_knee, parse_sweep


def test_sweep_parses_users_and_rates():
    assert parse_sweep("users=1,8,64") == SweepSpec("users", (1.0, 8.0, 64.0))
    assert parse_sweep("rate=5, 10,inf") == SweepSpec("rate", (5.0, 10.0, math.inf))
    assert SweepSpec("users", (8.0,)).locust_args(8.0) == ["-u", "8", "-r", "8"]
    assert SweepSpec("rate", (math.inf,)).locust_args(math.inf) == ["--request-rate", "inf"]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("users", "must look like users=1,8,64"),
        ("qps=1,2", "must look like users=1,8,64"),
        ("users=0,4", "positive integers"),
        ("users=8,4", "must increase"),
        ("rate=0,5", "--request-rate inf for unlimited"),
    ],
)
def test_sweep_rejects_bad_specs(raw, needle):
    with pytest.raises(ConfigError, match=needle.replace("+", r"\+")):
        parse_sweep(raw)


def step(n, tok_s, ttft_p99):
    return {"step": n, "throughput": {"output_tokens_per_s": tok_s}, "latency": {"ttft_s": {"p99": ttft_p99}}}


def test_sweep_knee_where_throughput_stops_rising():
    steps = [step(1, 100, 0.05), step(8, 700, 0.06), step(64, 3000, 0.2), step(256, 3050, 1.5)]
    knee = find_knee(steps)
    assert knee is not None
    assert knee["step"] == 64
    assert "+1.7%" in knee["reason"]


def test_sweep_knee_where_ttft_p99_passes_the_limit():
    steps = [step(1, 100, 0.05), step(8, 700, 0.06), step(64, 3000, 0.9)]
    assert find_knee(steps, ttft_p99_limit_s=0.5) == {
        "step": 8,
        "reason": "TTFT p99 0.900 s at step 64 exceeds 0.5 s",
    }


def test_sweep_no_knee_while_throughput_rises():
    assert find_knee([step(1, 100, 0.05), step(8, 700, 0.06)]) is None
