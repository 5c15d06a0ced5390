"""Server metrics: parsing and mapping of each server kind (fixtures in server_metrics/, each names its source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.errors import ServerMetricsError
from llmload.servermetrics import (
    BucketCounts,
    Endpoint,
    ServerKind,
    ServerRun,
    cross_check,
    parse_snapshot,
    summarise,
)
from llmload.servermetrics.names import llm_looking
from llmload.servermetrics.snapshot import _lines

FIXTURES = Path(__file__).parent / "server_metrics"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_parse_vllm_v1_names_filtered_by_model():
    snap = parse_snapshot(fixture("vllm_v1.txt"), model="m")
    assert snap.kind is ServerKind.VLLM
    assert snap.values["running_requests"] == 7
    assert snap.values["waiting_requests"] == 2
    assert snap.values["kv_cache_usage"] == pytest.approx(0.42)
    assert snap.values["prompt_tokens"] == 1000
    assert snap.values["generation_tokens"] == 4096
    assert snap.values["preemptions"] == 3
    assert snap.values["requests_succeeded"] == 32  # summed over finished_reason
    assert snap.names["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert snap.names["itl_s"] == "vllm:inter_token_latency_seconds"
    ttft = snap.histograms["ttft_s"]
    assert ttft.count == 32
    assert ttft.sum == pytest.approx(0.9)
    assert ttft.upper_bounds == (0.01, 0.02, 0.04, float("inf"))
    assert snap.raw["vllm:prompt_tokens_total"] == 1000  # raw names stay available


def test_parse_vllm_without_model_sums_every_model():
    snap = parse_snapshot(fixture("vllm_v1.txt"))
    assert snap.values["prompt_tokens"] == 1000 + 99999
    assert snap.values["running_requests"] == 107
    assert snap.values["kv_cache_usage"] == pytest.approx((0.42 + 0.99) / 2)  # a usage is averaged, not summed


def test_parse_vllm_unknown_model_keeps_all_and_says_so():
    snap = parse_snapshot(fixture("vllm_v1.txt"), model="nope")
    assert snap.values["prompt_tokens"] == 1000 + 99999
    assert "model_name='nope'" in snap.notes[0]


def test_parse_vllm_v0_old_names():
    snap = parse_snapshot(fixture("vllm_v0.txt"), model="m")
    assert snap.kind is ServerKind.VLLM
    assert snap.values["kv_cache_usage"] == 0.25
    assert snap.names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert snap.values["prefix_cache_hit_ratio"] == 0.5
    assert snap.names["itl_s"] == "vllm:time_per_output_token_seconds"
    assert snap.histograms["itl_s"].count == 792


def test_parse_sglang():
    snap = parse_snapshot(fixture("sglang.txt"), model="meta-llama/Llama-3.1-8B-Instruct")
    assert snap.kind is ServerKind.SGLANG
    assert snap.values["running_requests"] == 12
    assert snap.values["waiting_requests"] == 3
    assert snap.values["kv_cache_usage"] == pytest.approx(0.28)
    assert snap.values["prefix_cache_hit_ratio"] == pytest.approx(0.0075)
    assert snap.values["prompt_tokens"] == 8128902
    assert snap.values["generation_tokens"] == 7557572
    assert snap.values["preemptions"] == 5
    assert set(snap.histograms) == {"ttft_s", "itl_s", "e2e_s", "queue_s"}


def test_parse_tgi_tokens_from_length_histograms():
    snap = parse_snapshot(fixture("tgi.txt"))
    assert snap.kind is ServerKind.TGI
    assert snap.values["running_requests"] == 5
    assert snap.values["waiting_requests"] == 1
    assert snap.values["prompt_tokens"] == 1500
    assert snap.values["generation_tokens"] == 2560
    assert snap.values["requests_succeeded"] == 20
    assert "ttft_s" not in snap.histograms
    assert snap.histograms["tpot_s"].mean() == pytest.approx(0.03)


def test_parse_llamacpp_recorded():
    snap = parse_snapshot(fixture("llamacpp.txt"), model="tiny")
    assert snap.kind is ServerKind.LLAMACPP
    assert snap.values["prompt_tokens"] == 571
    assert snap.values["prompt_cached_tokens"] == 547
    assert snap.values["generation_tokens"] == 10292
    assert snap.values["running_requests"] == 0
    assert snap.values["waiting_requests"] == 0
    assert "kv_cache_usage" not in snap.values  # this build has no kv_cache_usage_ratio
    assert snap.histograms == {}


def test_parse_dcgm_units():
    snap = parse_snapshot(fixture("dcgm.txt"))
    assert snap.kind is ServerKind.DCGM
    assert snap.values["gpu_utilization"] == pytest.approx(0.8)  # mean of 90% and 70%
    assert snap.values["gpu_memory_used_bytes"] == 3072 * 2**20
    assert snap.values["gpu_power_w"] == pytest.approx(651.0)


def test_parse_unknown_server_kind():
    snap = parse_snapshot("# TYPE foo_total counter\nfoo_total 3\n")
    assert snap.kind is ServerKind.UNKNOWN
    assert snap.values == {}
    assert snap.raw["foo_total"] == 3


@pytest.mark.parametrize("text", ["<html><body>hello</body></html>", "", "# just a comment\n"])
def test_parse_rejects_non_prometheus_text(text):
    with pytest.raises(ServerMetricsError, match="/metrics"):
        parse_snapshot(text)


def vllm_text(prompt: float, gen: float, ttft_buckets: tuple[float, float, float], ttft_sum: float, running=1.0):
    b1, b2, inf = ttft_buckets
    return f"""# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{model_name="m"}} {gen}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} {running}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="m"}} {b1}
