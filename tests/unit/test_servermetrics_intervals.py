"""Server metrics per time-series interval: gauges, token deltas and rates from rounds of reads (pure)."""

from __future__ import annotations

import pytest

from llmload.servermetrics import SERVER_COLUMNS, Reading, ServerIntervals, ServerRun, parse_snapshot

TARGET = "http://127.0.0.1:8000/metrics"
DCGM = "http://127.0.0.1:9400/metrics"


def vllm(prompt: int, gen: int, running: int = 0, kv: float = 0.0) -> str:
    return (
        f"vllm:prompt_tokens_total {prompt}\n"
        f"vllm:generation_tokens_total {gen}\n"
        f"vllm:num_requests_running {running}\n"
        f"vllm:kv_cache_usage_perc {kv}\n"
    )


def read(url: str, text: str | None, at_s: float, duration_s: float = 0.01) -> Reading:
    snapshot = None if text is None else parse_snapshot(text)
    return Reading(url, snapshot, at_s, duration_s, None if text else "no answer within 0.5 s")


def test_intervals_columns_are_the_round_gauges_and_the_counter_increase_over_the_reads_span():
    intervals = ServerIntervals()
    intervals.baseline([read(TARGET, vllm(100, 1000), at_s=-0.2)])
    cols = intervals.add(0, [read(TARGET, vllm(150, 1400, running=4, kv=0.25), at_s=1.8, duration_s=0.03)])
    assert set(cols) == set(SERVER_COLUMNS)
    assert cols["server_running_requests"] == 4
    assert cols["server_kv_cache_usage"] == 0.25
    assert cols["server_waiting_requests"] is None  # the server has no such gauge
    assert cols["server_prompt_tokens"] == 50
    assert cols["server_generation_tokens"] == 400
    assert cols["server_generation_tokens_per_s"] == pytest.approx(400 / 2.0)  # over the reads' 2 s, not interval_s
    assert cols["server_scrape_s"] == 0.03
    assert cols["server_scrape_failures"] == 0


def test_intervals_deltas_add_up_to_the_run_deltas_across_a_failed_read_and_a_reset():
    texts = [vllm(0, 0), vllm(10, 100), None, vllm(30, 300), vllm(5, 40), vllm(9, 90)]  # reset after 300
    intervals, run = ServerIntervals(), ServerRun()
    intervals.baseline([read(TARGET, texts[0], 0.0)])
    run.add(parse_snapshot(texts[0]), sample_gauges=False)
    per_interval = []
    for i, text in enumerate(texts[1:]):
        per_interval.append(intervals.add(i, [read(TARGET, text, i + 1.0)]))
        if text is not None:
            run.add(parse_snapshot(text), sample_gauges=True)
    gen = [c["server_generation_tokens"] for c in per_interval]
    assert gen == [100, None, 200, 40, 50]  # the failed round is null; the next one covers both intervals
    assert per_interval[1]["server_scrape_failures"] == 1
    assert per_interval[2]["server_generation_tokens_per_s"] == pytest.approx(200 / 2.0)
    assert sum(g or 0 for g in gen) == run.counters["generation_tokens"] == 390
    assert sum(c["server_prompt_tokens"] or 0 for c in per_interval) == run.counters["prompt_tokens"]


def test_intervals_two_rounds_for_one_interval_add_up_and_rates_are_recomputed():
    intervals = ServerIntervals()
    intervals.baseline([read(TARGET, vllm(0, 0), 0.0)])
    intervals.add(3, [read(TARGET, vllm(0, 100, running=8), 1.0)])
    cols = intervals.add(3, [read(TARGET, vllm(0, 130, running=2), 1.5, duration_s=0.2)])
    assert cols["server_generation_tokens"] == 130
    assert cols["server_generation_tokens_per_s"] == pytest.approx(130 / 1.5)
    assert cols["server_running_requests"] == 2  # the later round's gauge
    assert cols["server_scrape_s"] == 0.2
    assert intervals.columns(3) == cols
    assert intervals.columns(4) is None


def test_intervals_gpu_gauges_come_from_the_dcgm_endpoint_and_counters_from_the_target():
    intervals = ServerIntervals()
    dcgm = "DCGM_FI_DEV_GPU_UTIL 87\nDCGM_FI_DEV_FB_USED 1024\nDCGM_FI_DEV_POWER_USAGE 312.5\n"
    intervals.baseline([read(TARGET, vllm(0, 0), 0.0), read(DCGM, dcgm, 0.0)])
    cols = intervals.add(0, [read(TARGET, vllm(1, 10), 1.0), read(DCGM, dcgm, 1.0, duration_s=0.4)])
    assert cols["server_gpu_utilization"] == pytest.approx(0.87)
    assert cols["server_gpu_memory_used_bytes"] == 1024 * 2**20
    assert cols["server_gpu_power_w"] == 312.5
    assert cols["server_generation_tokens"] == 10
    assert cols["server_scrape_s"] == 0.4  # the round's slowest read


def test_intervals_first_read_of_an_endpoint_is_its_baseline_not_a_delta():
    intervals = ServerIntervals()
    intervals.baseline([read(TARGET, None, 0.0)])  # the start read failed
    first = intervals.add(0, [read(TARGET, vllm(500, 5000, running=3), 1.0)])
    assert first["server_generation_tokens"] is None  # no earlier read to subtract (ServerRun does the same)
    assert first["server_running_requests"] == 3
    second = intervals.add(1, [read(TARGET, vllm(500, 5100), 2.0)])
    assert second["server_generation_tokens"] == 100


def test_intervals_round_where_every_read_failed_has_null_columns_but_counts_the_failure():
    intervals = ServerIntervals()
    cols = intervals.add(0, [read(TARGET, None, 1.0, duration_s=0.25)])
    assert {k for k, v in cols.items() if v is not None} == {"server_scrape_s", "server_scrape_failures"}
    assert cols["server_scrape_failures"] == 1
    assert cols["server_scrape_s"] == 0.25
