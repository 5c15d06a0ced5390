"""The Responses API, Anthropic Messages and embeddings over real HTTP: ScriptedServer → transport → StreamingClient.

Timings are compared within ±5 ms of the server's real write times (``run.at``). The locust runs of
these users (preflight refusals, API keys, multi-turn history) run in process:
``tests/edge/test_cases_apis.py``.
"""

from __future__ import annotations

import json

import pytest

from llmload.request.api_bodies import build_embeddings_request, build_messages_request, build_responses_request
from llmload.request.record import Outcome, TokenSource
from llmload.testing import Reply, W, json_reply, typed

pytestmark = [pytest.mark.integration, pytest.mark.timing]

HI = [{"role": "user", "content": "hi"}]


def responses_request(stream: bool = True):
    return build_responses_request(model="m", messages=HI, max_tokens=16, stream=stream)


def messages_request(stream: bool = True):
    return build_messages_request(model="m", messages=HI, max_tokens=16, stream=stream, api_key="k")


def _completed(status: str = "completed", **extra):
    usage = {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 3},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 7,
    }
    return {"response": {"id": "r1", "object": "response", "status": status, "usage": usage, **extra}}


def _nc28_writes():
    return [
        W(10, typed("response.created", {"response": {"id": "r1", "status": "in_progress"}})),
        W(15, typed("response.output_item.added", {"output_index": 0, "item": {"type": "message"}})),
        W(100, typed("response.output_text.delta", {"delta": "Hi", "output_index": 0})),
        W(120, typed("response.output_text.delta", {"delta": " there", "output_index": 0})),
        W(130, typed("response.output_text.done", {"text": "Hi there"})),
        W(140, typed("response.completed", _completed())),
    ]


# NC-28: a Responses user speaks the API: typed events, TTFT at the first text delta, usage at the end.
def test_nc28_responses_stream_is_measured(run_scripted):
    run = run_scripted(Reply(_nc28_writes()), responses_request())
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.ttft_s == run.at(100)  # response.created @10 and output_item.added @15 are no tokens
    assert record.e2e_s == run.at(140)  # response.completed ends the reply (no [DONE])
    assert len(record.token_times_s) == 2
    assert record.token_times_s[1] == run.at(120)
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.prompt_tokens.value == 5
    assert record.cached_prompt_tokens == 3
    assert record.finish_reason == "stop"
    body = run.requests[0].json()
    assert run.requests[0].path == "/v1/responses"
    assert body["input"] == "hi"
    assert body["max_output_tokens"] == 16
    assert body["stream"] is True
    assert "messages" not in body
    assert "stream_options" not in body


def test_nc28_responses_body_without_input_is_a_named_400(run_scripted):
    error = {"error": {"message": "Field required: input", "type": "invalid_request_error",
                       "code": "missing_required_parameter", "param": "input"}}  # fmt: skip
    record = run_scripted(json_reply(400, json.dumps(error)), responses_request()).record
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.status == 400
    assert "Field required: input" in record.error.message


def test_responses_reasoning_and_tool_argument_deltas_count_structural_events_do_not(run_scripted):
    writes = [
        W(10, typed("response.created", {"response": {"status": "in_progress"}})),
        W(20, typed("response.reasoning_text.delta", {"delta": ""})),  # empty: no token
        W(60, typed("response.reasoning_text.delta", {"delta": "think"})),
        W(80, typed("response.function_call_arguments.delta", {"delta": '{"a":'})),
        W(90, typed("response.output_text.delta", {"delta": "ok"})),
        W(100, typed("response.completed", _completed())),
    ]
    run = run_scripted(Reply(writes), responses_request())
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.ttft_s == run.at(60)
    assert record.ttfc_s == run.at(90)  # first content: the output text
    assert len(record.token_times_s) == 3