vllm:time_to_first_token_seconds_bucket{{le="0.2",model_name="m"}} {b2}
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {inf}
vllm:time_to_first_token_seconds_sum{{model_name="m"}} {ttft_sum}
vllm:time_to_first_token_seconds_count{{model_name="m"}} {inf}
"""


def test_server_run_counter_deltas_survive_a_reset():
    run = ServerRun()
    run.add(parse_snapshot(vllm_text(100, 1000, (0, 0, 0), 0)), sample_gauges=False)
    run.add(parse_snapshot(vllm_text(150, 1500, (5, 10, 10), 1.5)), sample_gauges=True)
    run.add(parse_snapshot(vllm_text(20, 200, (1, 2, 2), 0.3)), sample_gauges=True)  # restarted server
    run.add(parse_snapshot(vllm_text(30, 300, (1, 3, 3), 0.45)), sample_gauges=False)
    assert run.counters["prompt_tokens"] == 50 + 20 + 10
    assert run.counters["generation_tokens"] == 500 + 200 + 100
    ttft = run.histograms["ttft_s"]
    assert ttft.count == 13
    assert ttft.cumulative == (6, 13, 13)
    assert ttft.sum == pytest.approx(1.95)


def test_server_run_gauges_mean_and_max_over_sampled_snapshots_only():
    run = ServerRun()
    for running, sample in ((0, False), (4, True), (8, True), (0, False)):
        run.add(parse_snapshot(vllm_text(0, 0, (0, 0, 0), 0, running=running)), sample_gauges=sample)
    assert run.gauge_summary("running_requests") == {"mean": 6.0, "max": 8.0, "samples": 2}
    assert run.gauge_summary("kv_cache_usage") == {"mean": None, "max": None, "samples": 0}


def test_bucket_quantile_interpolates_like_histogram_quantile():
    hist = BucketCounts((0.1, 0.2, float("inf")), (50, 100, 100), 10.0, 100)
    assert hist.quantile(0.5) == pytest.approx(0.1)
    assert hist.quantile(0.25) == pytest.approx(0.05)
    assert hist.quantile(0.75) == pytest.approx(0.15)
    tail = BucketCounts((0.1, float("inf")), (1, 10), 10.0, 10)
    assert tail.quantile(0.99) == pytest.approx(0.1)  # in +Inf: the highest finite bound
    assert BucketCounts((0.1,), (0,), 0.0, 0).quantile(0.5) is None


def run_of(*texts: str) -> Endpoint:
    endpoint = Endpoint(url="http://127.0.0.1:1/metrics", start_ok=True, end_ok=True)
    for text in texts:
        endpoint.run.add(parse_snapshot(text, model="m"), sample_gauges=False)
    return endpoint


def test_summarise_and_cross_check_equal_tokens_and_ttft_difference():
    server = summarise([run_of(vllm_text(100, 1000, (0, 0, 0), 0), vllm_text(150, 1500, (5, 10, 10), 1.0))])
    assert server is not None
    assert server["kind"] == "vllm"
    assert server["prompt_tokens"] == 50
    assert server["generation_tokens"] == 500
    assert server["prompt_cached_tokens"] is None
    assert server["latency"]["ttft_s"]["mean"] == pytest.approx(0.1)
    assert server["latency"]["e2e_s"] is None
    check = cross_check(server, prompt_tokens=50, completion_tokens=500, ttft_mean_s=0.104, ttft_p50_s=0.103)
    assert check["tokens"] == "client = server"
    assert check["ttft_client_minus_server_s"]["mean"] == pytest.approx(0.004)
    # the server's p50 lies somewhere in its (0, 0.1] bucket: a 3 ms difference is finer than that
    assert check["ttft_client_minus_server_s"]["p50"] is None
    assert check["ttft_client_minus_server_s"]["p50_resolution_s"] == pytest.approx(0.1)
    far = cross_check(server, prompt_tokens=50, completion_tokens=500, ttft_mean_s=0.35, ttft_p50_s=0.3)
    assert far["ttft_client_minus_server_s"]["p50"] == pytest.approx(0.3 - 0.1)


def test_cross_check_names_the_difference_and_a_shared_server():
    server = summarise([run_of(vllm_text(0, 0, (0, 0, 0), 0), vllm_text(60, 600, (0, 0, 0), 0))])
    check = cross_check(server, prompt_tokens=50, completion_tokens=500, ttft_mean_s=None, ttft_p50_s=None)
    assert check["prompt_tokens_diff"] == -10
    assert check["generation_tokens_diff"] == -100
    assert "shared server" in check["tokens"]
    assert check["ttft_client_minus_server_s"] is None  # no request in the server's TTFT histogram


def test_cross_check_llamacpp_prompt_cache_accounting():
    def text(prompt: int, cached: int, gen: int) -> str:
        return (
            f"llamacpp:prompt_tokens_total {prompt}\nllamacpp:prompt_tokens_cached_total {cached}\n"
            f"llamacpp:tokens_predicted_total {gen}\n"
        )

    server = summarise([run_of(text(0, 0, 0), text(40, 60, 300))])
    assert server["prefix_cache_hit_ratio"] == pytest.approx(0.6)
    check = cross_check(server, prompt_tokens=100, completion_tokens=300, ttft_mean_s=0.1, ttft_p50_s=0.1)
    assert "prompt client +60" in check["tokens"]
    assert "cache" in check["tokens"]


def test_summarise_none_when_nothing_answered():
    assert summarise([Endpoint(url="http://127.0.0.1:1/metrics", failed_scrapes=2, error="timed out")]) is None


def test_parse_sim_without_vllm_names_reads_its_ground_truth():
    text = (
        'llmload_sim_prompt_tokens_total{endpoint="/v1/completions"} 10\n'
        'llmload_sim_prompt_tokens_total{endpoint="/v1/chat/completions"} 5\n'
        'llmload_sim_completion_tokens_total{endpoint="/v1/completions"} 7\n'
        "llmload_sim_requests_running 3\n"
    )
    snap = parse_snapshot(text, model="m")
    assert snap.kind is ServerKind.SIM
    assert snap.values["prompt_tokens"] == 15
    assert snap.values["generation_tokens"] == 7
    assert snap.names["running_requests"] == "llmload_sim_requests_running"


def test_parse_skips_nan_values_so_results_stay_valid_json():
    snap = parse_snapshot('vllm:kv_cache_usage_perc{model_name="m"} NaN\nvllm:num_requests_running{model_name="m"} 2\n')
    assert "kv_cache_usage" not in snap.values
    assert snap.values["running_requests"] == 2


# ── NC-24: names by family, not by exact spelling ───────────────────────────
def sglang_text(sep: str, requests: int) -> str:
    """NC-24's page after ``requests`` requests of 5 prompt / 2 generation tokens, spelled ``sglang{sep}``."""
    p = f"sglang{sep}"
    return (
        f'# TYPE {p}num_running_reqs gauge\n{p}num_running_reqs{{model_name="m"}} 1\n'
        f'# TYPE {p}prompt_tokens_total counter\n{p}prompt_tokens_total{{model_name="m"}} {5 * requests}\n'
        f'# TYPE {p}generation_tokens_total counter\n{p}generation_tokens_total{{model_name="m"}} {2 * requests}\n'
        f'# TYPE {p}num_requests_total counter\n{p}num_requests_total{{model_name="m"}} {requests}\n'
        f"# TYPE {p}time_to_first_token_seconds histogram\n"
        f'{p}time_to_first_token_seconds_bucket{{le="0.1",model_name="m"}} {requests}\n'
        f'{p}time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {requests}\n'
        f'{p}time_to_first_token_seconds_sum{{model_name="m"}} {0.05 * requests}\n'
        f'{p}time_to_first_token_seconds_count{{model_name="m"}} {requests}\n'
    )


