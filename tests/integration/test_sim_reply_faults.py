"""Reply faults of ``llmload sim`` (aborted and degenerate replies) through llmload's real client.

The tests send requests with ``StreamingClient`` over ``GeventHTTPTransport``
(whole runs: ``tests/edge/test_sim_runs.py``). Each checks the client's figures
against the simulator's own ground truth (``llmload_sim_faults_injected_total``,
completed requests and token counters).
"""

from __future__ import annotations

import pytest

from llmload.net.transport import GeventHTTPTransport
from llmload.request.client import StreamingClient
from llmload.request.degenerate import DEGENERATE_REPEATED, DEGENERATE_SAME_TEXT, SameTextWatch
from llmload.request.payloads import LLMRequest, build_chat_request
from llmload.request.record import Outcome, RequestRecord
from tests.integration.test_sim import metric_sum, metrics
from tests.integration.test_sim_faults import (
    MODEL,
    TIMEOUTS,
    categories,
    chat_request,
    completed,
    completion_request,
    injected,
    run_requests,
)
from tests.integration.test_sim_faults import sim as sim_fixture

sim = sim_fixture  # the simulator factory fixture of the fault tests

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"


def chat_about(topic: str, max_tokens: int = 32, *, stream: bool = True) -> LLMRequest:
    return build_chat_request(
        model=MODEL,
        messages=[{"role": "user", "content": f"tell me about {topic}"}],
        max_tokens=max_tokens,
        stream=stream,
    )


def run_watched(url: str, requests: list[LLMRequest]) -> list[RequestRecord]:
    """As ``run_requests``, with the same-text watch a Locust process shares between its users."""
    transport = GeventHTTPTransport(url, headers={}, timeouts=TIMEOUTS)
    try:
        client = StreamingClient(transport, total_timeout_s=TIMEOUTS.total_s, same_text=SameTextWatch())
        return [client.run(r) for r in requests]
    finally:
        transport.close()


# NC-18 (end to end): the simulator aborts replies with HTTP 200, usage and [DONE].
@pytest.mark.parametrize("stream", [True, False])
def test_nc18_sim_abort_rate_replies_fail_as_finish_reason_abort(gevent_ready, sim, stream):
    url = sim("--abort-rate", "1")
    records = run_requests(url, [completion_request(stream=stream, max_tokens=8)] * 3)
    assert categories(records) == {(Outcome.SERVER_ERROR, "finish_reason abort", None)}
    assert all(r.finish_reason == "abort" for r in records)
    assert all(r.completion_tokens.value == 4 for r in records)  # usage of what was written: half of 8
    samples = metrics(url)
    assert injected(samples, "abort") == 3
    assert completed(samples) == 0
    assert metric_sum(samples, "llmload_sim_completion_tokens_total") == 0


def test_sim_degenerate_repeat_is_a_repeated_token_failure_with_a_sample(gevent_ready, sim):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "repeat")
    records = run_requests(url, [chat_request(max_tokens=32)] * 2)
    assert categories(records) == {(Outcome.SERVER_ERROR, DEGENERATE_REPEATED, None)}
    error = records[0].error
    assert error is not None
    assert "makes 32 of the reply's 32 pieces" in error.message
    assert injected(metrics(url), "degenerate", CHAT) == 2


def test_sim_degenerate_empty_is_empty_not_a_fast_success(gevent_ready, sim):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "empty")
    records = run_requests(url, [chat_request(max_tokens=16), chat_request(stream=False, max_tokens=16)])
    assert [r.outcome for r in records] == [Outcome.EMPTY, Outcome.EMPTY]
    assert records[0].completion_tokens.value == 16  # usage says 16, none of them streamed
    assert injected(metrics(url), "degenerate", CHAT) == 2


@pytest.mark.parametrize("stream", [True, False])
def test_sim_degenerate_same_text_for_different_prompts_fails_from_the_fifth(gevent_ready, sim, stream):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "same")
    records = run_watched(url, [chat_about(f"topic {i}", stream=stream) for i in range(8)])
    assert [r.outcome for r in records] == [Outcome.OK] * 4 + [Outcome.SERVER_ERROR] * 4
    assert {r.error.category for r in records if r.error} == {DEGENERATE_SAME_TEXT}
    assert injected(metrics(url), "degenerate", CHAT) == 8


def test_sim_degenerate_same_text_for_one_prompt_is_not_flagged(gevent_ready, sim):
    url = sim("--degenerate-rate", "1", "--degenerate-shape", "same")
    records = run_watched(url, [chat_about("one topic")] * 8)
    assert [r.outcome for r in records] == [Outcome.OK] * 8