def test_responses_failed_event_is_a_named_server_error(run_scripted):
    failed = {"response": {"status": "failed", "error": {"code": "server_error", "message": "engine died"}}}
    writes = [W(50, typed("response.output_text.delta", {"delta": "Hi"})), W(60, typed("response.failed", failed))]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "response.failed code server_error"
    assert "engine died" in record.error.message


def test_responses_error_event_is_a_named_server_error(run_scripted):
    error = {"code": "rate_limit_exceeded", "message": "slow down", "param": None}
    writes = [W(50, typed("error", error))]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "error/rate_limit_exceeded"
    assert "slow down" in record.error.message


@pytest.mark.parametrize(
    ("reason", "outcome", "finish"),
    [
        ("max_output_tokens", Outcome.OK, "length"),
        ("content_filter", Outcome.OK, "content_filter"),
        ("server_overloaded", Outcome.SERVER_ERROR, "incomplete:server_overloaded"),
    ],
)
def test_responses_incomplete_maps_its_reason_onto_the_finish_reasons(run_scripted, reason, outcome, finish):
    incomplete = _completed("incomplete", incomplete_details={"reason": reason})
    writes = [
        W(50, typed("response.output_text.delta", {"delta": "Hi"})),
        W(60, typed("response.incomplete", incomplete)),
    ]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.finish_reason == finish
    assert record.outcome is outcome
    if outcome is not Outcome.OK:
        assert record.error is not None
        assert record.error.category == f"finish_reason {finish}"


def test_responses_stream_cut_before_completed_is_a_named_stream_error(run_scripted):
    writes = [W(50, typed("response.output_text.delta", {"delta": "Hi"}))]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "response.completed" in record.error.message