@pytest.mark.parametrize("sep", ["_", ":"])  # NC-24 and its control
def test_nc24_sglang_both_spellings_read_as_sglang_and_cross_check_holds(sep):
    snap = parse_snapshot(sglang_text(sep, 4), model="m")
    assert snap.kind is ServerKind.SGLANG
    assert snap.values == {
        "running_requests": 1,
        "prompt_tokens": 20,
        "generation_tokens": 8,
        "requests_succeeded": 4,
    }
    assert snap.names["prompt_tokens"] == f"sglang{sep}prompt_tokens_total"  # the spelling the server used
    assert snap.names["ttft_s"] == f"sglang{sep}time_to_first_token_seconds"
    assert snap.histograms["ttft_s"].count == 4
    assert snap.unmapped == ()
    server = summarise([run_of(sglang_text(sep, 0), sglang_text(sep, 3))])
    assert server is not None
    assert (server["kind"], server["prompt_tokens"], server["generation_tokens"]) == ("sglang", 15, 6)
    assert server["counters"]["requests_succeeded"] == 3
    assert server["latency"]["ttft_s"]["count"] == 3
    check = cross_check(server, prompt_tokens=15, completion_tokens=6, ttft_mean_s=0.06, ttft_p50_s=0.05)
    assert check["tokens"] == "client = server"
    assert check["ttft_client_minus_server_s"]["mean"] == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("text", "kind", "common", "value"),
    [
        ('vllm_prompt_tokens_total{model_name="m"} 7\n', ServerKind.VLLM, "prompt_tokens", 7),
        ("llamacpp_tokens_predicted_total 9\n", ServerKind.LLAMACPP, "generation_tokens", 9),
        ("tgi:queue_size 2\n", ServerKind.TGI, "waiting_requests", 2),
        ('vllm_kv_cache_usage_perc{model_name="m"} 0.5\n', ServerKind.VLLM, "kv_cache_usage", 0.5),
    ],
)
def test_nc24_every_known_server_read_in_either_spelling(text, kind, common, value):
    snap = parse_snapshot(text, model="m")
    assert snap.kind is kind
    assert snap.values[common] == value


