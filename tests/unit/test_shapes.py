"""shapes: every JSON type servers send in a text field → content and reasoning text, or a named failure."""

from __future__ import annotations

import pytest

from llmload.errors import SSEProtocolError
from llmload.request.chunks import ChunkDelta, parse_chunk
from llmload.request.shapes import NESTING_LIMIT, describe


def chat(delta: object, **choice: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None, **choice}]}


def test_shapes_content_string_is_content():
    delta = parse_chunk(chat({"content": "hi"}))
    assert (delta.text, delta.has_token, delta.has_content, delta.has_reasoning, delta.shaped) == (
        "hi",
        True,
        True,
        False,
        False,
    )


def test_shapes_content_null_and_empty_carry_no_token():
    for content in (None, "", [], [None], {"type": "text", "text": ""}):
        delta = parse_chunk(chat({"role": "assistant", "content": content}))
        assert not delta.has_token, content


def test_shapes_content_text_parts_are_content():
    delta = parse_chunk(chat({"content": [{"type": "text", "text": "4"}, {"type": "output_text", "text": "2"}]}))
    assert (delta.text, delta.has_content, delta.has_reasoning, delta.shaped) == ("42", True, False, True)


def test_shapes_content_object_is_one_part():
    assert parse_chunk(chat({"content": {"type": "text", "text": "x"}})).text == "x"


def test_shapes_thinking_part_with_nested_parts_is_reasoning():
    part = {"type": "thinking", "thinking": [{"type": "text", "text": "Let me"}]}
    delta = parse_chunk(chat({"content": [part]}))
    assert (delta.text, delta.has_token, delta.has_content, delta.has_reasoning) == ("Let me", True, False, True)


def test_shapes_thinking_part_with_string_and_reasoning_types_are_reasoning():
    for part in (
        {"type": "thinking", "thinking": "hm", "signature": "abc"},
        {"type": "reasoning", "text": "hm"},
        {"type": "reasoning_text", "text": "hm"},
        {"type": "summary_text", "text": "hm"},
    ):
        delta = parse_chunk(chat({"content": [part]}))
        assert (delta.text, delta.has_content, delta.has_reasoning) == ("hm", False, True), part


def test_shapes_mixed_parts_keep_order_and_kinds():
    parts = ["a", {"type": "thinking", "thinking": "b"}, {"type": "text", "text": "c"}]
    delta = parse_chunk(chat({"content": parts}))
    assert (delta.text, delta.has_content, delta.has_reasoning) == ("abc", True, True)


def test_shapes_typed_part_without_text_is_skipped():
    delta = parse_chunk(chat({"content": [{"type": "image_url", "image_url": {"url": "x"}}, "y"]}))
    assert delta.text == "y"


def test_shapes_refusal_is_content():
    delta = parse_chunk(chat({"refusal": "no"}))
    assert (delta.text, delta.has_content) == ("no", True)


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_shapes_reasoning_fields_as_string_or_parts(key):
    for value in ("hm", [{"type": "text", "text": "hm"}], {"type": "reasoning.text", "text": "hm"}):
        delta = parse_chunk(chat({key: value}))
        assert (delta.text, delta.has_token, delta.has_content, delta.has_reasoning) == ("hm", True, False, True)


def test_shapes_mirrored_reasoning_counted_once():
    delta = parse_chunk(chat({"reasoning": "Think", "reasoning_content": "Think"}))
    assert delta.text == "Think"
    assert delta.shaped  # never a fast-path template


def test_shapes_two_different_reasoning_texts_both_count():
    assert parse_chunk(chat({"reasoning": "a", "reasoning_content": "b"})).text == "ba"


def test_shapes_reasoning_details_only_when_the_usual_fields_are_silent():
    details = [{"type": "reasoning.text", "text": "x"}]
    assert parse_chunk(chat({"reasoning_details": details})).text == "x"
    assert parse_chunk(chat({"reasoning": "x", "reasoning_details": details})).text == "x"


def test_shapes_tool_call_arguments_string_or_object():
    def call(arguments: object) -> dict[str, object]:
        return {"index": 0, "function": {"name": "f", "arguments": arguments}}

    as_text = parse_chunk(chat({"tool_calls": [call('{"a":1}')]}))
    as_object = parse_chunk(chat({"tool_calls": [call({"a": 1})]}))
    assert as_text.text == as_object.text == 'f{"a":1}'
    assert as_object.has_token
    assert not as_object.has_content
    assert as_object.shaped
    assert not as_text.shaped


def test_shapes_tool_call_without_text_is_a_token():
    delta = parse_chunk(chat({"tool_calls": [{"index": 0, "id": "t", "type": "function"}]}))
    assert (delta.text, delta.has_token, delta.has_content) == ("", True, False)


def test_shapes_legacy_function_call_is_read():
    delta = parse_chunk(chat({"function_call": {"name": "f", "arguments": "{}"}}))
    assert (delta.text, delta.has_token) == ("f{}", True)