def test_responses_non_streamed_reply(run_scripted):
    body = {
        "object": "response", "status": "completed",
        "output": [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hm"}]},
                   {"type": "message", "content": [{"type": "output_text", "text": "Hi there"}]}],
        "usage": {"input_tokens": 5, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 1}},
    }  # fmt: skip
    record = run_scripted(json_reply(200, json.dumps(body), at_ms=50), responses_request(stream=False)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.streamed is False
    assert record.completion_tokens.value == 4
    assert record.prompt_tokens.value == 5
    assert record.reasoning_tokens == 1
    assert record.ttft_s is None  # no token times without a stream


# ── Anthropic Messages ─────────────────────────────────────────────────────
def _messages_writes(stop_reason: str = "end_turn"):
    start = {"message": {"id": "m1", "type": "message", "role": "assistant", "content": [], "model": "m",
                         "usage": {"input_tokens": 7, "output_tokens": 1, "cache_read_input_tokens": 2}}}  # fmt: skip
    return [
        W(10, typed("message_start", start)),
        W(12, typed("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}})),
        W(15, typed("ping")),
        W(60, typed("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}})),
        W(70, typed("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": "x"}})),
        W(80, typed("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "Hello"}})),
        W(90, typed("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}})),
        W(95, typed("content_block_stop", {"index": 2})),
        W(100, typed("message_delta", {"delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 3}})),
        W(110, typed("message_stop")),
    ]


def test_messages_stream_is_measured_with_its_headers(run_scripted):
    run = run_scripted(Reply(_messages_writes()), messages_request())
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.ttft_s == run.at(60)  # the thinking delta; message_start, block start and ping are no tokens
    assert record.ttfc_s == run.at(80)
    assert record.e2e_s == run.at(110)
    assert len(record.token_times_s) == 3  # signature_delta carries no text
    assert record.completion_tokens.value == 3
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.prompt_tokens.value == 7
    assert record.cached_prompt_tokens == 2
    assert record.finish_reason == "stop"
    sent = run.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["x-api-key"] == "k"
    assert sent.json()["max_tokens"] == 16
    assert sent.json()["messages"] == HI


@pytest.mark.parametrize(
    ("stop_reason", "finish", "outcome"),
    [
        ("max_tokens", "length", Outcome.OK),
        ("stop_sequence", "stop", Outcome.OK),
        ("tool_use", "tool_calls", Outcome.OK),
        ("pause_turn", "pause_turn", Outcome.SERVER_ERROR),
    ],
)
def test_messages_stop_reason_maps_onto_finish_reasons(run_scripted, stop_reason, finish, outcome):
    record = run_scripted(Reply(_messages_writes(stop_reason)), messages_request()).record
    assert record.finish_reason == finish
    assert record.outcome is outcome


def test_messages_error_event_is_a_named_server_error(run_scripted):
    error = {"error": {"type": "overloaded_error", "message": "Overloaded"}}
    writes = [*_messages_writes()[:4], W(70, typed("error", error))]
    record = run_scripted(Reply(writes), messages_request()).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "overloaded_error"
    assert "Overloaded" in record.error.message


def test_messages_non_streamed_reply(run_scripted):
    body = {"type": "message", "content": [{"type": "text", "text": "Hello there"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 7, "output_tokens": 2}}  # fmt: skip
    record = run_scripted(json_reply(200, json.dumps(body), at_ms=40), messages_request(stream=False)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.finish_reason == "length"
    assert record.completion_tokens.value == 2
    assert record.prompt_tokens.value == 7


# ── embeddings ─────────────────────────────────────────────────────────────
def _embeddings(vectors, prompt_tokens=6):
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return json.dumps({"object": "list", "data": data, "usage": {"prompt_tokens": prompt_tokens, "total_tokens": 6}})


def test_embeddings_batch_is_measured_from_usage(run_scripted):
    request = build_embeddings_request(model="m", inputs=["a b", "c d", "e f"])
    run = run_scripted(json_reply(200, _embeddings([[0.1, 0.2]] * 3), at_ms=30), request)
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.e2e_s == run.at(30)
    assert record.prompt_tokens.value == 6
    assert record.prompt_tokens.source is TokenSource.SERVER
    assert record.completion_tokens.value is None  # nothing is generated: not applicable, never 0
    assert record.completion_tokens.source is TokenSource.UNKNOWN
    assert record.inputs == 3
    assert record.ttft_s is None
    assert run.requests[0].json()["input"] == ["a b", "c d", "e f"]


def test_embeddings_reply_without_usage_has_unknown_input_tokens_never_zero(run_scripted):
    """Issue 24: the reply is a success, its input tokens unknown (counted as prompt source "unknown")."""
    request = build_embeddings_request(model="m", inputs=["a b", "c d"])
    body = json.dumps({"object": "list", "data": [{"index": i, "embedding": [0.1]} for i in range(2)]})
    record = run_scripted(json_reply(200, body, at_ms=10), request).record
    assert record.outcome is Outcome.OK, record.error
    assert (record.prompt_tokens.value, record.prompt_tokens.source) == (None, TokenSource.UNKNOWN)
    assert record.inputs == 2


@pytest.mark.parametrize(
    ("vectors", "category"),
    [([[0.1]] * 2, "wrong number of embeddings"), ([[0.1], [], [0.3]], "empty embedding")],
    ids=["two-of-three", "empty-vector"],
)
def test_embeddings_wrong_or_empty_vectors_fail(run_scripted, vectors, category):
    request = build_embeddings_request(model="m", inputs=["a", "b", "c"])
    record = run_scripted(json_reply(200, _embeddings(vectors), at_ms=10), request).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == category


@pytest.mark.parametrize(
    "done", [b"data: [DONE]\n", b"data: [DONE] \n", b"data:  [DONE]"], ids=["lf", "space-lf", "none"]
)
def test_nc21_kind_messages_stream_ended_by_a_done_line_without_its_blank_line_then_held_open(run_scripted, done):
    # found by a breaker run: a gateway's [DONE] in place of message_stop, its blank line never sent,
    # left the user waiting out the read timeout (chat streams already ended there)
    writes = [*_messages_writes()[:-1], W(110, done), W(15_110, b"")]
    run = run_scripted(Reply(writes), messages_request())
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.e2e_s == run.at(110)
    assert record.completion_tokens.value == 3