def test_nc24_family_sent_in_both_spellings_is_counted_once():
    text = 'sglang:prompt_tokens_total{model_name="m"} 10\nsglang_prompt_tokens_total{model_name="m"} 10\n'
    snap = parse_snapshot(text, model="m")
    assert snap.values["prompt_tokens"] == 10
    assert snap.names["prompt_tokens"] == "sglang:prompt_tokens_total"


def test_nc24_unknown_llm_families_are_listed_by_name_instead_of_no_token_counters():
    page = (
        "# TYPE myllm_prompt_tokens_total counter\nmyllm_prompt_tokens_total 50\n"
        "# TYPE myllm_generated_tokens_total counter\nmyllm_generated_tokens_total 20\n"
        "# TYPE myllm_ttft_seconds histogram\n"
        'myllm_ttft_seconds_bucket{le="+Inf"} 10\nmyllm_ttft_seconds_sum 1\nmyllm_ttft_seconds_count 10\n'
        "# TYPE myllm_kv_cache_usage gauge\nmyllm_kv_cache_usage 0.3\n"
        "# TYPE http_requests_total counter\nhttp_requests_total 99\n"  # generic: not an LLM family
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n"
        "# TYPE engine_uptime_seconds gauge\nengine_uptime_seconds 3\n"  # not LLM-looking
    )
    snap = parse_snapshot(page)
    assert snap.kind is ServerKind.UNKNOWN
    expected = ("myllm_generated_tokens", "myllm_kv_cache_usage", "myllm_prompt_tokens", "myllm_ttft_seconds")
    assert snap.unmapped == expected
    server = summarise([run_of(page, page)])
    assert server is not None
    assert server["unmapped_families"] == list(expected)
    check = cross_check(server, prompt_tokens=50, completion_tokens=20, ttft_mean_s=None, ttft_p50_s=None)
    assert check["tokens"].startswith("no token counters llmload can read; the page has LLM-looking metrics")
    assert "myllm_generated_tokens, myllm_kv_cache_usage, myllm_prompt_tokens, myllm_ttft_seconds" in check["tokens"]


