"""chunks: OpenAI chunk/body/error JSON read into typed values; per-reply accumulation."""

from __future__ import annotations

import pytest

from llmload.errors import SSEProtocolError
from llmload.request.chunks import ChunkDelta, ReplyAccumulator, parse_chunk, read_server_error
from llmload.request.tokens import read_usage


def test_parse_chunk_reads_multiple_choices_and_usage():
    delta = parse_chunk(
        {
            "choices": [
                {"index": 0, "delta": {"content": "a"}, "finish_reason": None},
                {"index": 1, "delta": {"content": "b"}, "finish_reason": "stop"},
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
    )
    assert delta == ChunkDelta("ab", True, True, "stop", 3, 2)


def test_parse_chunk_role_only_and_usage_only_carry_no_token():
    role = parse_chunk({"choices": [{"delta": {"role": "assistant", "content": None}, "finish_reason": None}]})
    usage = parse_chunk({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}})
    assert not role.has_token
    assert not usage.has_token
    assert usage.completion_tokens == 0


def test_parse_chunk_reasoning_is_a_token_but_not_content():
    for key in ("reasoning_content", "reasoning"):
        delta = parse_chunk({"choices": [{"delta": {key: "hmm"}, "finish_reason": None}]})
        assert delta == ChunkDelta("hmm", True, False, None, None, None, has_reasoning=True)


def test_parse_chunk_reads_non_streamed_message_and_completion_text():
    chat = parse_chunk({"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]})
    text = parse_chunk({"choices": [{"text": "yo", "finish_reason": "length"}]})
    assert (chat.text, chat.has_content, chat.finish_reason) == ("hi", True, "stop")
    assert (text.text, text.has_content, text.finish_reason) == ("yo", True, "length")


@pytest.mark.parametrize(
    "obj",
    [
        [],
        {"choices": [{"delta": "text"}]},
        {"choices": [{"delta": {"content": 5}}]},
        {"choices": [], "usage": {"completion_tokens": "3"}},
    ],
)
def test_parse_chunk_rejects_foreign_shapes(obj):
    with pytest.raises(SSEProtocolError):
        parse_chunk(obj)


def test_read_server_error_both_shapes():
    nested = read_server_error({"error": {"message": "m", "type": "NotFoundError", "code": 404}}, None)
    flat = read_server_error({"object": "error", "message": "m", "type": "NotFoundError", "code": 404}, None)
    assert nested == flat
    assert nested is not None
    assert (nested.category, nested.message, nested.kind) == ("NotFoundError/404", "m", "NotFoundError")


def test_read_server_error_normal_chunk_is_none():
    assert read_server_error({"choices": []}, None) is None
    assert read_server_error({"choices": []}, "message") is None


def test_read_server_error_detail_only_in_http_bodies():
    assert read_server_error({"detail": "Not Found"}, None) is None
    error = read_server_error({"detail": "Not Found"}, None, http_body=True)
    assert error is not None
    assert error.message == "Not Found"


def test_reply_accumulator_derives_per_event_counts_from_cumulative_usage():
    acc = ReplyAccumulator()
    for t, cumulative in ((0.1, 4), (0.2, 8), (0.3, 13)):
        acc.add(ChunkDelta("x", True, True, None, 8, cumulative), t)
    acc.add(ChunkDelta("", False, False, "stop", 8, 13), 0.31)
    assert read_usage(acc.usage_log, 3, acc.usage_per_event()).per_event == [4, 4, 5]
    assert acc.completion_tokens == 13
    assert acc.token_times_s == [0.1, 0.2, 0.3]


def test_reply_accumulator_no_counts_when_a_token_event_lacks_usage():
    acc = ReplyAccumulator()
    acc.add(ChunkDelta("x", True, True, None, None, 1), 0.1)
    acc.add(ChunkDelta("y", True, True, None, None, None), 0.2)
    assert acc.usage_per_event() is None
    assert read_usage(acc.usage_log, 2, acc.usage_per_event()).per_event is None
