"""Typed-event replies account the same whatever the chunk boundaries (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from llmload.request.typed_events import TypedReplyReader
from llmload.testing import typed

STREAM = b"".join(
    (
        typed("message_start", {"message": {"usage": {"input_tokens": 7}}}),
        typed("content_block_delta", {"delta": {"type": "thinking_delta", "thinking": "h\u00e9"}}),
        b": ping\r\n\r\n",
        typed("content_block_delta", {"delta": {"type": "text_delta", "text": "Hello"}}),
        typed("content_block_delta", {"delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        typed("message_delta", {"delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 3}}),
        typed("message_stop"),
    )
)


def _read(cuts: list[int]) -> tuple[object, ...]:
    reader = TypedReplyReader("messages")
    bounds = [0, *cuts, len(STREAM)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        reader.feed(STREAM[a:b], float(i))
    reader.finish(float(len(bounds)))
    acc = reader.acc
    return (acc.pieces, len(acc.token_times_s), acc.prompt_tokens, acc.completion_tokens, acc.finish_reason, acc.done)


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(STREAM)), unique=True))
def test_typed_reader_ignores_chunk_boundaries(cuts):
    assert _read(sorted(cuts)) == _read([])
    assert _read([])[0] == ["h\u00e9", "Hello", "{}"]
