"""Property tests for the chunk parser over generated shapes: only the documented error, split-invariant text."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from llmload.errors import SSEProtocolError
from llmload.request.chunks import ChunkDelta, parse_any_chunk, parse_chunk
from llmload.request.record import Outcome
from llmload.request.stream import ReplyFailure, ReplyReader

_KEYS = st.sampled_from(
    [
        "type",
        "text",
        "thinking",
        "content",
        "reasoning",
        "reasoning_content",
        "refusal",
        "summary",
        "function",
        "name",
        "arguments",
        "tool_calls",
        "x",
    ]
)
_TYPES = st.sampled_from(["text", "output_text", "thinking", "reasoning", "reasoning_text", "refusal", "image_url", ""])
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | _TYPES
)
JSON = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=3), children, max_size=4)
    ),
    max_leaves=24,
)
_DELTA_KEYS = st.sampled_from(
    ["content", "reasoning", "reasoning_content", "refusal", "tool_calls", "function_call", "thinking", "role"]
)


@st.composite
def chunks(draw: st.DrawFn) -> Any:
    """A chunk whose choices, delta fields, logprobs and usage take generated JSON values."""
    delta = draw(st.dictionaries(_DELTA_KEYS, JSON, max_size=4) | JSON)
    choice = {"index": 0, "delta": delta, "finish_reason": draw(st.none() | st.sampled_from(["stop", "length"]))}
    if draw(st.booleans()):
        choice = {"index": 0, "text": draw(JSON), "logprobs": draw(JSON)}
    obj: dict[str, Any] = {"id": "c1", "choices": draw(st.just([choice]) | JSON)}
    if draw(st.booleans()):
        usage = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "prompt_tokens": st.integers(min_value=0, max_value=99) | JSON,
                    "completion_tokens": st.integers(min_value=0, max_value=99) | JSON,
                    "completion_tokens_details": JSON,
                    "prompt_tokens_details": JSON,
                },
            )
            | JSON
        )
        obj["usage"] = usage
    return obj if draw(st.integers(0, 9)) else draw(JSON)


@given(chunks())
def test_parse_chunk_raises_only_the_documented_error_naming_a_field(obj):
    try:
        delta = parse_chunk(obj)
    except SSEProtocolError as exc:
        message = str(exc)
        assert " is " in message or "nests parts" in message
        assert "Traceback" not in message
        assert "object has no attribute" not in message
        return
    assert isinstance(delta, ChunkDelta)
    assert isinstance(delta.text, str)
    assert delta.has_token or not delta.has_content
    assert not delta.has_content or delta.text  # content is non-empty text
    for count in (delta.reasoning_tokens, delta.cached_tokens, delta.logprob_tokens):
        assert count is None or (type(count) is int and count >= 0)


@st.composite
def split_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.text(min_size=1, max_size=30))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds)]


def _chat(delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


@given(split_text(), st.data())
def test_content_text_is_the_same_however_the_parts_are_split(split, data):
    text, pieces = split
    parts = [
        data.draw(st.sampled_from([piece, {"type": "text", "text": piece}, {"type": "output_text", "text": [piece]}]))
        for piece in pieces
    ]
    whole = parse_chunk(_chat({"content": text}))
    as_parts = parse_chunk(_chat({"content": parts}))
    assert (as_parts.text, as_parts.has_token, as_parts.has_content) == (whole.text, whole.has_token, whole.has_content)
    assert not as_parts.has_reasoning


@given(split_text(), st.data())
def test_thinking_text_is_the_same_however_the_parts_are_split(split, data):
    text, pieces = split
    parts = [
        data.draw(
            st.sampled_from(
                [
                    {"type": "thinking", "thinking": piece},
                    {"type": "thinking", "thinking": [{"type": "text", "text": piece}]},
                    {"type": "reasoning_text", "text": piece},
                ]
            )
        )
        for piece in pieces
    ]
    as_field = parse_chunk(_chat({"reasoning_content": text}))
    as_parts = parse_chunk(_chat({"content": parts}))
    assert (as_parts.text, as_parts.has_token, as_parts.has_content, as_parts.has_reasoning) == (
        as_field.text,
        True,
        False,
        True,
    )


@given(st.dictionaries(st.text(max_size=4), JSON, max_size=3))
def test_tool_call_arguments_object_counts_as_its_json_text(arguments):
    call = {"index": 0, "function": {"name": "f", "arguments": arguments}}
    delta = parse_chunk(_chat({"tool_calls": [call]}))
    assert delta.has_token
    assert not delta.has_content
    assert json.loads(delta.text[1:]) == arguments


@given(st.lists(chunks(), min_size=1, max_size=4))
def test_reply_reader_fails_only_as_a_stream_error(objs):
    reader = ReplyReader()
    data = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"
    outcome = None
    try:
        reader.feed(data, 0.1)
    except SSEProtocolError:
        outcome = Outcome.STREAM_ERROR
    except ReplyFailure as failure:
        outcome = failure.outcome
    assert outcome in (None, Outcome.SERVER_ERROR, Outcome.STREAM_ERROR)
    assert outcome is not None or reader.acc.done
    assert all(reader.acc.pieces)  # every kept piece holds text (the usage-above-text check counts on it)


@st.composite
def plain_chunks(draw: st.DrawFn) -> Any:
    """Chunks near the plain shape parse_chunk takes a shortcut for: one choice, string or null text."""
    text = draw(st.none() | st.text(max_size=4) | JSON)
    if draw(st.booleans()):
        choice: dict[str, Any] = {"index": 0, "text": text}
    else:
        delta = draw(
            st.fixed_dictionaries({}, optional={"role": st.just("assistant") | JSON, "content": st.just(text)})
        )
        choice = {"index": 0, "delta": delta}
    choice |= draw(
        st.fixed_dictionaries(
            {},
            optional={
                "finish_reason": st.none() | st.sampled_from(["stop", "length"]) | JSON,
                "logprobs": st.none() | JSON,
                "message": JSON,
            },
        )
    )
    obj: dict[str, Any] = {"id": "c1", "choices": [choice]}
    if draw(st.booleans()):
        obj["usage"] = draw(st.none() | JSON)
    return obj


@st.composite
def usage_chunks(draw: st.DrawFn) -> Any:
    """The final usage chunk parse_chunk takes a shortcut for (no choices, integer counts), or it with one change."""
    count = st.integers(min_value=0, max_value=10**6)
    usage: dict[str, Any] = {"prompt_tokens": draw(count), "completion_tokens": draw(count)}
    if draw(st.booleans()):
        usage["total_tokens"] = draw(count | JSON)
    change = draw(st.sampled_from(["none", "value", "drop", "extra"]))
    key = draw(st.sampled_from(["prompt_tokens", "completion_tokens"]))
    if change == "value":
        usage[key] = draw(st.integers(min_value=-2, max_value=-1) | st.none() | st.booleans() | st.just(3.0) | JSON)
    elif change == "drop":
        del usage[key]
    elif change == "extra":
        extra = [
            "input_tokens",
            "output_tokens",
            "reasoning_tokens",
            "prompt_cache_hit_tokens",
            "cache_read_input_tokens",
        ]
        details = [
            "prompt_tokens_details",
            "completion_tokens_details",
            "input_tokens_details",
            "output_tokens_details",
        ]
        name = draw(st.sampled_from(extra + details))
        detail = st.fixed_dictionaries({}, optional={"cached_tokens": count, "reasoning_tokens": count})
        usage[name] = draw(st.none() | count | detail | JSON)
    obj: dict[str, Any] = {"id": "c1", "usage": usage if draw(st.integers(0, 9)) else draw(JSON)}
    choices = draw(st.sampled_from(["empty", "empty", "absent", "one"]))
    if choices == "empty":
        obj["choices"] = []
    elif choices == "one":
        obj["choices"] = [{"index": 0, "text": draw(st.text(max_size=3)), "finish_reason": None}]
    return obj


@given(plain_chunks() | usage_chunks() | chunks())
def test_parse_chunk_equals_the_general_read_on_every_shape(obj):
    """The shortcut for plain chunks gives exactly what the general read gives, or the same error."""
    try:
        expected: ChunkDelta | str = parse_any_chunk(obj)
    except SSEProtocolError as exc:
        expected = str(exc)
    try:
        got: ChunkDelta | str = parse_chunk(obj)
    except SSEProtocolError as exc:
        got = str(exc)
    assert got == expected