def test_nc24_known_server_lists_its_unmapped_llm_families_too():
    page = sglang_text("_", 1) + "# TYPE sglang_num_prefill_tokens_total counter\nsglang_num_prefill_tokens_total 4\n"
    snap = parse_snapshot(page, model="m")
    assert snap.kind is ServerKind.SGLANG
    assert snap.unmapped == ("sglang_num_prefill_tokens",)


def test_nc24_page_without_llm_families_keeps_the_plain_verdict():
    server = summarise([run_of("engine_uptime_seconds 1\n", "engine_uptime_seconds 2\n")])
    assert server is not None
    assert server["unmapped_families"] == []
    check = cross_check(server, prompt_tokens=5, completion_tokens=2, ttft_mean_s=None, ttft_p50_s=None)
    assert check["tokens"] == "server has no token counters"


@pytest.mark.parametrize(
    ("names", "kind"),
    [
        (["llmload_sim_requests_running", "vllm:num_requests_running"], ServerKind.SIM),  # the sim's default page
        (["llmload_sim_requests_running", "sglang_num_running_reqs"], ServerKind.SGLANG),  # the sim imitating SGLang
        (["vllm_num_requests_running", "sglang_num_running_reqs"], ServerKind.VLLM),  # precedence as before
        (["DCGM_FI_DEV_GPU_UTIL", "llamacpp_requests_processing"], ServerKind.LLAMACPP),
    ],
)
def test_nc24_detect_by_namespace_in_either_spelling(names, kind):
    text = "".join(f"{name} 1\n" for name in names)
    assert parse_snapshot(text).kind is kind


@pytest.mark.parametrize(
    ("family", "looks"),
    [
        ("trtllm_kv_cache_utilization", True),
        ("lmdeploy_num_running_reqs", True),
        ("engine_gentokens", True),
        ("srv_time_to_first_token_seconds", True),
        ("router_queue_depth", True),
        ("myllm_itl_seconds", True),
        ("http_requests_total", False),
        ("process_resident_memory_bytes", False),
        ("python_gc_objects_collected", False),
        ("llmload_sim_requests_aborted", False),  # the simulator's own ground truth
        ("DCGM_FI_DEV_GPU_UTIL", False),
        ("uptime_seconds", False),
    ],
)
def test_nc24_llm_looking_families(family, looks):
    assert llm_looking(family) is looks


# Server histogram quantiles inside one coarse bucket are estimates: one bucket le=0.1 holding every
# sample, with a sum giving a 20 ms mean, cannot support a 50 ms p50 (no latencies with a 20 ms
# mean have half above 40 ms), nor a client − server p50 difference of a few ms.
def test_servermetrics_coarse_bucket_quantiles_are_ranges_capped_by_the_mean():
    hist = BucketCounts((0.1, float("inf")), (10, 10), 0.2, 10)
    assert hist.quantile(0.5) == pytest.approx(0.05)  # Prometheus' interpolation alone
    p50 = hist.estimate(0.5)
    assert p50 is not None
    assert (p50.value, p50.lower, p50.upper) == (pytest.approx(0.04), 0.0, pytest.approx(0.04))
    p99 = hist.estimate(0.99)
    assert p99 is not None
    assert (p99.value, p99.upper) == (pytest.approx(0.099), 0.1)  # the bucket bound is the tighter cap
    tail = BucketCounts((0.1, float("inf")), (1, 10), 10.0, 10).estimate(0.5)
    assert tail is not None
    assert (tail.value, tail.lower) == (pytest.approx(0.1), 0.1)
    assert tail.upper == pytest.approx(2.0)  # +Inf bucket, capped by mean / (1 - q)
    assert BucketCounts((0.1,), (0,), 0.0, 0).estimate(0.5) is None


