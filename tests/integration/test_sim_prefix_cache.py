"""The simulator's prefix cache over HTTP: cached tokens in usage, skipped prefill, vLLM-named counters."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_sim import completion, metric_sum, metrics, post_json, stream

pytestmark = [pytest.mark.integration]

PROMPT = " ".join(f"w{i}" for i in range(2000))  # 2,000 tokens under the sim's token model


@pytest.fixture
def cache_sim(sim_server) -> str:
    return sim_server("--prefix-cache-blocks", "1000", "--prefill-ms-per-token", "0.1", "--decode-step-ms", "2")


def test_issue21_sim_shared_prefix_skips_prefill_and_is_reported_as_cached(cache_sim):
    first = stream(cache_sim, "/v1/completions", completion(prompt=PROMPT, max_tokens=2, stream=True,
                                                             stream_options={"include_usage": True}))  # fmt: skip
    again = stream(cache_sim, "/v1/completions", completion(prompt=PROMPT + " tail", max_tokens=2, stream=True,
                                                             stream_options={"include_usage": True}))  # fmt: skip
    usage = [json.loads(data)["usage"] for _, data in (first[-2], again[-2])]
    assert usage[0]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert usage[1]["prompt_tokens_details"] == {"cached_tokens": 2000 // 16 * 16}
    # prefill is 0.1 ms per uncached token: 200 ms for the first, under 1 ms of it for the second
    assert first[0][0] - again[0][0] > 0.15, (first[0][0], again[0][0])
    whole = post_json(cache_sim, "/v1/completions", completion(prompt=PROMPT, max_tokens=1))
    assert whole["usage"]["prompt_tokens_details"] == {"cached_tokens": 2000 - 16}  # the last block is recomputed
    samples = metrics(cache_sim)
    assert metric_sum(samples, "vllm:prefix_cache_queries_total") == 2000 + 2001 + 2000
    assert metric_sum(samples, "vllm:prefix_cache_hits_total") == 0 + 2000 + 1984
    assert metric_sum(samples, "llmload_sim_prompt_cached_tokens_total") == 0 + 2000 + 1984


def test_issue21_sim_without_a_prefix_cache_reports_no_cached_tokens(sim_server):
    url = sim_server()
    reply = post_json(url, "/v1/completions", completion(max_tokens=1))
    assert "prompt_tokens_details" not in reply["usage"]
    assert metric_sum(metrics(url), "vllm:prefix_cache_queries_total") == 0
