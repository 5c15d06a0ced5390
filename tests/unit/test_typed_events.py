"""Typed-event replies (Responses API, Anthropic Messages) and whole bodies → accounted deltas."""

from __future__ import annotations

import pytest

from llmload.errors import SSEProtocolError
from llmload.request.record import Outcome
from llmload.request.stream import ReplyFailure
from llmload.request.typed_events import (
    TypedReplyReader,
    anthropic_finish,
    parse_embeddings_body,
    parse_messages_body,
    parse_responses_body,
    responses_finish,
)
from llmload.testing import typed

COMPLETED = {"response": {"status": "completed", "usage": {"input_tokens": 4, "output_tokens": 2}}}


def test_responses_reader_counts_text_deltas_only():
    reader = TypedReplyReader("responses")
    reader.feed(typed("response.created", {"response": {}}) + typed("response.output_item.added"), 0.01)
    assert reader.acc.token_times_s == []
    reader.feed(typed("response.output_text.delta", {"delta": "a"}), 0.1)
    reader.feed(typed("response.output_text.delta", {"delta": "b"}) + typed("response.completed", COMPLETED), 0.2)
    acc = reader.acc
    assert acc.token_times_s == [0.1, 0.2]
    assert acc.pieces == ["a", "b"]
    assert acc.done
    assert (acc.prompt_tokens, acc.completion_tokens, acc.finish_reason) == (4, 2, "stop")


def test_responses_reader_ignores_events_after_the_end():
    reader = TypedReplyReader("responses")
    reader.feed(typed("response.completed", COMPLETED) + typed("response.output_text.delta", {"delta": "late"}), 0.1)
    assert reader.acc.token_times_s == []


def test_type_field_alone_names_the_event_without_an_event_line():
    reader = TypedReplyReader("messages")
    reader.feed(b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}\n\n', 0.05)
    assert reader.acc.token_times_s == [0.05]


def test_invalid_json_in_a_typed_stream_is_a_stream_error():
    reader = TypedReplyReader("responses")
    with pytest.raises(ReplyFailure) as failed:
        reader.feed(b"event: response.output_text.delta\ndata: {oops\n\n", 0.1)
    assert failed.value.outcome is Outcome.STREAM_ERROR


def test_a_pending_last_event_is_read_at_the_end_of_the_body():
    reader = TypedReplyReader("messages")
    reader.feed(typed("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}})[:-2], 0.1)
    assert reader.acc.finish_reason is None
    reader.finish(0.2)
    assert reader.acc.finish_reason == "stop"
    assert reader.acc.completion_tokens == 3


def test_bad_usage_count_is_a_protocol_error():
    reader = TypedReplyReader("responses")
    bad = {"response": {"status": "completed", "usage": {"input_tokens": "four"}}}
    with pytest.raises(SSEProtocolError, match="input_tokens"):
        reader.feed(typed("response.completed", bad), 0.1)


@pytest.mark.parametrize(
    ("response", "finish"),
    [
        ({"status": "completed"}, "stop"),
        ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "length"),
        ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, "content_filter"),
        ({"status": "incomplete"}, "incomplete:unknown"),
        ({"status": "cancelled"}, "status:cancelled"),
    ],
)
def test_responses_finish(response, finish):
    assert responses_finish(response) == finish


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
     ("refusal", "content_filter"), ("pause_turn", "pause_turn"), (None, None)],
)  # fmt: skip
def test_anthropic_finish(reason, finish):
    assert anthropic_finish(reason) == finish


def test_whole_responses_body_with_function_call_and_failed_status():
    body = {"status": "completed", "output": [{"type": "function_call", "arguments": '{"x":1}'}], "usage": {}}
    delta = parse_responses_body(body)
    assert delta.text == '{"x":1}'
    assert delta.has_token
    with pytest.raises(ReplyFailure, match="boom"):
        parse_responses_body({"status": "failed", "error": {"code": "x", "message": "boom"}})


def test_whole_messages_body_reads_thinking_and_tool_use():
    body = {"content": [{"type": "thinking", "thinking": "hm"}, {"type": "tool_use", "input": {"a": 1}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 5}}  # fmt: skip
    delta = parse_messages_body(body)
    assert delta.has_reasoning
    assert not delta.has_content
    assert delta.finish_reason == "tool_calls"
    assert (delta.prompt_tokens, delta.completion_tokens) == (3, 5)


def test_embeddings_body_accepts_base64_vectors_and_reads_prompt_tokens():
    body = {"data": [{"embedding": "AAAA"}, {"embedding": [0.1]}], "usage": {"prompt_tokens": 7}}
    assert parse_embeddings_body(body, 2).prompt_tokens == 7
    assert parse_embeddings_body({"data": [{"embedding": [1.0]}]}, 1).prompt_tokens is None


def test_embeddings_body_not_a_list_is_a_protocol_error():
    with pytest.raises(SSEProtocolError):
        parse_embeddings_body({"object": "list"}, 1)


def test_responses_reader_keeps_the_reply_id_for_previous_response_id():
    reader = TypedReplyReader("responses")
    reader.feed(typed("response.created", {"response": {"id": "resp_1", "status": "in_progress"}}), 0.01)
    assert reader.acc.response_id == "resp_1"
    completed = {"response": {**COMPLETED["response"], "id": "resp_1"}}
    reader.feed(typed("response.output_text.delta", {"delta": "a"}) + typed("response.completed", completed), 0.1)
    assert reader.acc.response_id == "resp_1"


def test_responses_reader_takes_the_id_from_completed_when_created_had_none():
    reader = TypedReplyReader("responses")
    reader.feed(typed("response.created", {"response": {"status": "in_progress"}}), 0.01)
    assert reader.acc.response_id is None
    reader.feed(typed("response.completed", {"response": {**COMPLETED["response"], "id": "resp_9"}}), 0.1)
    assert reader.acc.response_id == "resp_9"


def test_messages_reader_keeps_no_response_id():
    reader = TypedReplyReader("messages")
    reader.feed(typed("message_start", {"message": {"id": "msg_1", "usage": {"input_tokens": 3}}}), 0.01)
    assert reader.acc.response_id is None


def test_responses_and_messages_usage_detail_that_is_not_a_count_is_named_not_dropped():
    """Issue 24: the Responses/Messages usage details read as chat's: unknown and named, never 0 or a stream error."""
    usage = {"input_tokens": 4, "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": "lots"}}
    body = parse_responses_body({"status": "completed", "output": [], "usage": usage})
    assert (body.prompt_tokens, body.completion_tokens, body.reasoning_tokens) == (4, 2, None)
    assert body.unreadable_detail == 'usage.output_tokens_details.reasoning_tokens is a string ("lots")'
    message = parse_messages_body({"content": [], "usage": {"input_tokens": 4, "output_tokens": 2,
                                                             "cache_read_input_tokens": -1}})  # fmt: skip
    assert (message.prompt_tokens, message.cached_tokens) == (4, None)
    assert message.unreadable_detail is not None
    assert "usage.cache_read_input_tokens is a number (-1)" in message.unreadable_detail
    fine = parse_responses_body({"status": "completed", "output": [], "usage": {"input_tokens": 4, "output_tokens": 2}})
    assert fine.unreadable_detail is None