def test_shapes_completions_text_as_parts():
    delta = parse_chunk({"choices": [{"index": 0, "text": [{"type": "text", "text": "yo"}], "finish_reason": None}]})
    assert (delta.text, delta.has_content) == ("yo", True)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (chat({"content": 42}), "choices[0].delta.content is a number (42)"),
        (chat({"content": True}), "choices[0].delta.content is a boolean (true)"),
        (chat({"content": ["a", 7]}), "choices[0].delta.content[1] is a number (7)"),
        (chat({"content": [{"text": "x", "type": 3}]}), "choices[0].delta.content[0].type is a number (3)"),
        (chat({"content": [{"foo": "x"}]}), "choices[0].delta.content[0] is an object"),
        (chat({"reasoning": 1.5}), "choices[0].delta.reasoning is a number (1.5)"),
        (chat({"tool_calls": "f"}), 'choices[0].delta.tool_calls is a string ("f")'),
        (chat({"tool_calls": [3]}), "choices[0].delta.tool_calls[0] is a number (3)"),
        (chat({"tool_calls": [{"function": {"name": 1}}]}), "choices[0].delta.tool_calls[0].function.name is a number"),
        (chat("text"), 'choices[0].delta is a string ("text")'),
        ({"choices": ["x"]}, 'choices[0] is a string ("x")'),
        ({"choices": {"a": 1}}, "choices is an object"),
        ([], "the chunk is a list ([])"),
        ({"choices": [], "usage": {"completion_tokens": "3"}}, 'usage.completion_tokens is a string ("3")'),
        ({"choices": [], "usage": "n/a"}, 'usage is a string ("n/a")'),
    ],
)
def test_shapes_not_understood_names_the_field_path_and_type(obj, message):
    with pytest.raises(SSEProtocolError) as info:
        parse_chunk(obj)
    assert message in str(info.value)


def test_shapes_nesting_beyond_the_limit_is_refused_not_a_recursion_error():
    value: object = "x"
    for _ in range(NESTING_LIMIT + 2):
        value = [value]
    with pytest.raises(SSEProtocolError, match="nests parts more than"):
        parse_chunk(chat({"content": value}))


def test_shapes_describe_truncates_long_samples():
    assert describe("x" * 200).endswith("…)")
    assert describe(None) == "null"


def test_chunks_usage_details_read_and_tolerated():
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 104,
        "completion_tokens_details": {"reasoning_tokens": 100},
        "prompt_tokens_details": {"cached_tokens": 8},
    }
    delta = parse_chunk({"choices": [], "usage": usage})
    assert (delta.reasoning_tokens, delta.cached_tokens) == (100, 8)
    for details in (None, {}, {"reasoning_tokens": None}, {"reasoning_tokens": "7"}, {"reasoning_tokens": -1}, "x"):
        odd = {"prompt_tokens": 1, "completion_tokens": 2, "completion_tokens_details": details}
        odd["prompt_tokens_details"] = details
        delta = parse_chunk({"choices": [], "usage": odd})
        assert (delta.reasoning_tokens, delta.cached_tokens, delta.completion_tokens) == (None, None, 2), details


def test_chunks_integral_float_usage_is_a_count():
    delta = parse_chunk({"choices": [], "usage": {"prompt_tokens": 3.0, "completion_tokens": 2.0}})
    assert (delta.prompt_tokens, delta.completion_tokens) == (3, 2)


def test_chunks_logprobs_entries_counted_for_chat_and_completions():
    entries = [{"token": "a", "logprob": 0.0}, {"token": "b", "logprob": 0.0}]
    chat_delta = parse_chunk(chat({"content": "ab"}, logprobs={"content": entries}))
    text_delta = parse_chunk(
        {"choices": [{"text": "ab", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [0, 0]}}]}
    )
    assert chat_delta.logprob_tokens == text_delta.logprob_tokens == 2
    assert parse_chunk(chat({"content": "ab"})).logprob_tokens is None
    assert parse_chunk(chat({"content": "ab"}, logprobs="odd")).logprob_tokens is None


def test_chunks_plain_delta_equals_the_positional_form():
    assert parse_chunk(chat({"content": "x"})) == ChunkDelta("x", True, True, None, None, None)


def test_shapes_assistants_text_value_and_anthropic_deltas():
    value = parse_chunk(chat({"content": [{"type": "text", "text": {"value": "v", "annotations": []}}]}))
    thinking = parse_chunk(chat({"content": [{"type": "thinking_delta", "thinking": "t"}]}))
    text = parse_chunk(chat({"content": [{"type": "text_delta", "text": "x"}]}))
    assert (value.text, value.has_content) == ("v", True)
    assert (thinking.text, thinking.has_reasoning, thinking.has_content) == ("t", True, False)
    assert (text.text, text.has_content) == ("x", True)


def test_chunks_usage_under_other_names():
    usage = {
        "input_tokens": 9,
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 2},
        "input_tokens_details": {"cached_tokens": 3},
    }
    delta = parse_chunk({"choices": [], "usage": usage})
    assert (delta.prompt_tokens, delta.completion_tokens, delta.reasoning_tokens, delta.cached_tokens) == (9, 4, 2, 3)
    deepseek = parse_chunk({"choices": [], "usage": {"prompt_tokens": 9, "prompt_cache_hit_tokens": 5}})
    assert deepseek.cached_tokens == 5
