"""Sweep parsing and the saturation knee."""

import math

import pytest

from llmload.errors import ConfigError
from llmload.sweep import (
    SweepSpec,
    find_knee,
    parse_sweep,
    rate_sweep_users,
    remove_step_files,
    step_file,
    step_section,
    sweep_document,
    sweep_table,
)


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


def test_sweep_knee_of_an_embeddings_sweep_follows_inputs_per_s():
    def embeddings_step(n, inputs_s):
        return {"step": n, "throughput": {"output_tokens_per_s": None, "inputs_per_s": inputs_s},
                "latency": {"ttft_s": {"p99": None}}}  # fmt: skip

    steps = [embeddings_step(1, 50.0), embeddings_step(4, 190.0), embeddings_step(16, 192.0)]
    knee = find_knee(steps)
    assert knee is not None
    assert knee["step"] == 4
    assert knee["reason"].startswith("inputs/s rose only +1.1%")
    assert find_knee(steps[:2]) is None


def test_sweep_no_knee_while_throughput_rises():
    assert find_knee([step(1, 100, 0.05), step(8, 700, 0.06)]) is None


# Issue 14, P4: the README's rate sweep ran with Locust's default of 1 user.
@pytest.mark.parametrize(
    ("sweep", "users"),
    [("rate=5,inf", "64"), ("rate=5,10,20", "200"), ("rate=inf", "64"), ("rate=0.5", "64")],
)
def test_p4_rate_sweep_without_users_sets_enough_users_itself(sweep, users):
    args = ["-f", "locustfiles/chat.py", "-H", "http://127.0.0.1:8000", "-t", "4s"]
    assert rate_sweep_users(parse_sweep(sweep), args) == ["-u", users, "-r", users]


def test_p4_rate_sweep_refuses_too_few_users_and_names_the_number():
    with pytest.raises(ConfigError, match=r"-u 1 is too few users: .* needs 200 users in flight\. Pass -u 200"):
        rate_sweep_users(parse_sweep("rate=5,20"), ["-t", "4s", "-u", "1"])


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["-u", "300"], ["-r", "300"]),
        (["--users=300", "-r", "10"], []),
        (["-u300", "--spawn-rate", "50"], []),
    ],
)
def test_p4_rate_sweep_keeps_enough_users_given_and_spawns_them_at_once(args, extra):
    assert rate_sweep_users(parse_sweep("rate=5,20,inf"), args, max_e2e_s=10) == extra


def test_p4_users_sweep_needs_no_extra_arguments():
    assert rate_sweep_users(parse_sweep("users=1,8"), ["-u", "1"]) == []


def test_p4_rate_sweep_refuses_a_non_positive_max_e2e():
    with pytest.raises(ConfigError, match="--max-e2e must be a positive number"):
        rate_sweep_users(parse_sweep("rate=5"), [], max_e2e_s=0)


def test_p4_knee_ignores_steps_the_client_limited():
    steps = [
        step_section(5.0, {**step(5, 1000, 0.05), "load": {"rate_shortfall": False}}),
        step_section(10.0, {**step(10, 1010, 0.05), "load": {"rate_shortfall": True}}),  # the client's ceiling
        step_section(20.0, {**step(20, 4000, 0.06), "load": {"rate_shortfall": False}}),
    ]
    document = sweep_document(parse_sweep("rate=5,10,20"), steps, ttft_p99_limit_s=None)
    assert [s["client_limited"] for s in document["steps"]] == [False, True, False]
    assert document["knee"] is None  # 1000 -> 4000 tok/s: no knee; 10 would have been an artefact


# Issue 14, P7: per-step files are named, documented, and none from an earlier sweep is left behind.
def test_p7_sweep_step_files_are_named_by_kind_and_step(tmp_path):
    out = tmp_path / "sweep.json"
    assert step_file(out, "rate", math.inf).name == "sweep.rate-inf.json"
    assert step_file(out, "users", 64.0).name == "sweep.users-64.json"


def test_p7_sweep_removes_step_files_of_an_earlier_sweep(tmp_path):
    out = tmp_path / "sweep.json"
    stale = [tmp_path / "sweep.rate-99.json", tmp_path / "sweep.users-3.json"]
    keep = [tmp_path / "other.rate-5.json", tmp_path / "sweep.json"]
    for path in stale + keep:
        path.write_text("{}")
    assert remove_step_files(out) == stale
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.rate-5.json", "sweep.json"]


def test_p4_unlimited_step_is_written_as_inf_text_because_json_has_no_infinity():
    section = step_section(math.inf, {"load": {"rate_shortfall": False}})
    assert section["step"] == "inf"
    assert SweepSpec("rate", (math.inf,)).locust_args(math.inf) == ["--request-rate", "inf"]


def _step(step, rps, tok, load):
    return {
        "step": step,
        "client_limited": bool(load.get("rate_shortfall")),
        "throughput": {"requests_per_s": rps, "output_tokens_per_s": tok},
        "latency": {"ttft_s": {"p99": 0.25}, "e2e_s": {"p50": None}},
        "load": load,
    }


def test_sweep_table_of_a_rate_sweep_shows_target_and_achieved_rate():
    """Issue 24: the table showed req/s completed but neither the step's target nor the rate it sent at,
    so a step short of its schedule looked like the server's limit."""
    steps = [
        _step(5.0, 4.9, 310.0, {"mode": "open", "target_rate_per_s": 5.0, "achieved_rate_per_s": 5.01}),
        _step(40.0, 22.0, 1400.0, {"mode": "open", "target_rate_per_s": 40.0, "achieved_rate_per_s": 23.5,
                                   "rate_shortfall": True}),
        _step("inf", 30.0, 1900.0, {"mode": "open", "target_rate_per_s": None, "unlimited_rate": True,
                                    "achieved_rate_per_s": 31.25}),
    ]  # fmt: skip
    lines = sweep_table("rate", steps)
    assert lines[0].split() == ["step", "target/s", "sent/s", "req/s", "out", "tok/s", "TTFT", "p99", "ms", "E2E",
                                "p50", "ms"]  # fmt: skip
    assert lines[1].split() == ["5", "5.00", "5.01", "4.90", "310.0", "250.0", "n/a"]
    assert lines[2].split() == ["40", "40.00", "23.50", "22.00", "1400.0", "250.0", "n/a", "(client-limited)"]
    assert lines[3].split() == ["inf", "inf", "31.25", "30.00", "1900.0", "250.0", "n/a"]


def test_sweep_table_of_a_users_sweep_has_no_rate_columns_and_no_invented_zeros():
    lines = sweep_table("users", [_step(8.0, None, 100.0, {"mode": "closed"})])
    assert "target/s" not in lines[0]
    assert lines[1].split() == ["8", "n/a", "100.0", "250.0", "n/a"]