def test_servermetrics_coarse_bucket_summary_marks_the_range_and_drops_a_finer_difference():
    from llmload.exporters.console import _server_lines

    coarse = """# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="m"}} {n}
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {n}
vllm:time_to_first_token_seconds_sum{{model_name="m"}} {total}
vllm:time_to_first_token_seconds_count{{model_name="m"}} {n}
"""
    server = summarise([run_of(coarse.format(n=0, total=0), coarse.format(n=10, total=0.2))])
    assert server is not None
    ttft = server["latency"]["ttft_s"]
    assert ttft["mean"] == pytest.approx(0.02)
    assert ttft["p50"] == pytest.approx(0.04)
    assert ttft["p50_range"] == [0.0, pytest.approx(0.04)]
    check = cross_check(server, prompt_tokens=None, completion_tokens=None, ttft_mean_s=0.0211, ttft_p50_s=0.0311)
    assert check["ttft_client_minus_server_s"]["p50"] is None  # not "−8.9 ms" off a 40 ms-wide range
    text = "\n".join(_server_lines({"server": {**server, "cross_check": check}, "tokens": {}}))
    assert "20.00 / 40.00 (in 0.00–40.00)" in text
    assert "finer than the server's 40.00 ms p50 range" in text


def test_cross_check_ttft_over_different_requests_is_not_comparable_and_has_no_network_gloss():
    """Issue 24: requests cancelled at the stop are in the server's TTFT histogram (often with long
    queue waits) but not in the client's successes; the summary printed "-726 ms (network + HTTP +
    client time)". Different request counts: no difference, and the summary says why."""
    from llmload.exporters.console import _server_lines

    server = summarise([run_of(vllm_text(100, 1000, (0, 0, 0), 0), vllm_text(150, 1500, (5, 10, 10), 1.0))])
    assert server is not None
    assert server["latency"]["ttft_s"]["count"] == 10
    check = cross_check(
        server, prompt_tokens=50, completion_tokens=500, ttft_mean_s=0.02, ttft_p50_s=0.02, ttft_count=7
    )
    split = check["ttft_client_minus_server_s"]
    assert (split["mean"], split["p50"]) == (None, None)
    assert (split["client_count"], split["server_count"]) == (7, 10)
    assert "the server timed 10 first tokens, the client 7" in split["not_comparable"]
    text = "\n".join(_server_lines({"server": {**server, "cross_check": check}, "tokens": {}}))
    assert "TTFT client − server:" in text
    assert "not comparable: the server timed 10 first tokens, the client 7" in text
    assert "network + HTTP" not in text
    same = cross_check(
        server, prompt_tokens=50, completion_tokens=500, ttft_mean_s=0.104, ttft_p50_s=0.2, ttft_count=10
    )
    assert same["ttft_client_minus_server_s"]["mean"] == pytest.approx(0.004)
    assert same["ttft_client_minus_server_s"]["not_comparable"] is None
    below = cross_check(
        server, prompt_tokens=50, completion_tokens=500, ttft_mean_s=0.09, ttft_p50_s=0.2, ttft_count=10
    )
    text = "\n".join(_server_lines({"server": {**server, "cross_check": below}, "tokens": {}}))
    assert "-10.00" in text
    assert "network + HTTP" not in text  # a negative difference is not network time


def test_parse_skips_the_buckets_of_histograms_no_mapping_reads_and_keeps_their_count_and_sum():
    """Most of a vLLM page is buckets of histograms nothing reads (prefill time, prompt length...): they are
    not parsed (the parse runs on the event loop), and the snapshot is the one the whole page gives."""
    unread = "".join(
        f'vllm:request_prefill_time_seconds_bucket{{le="{le}",model_name="m"}} {n}\n'
        for le, n in (("0.1", 3), ("1.0", 9), ("+Inf", 10))
    )
    head = "# TYPE vllm:request_prefill_time_seconds histogram\n"
    tail = (
        'vllm:request_prefill_time_seconds_sum{model_name="m"} 4.5\n'
        'vllm:request_prefill_time_seconds_count{model_name="m"} 10\n'
    )
    with_buckets = parse_snapshot(fixture("vllm_v1.txt") + head + unread + tail, model="m")
    without = parse_snapshot(fixture("vllm_v1.txt") + head + tail, model="m")
    assert with_buckets == without
    page = fixture("vllm_v1.txt") + head + unread + tail
    assert not any("prefill_time_seconds_bucket" in line for line in _lines(page, None))  # never parsed
    assert with_buckets.raw["vllm:request_prefill_time_seconds_count"] == 10
    assert with_buckets.histograms["ttft_s"].upper_bounds == (0.01, 0.02, 0.04, float("inf"))  # read ones stay
