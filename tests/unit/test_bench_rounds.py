"""`bench/run_bench.py --rounds`: each round's CPU ratio pairs the two clients of that round."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def run_bench():
    sys.path.insert(0, str(BENCH))  # run_bench imports its sibling benchlib
    try:
        spec = importlib.util.spec_from_file_location("run_bench_under_test", BENCH / "run_bench.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("run_bench_under_test", None)
        sys.path.remove(str(BENCH))


def _row(run_bench, client: str, round_: int, cpu_s: float, rss_mib: float = 100.0):
    result = run_bench.ClientResult(
        requests=10, failures=0, chunks=1_000_000, wall_s=1.0, ttft_mean_s=None, ttft_p99_s=None, read_lag_p99_s=None
    )
    return run_bench.Row(
        scenario="A",
        client=client,
        usage=run_bench.Usage(cpu_s=cpu_s, peak_rss_mib=rss_mib),
        base_cpu_s=0.0,
        result=result,
        sim_chunks=float("nan"),
        server_ttft_mean_s=None,
        server_ttft_p99_s=None,
        round=round_,
    )


def test_one_round_prints_its_two_ratios(run_bench):
    rows = [_row(run_bench, "llmload", 1, 6.0, 120.0), _row(run_bench, "plain Locust", 1, 10.0)]
    assert run_bench.ratio_lines(rows, ["A"]) == ["A: llmload / plain: CPU per chunk 0.60x, peak RSS 1.20x"]


def test_rounds_pair_each_llmload_run_with_the_plain_run_of_its_round_and_give_the_median(run_bench):
    # round 2 ran plain first: the order of the rows does not pair them, the round does
    rows = [
        _row(run_bench, "llmload", 1, 5.0),
        _row(run_bench, "plain Locust", 1, 10.0),
        _row(run_bench, "plain Locust", 2, 20.0),
        _row(run_bench, "llmload", 2, 8.0),
        _row(run_bench, "llmload", 3, 9.0),
        _row(run_bench, "plain Locust", 3, 15.0),
    ]
    assert rows[3].label == "llmload #2"
    assert rows[0].label == "llmload"
    (line,) = run_bench.ratio_lines(rows, ["A"])
    assert line == (
        "A: llmload / plain, 3 rounds: CPU per chunk median 0.50x (0.40-0.60x; by round 0.50 0.40 0.60),"
        " peak RSS median 1.00x"
    )
