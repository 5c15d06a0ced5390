"""Section H kinds on token accounting over real HTTP: ScriptedServer → GeventHTTPTransport → StreamingClient.

Usage that does not add up with the stream (reasoning above the completion
count, more tokens than the streamed text can hold), replies whose tokens
all came at one instant, and empty replies of typed parts llmload cannot
read. ``run.sent(100)`` is when the write scheduled at 100 ms was really sent
(see ``test_cases_stream.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmload.request.record import ITLKind, Outcome, TokenSource, UsageNote
from llmload.testing import CF, ROLE, C, Reply, U, W, sse
from tests.conftest import near

pytestmark = [pytest.mark.integration, pytest.mark.timing]

_CHAT = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}


def _usage(prompt: int, completion: int, **details: Any) -> str:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage["total_tokens"] = prompt + completion
    if details:
        usage["completion_tokens_details"] = details
    return json.dumps({**_CHAT, "choices": [], "usage": usage}, separators=(",", ":"))


def _content_with_usage(text: str, completion: int) -> str:
    """A content chunk carrying cumulative usage (vLLM ``continuous_usage_stats``)."""
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    usage = {"prompt_tokens": 5, "completion_tokens": completion, "total_tokens": 5 + completion}
    return json.dumps({**_CHAT, "choices": [choice], "usage": usage}, separators=(",", ":"))


def _four_words(usage: str) -> list[Any]:
    return [
        W(10, sse(ROLE)),
        W(100, sse(C({"content": "The"}))),
        W(120, sse(C({"content": " answer"}))),
        W(140, sse(C({"content": " is"}))),
        W(160, sse(C({"content": " 42"}))),
        W(170, sse(CF("stop"), usage, "[DONE]")),
    ]


# NC-23 (kind): usage's reasoning tokens (100) above its completion_tokens (4): the server counts
# reasoning apart; the 4 completion tokens are the answer (never 4 - 100), TPOT over them.
def test_nc23_kind_reasoning_above_completion_counted_apart(run_scripted):
    run = run_scripted(Reply(_four_words(_usage(12, 4, reasoning_tokens=100))))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert (record.completion_tokens.value, record.reasoning_tokens) == (4, 100)
    assert record.usage_notes == (UsageNote.REASONING_APART,)
    assert (record.hidden_reasoning_tokens, record.answer_tokens, record.streamed_tokens) == (0, 4, 4)
    assert record.tpot_s == near((run.sent(160) - run.sent(100)) / 3)


# NC-23 (kind): usage counts 40 tokens, the stream carried 4 events of 16 characters in all and no
# reasoning details: the tokens were not all streamed, so TPOT over the streamed ones is unknown
# (not 60 ms / 39 = 1.5 ms); the count stays the server's.
def test_nc23_kind_usage_above_streamed_text_tpot_unknown(run_scripted):
    record = run_scripted(Reply(_four_words(U(12, 40)))).record
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 40
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.usage_notes == (UsageNote.ABOVE_TEXT,)
    assert (record.streamed_tokens, record.tpot_s) == (None, None)
    assert record.itl_kind is ITLKind.CHUNK
    assert len(record.itl_samples_s()) == 3  # inter-chunk gaps stay measured


# NC-23 (kind): the same stream with usage that fits the text (4, or 5 with an end-of-sequence token
# the stream never shows) is not flagged.
@pytest.mark.parametrize("completion", [4, 5])
def test_nc23_kind_usage_within_streamed_text_not_flagged(run_scripted, completion):
    run = run_scripted(Reply(_four_words(U(12, completion))))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.usage_notes == ()
    assert record.tpot_s == near((run.sent(160) - run.sent(100)) / (completion - 1))


# NC-26 (kind): several tokens per chunk with usage ("Hello there" = 2 tokens): text enough for
# every token, so not flagged; per-event counts from cumulative usage.
def test_nc26_kind_multi_token_chunks_with_usage_not_flagged(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(_content_with_usage("Hello there", 2))),
        W(130, sse(_content_with_usage("! How", 4))),
        W(160, sse(_content_with_usage(" are you?", 7))),
        W(170, sse(CF("stop"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.usage_notes == ()
    assert record.token_counts == [2, 2, 3]
    assert record.tpot_s == near((run.sent(160) - run.sent(100)) / 6)


# NC-26 (kind): all of a reply's tokens in ONE token-bearing event: no time between its first and
# last token, so TPOT and ITL are unknown (None / no sample), never 0.
def test_nc26_kind_all_tokens_in_one_event_tpot_unknown(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(C({"content": "Hello big world out"}))),
        W(130, sse(CF("stop"), U(5, 5), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 5
    assert record.ttft_s == run.at(100)
    assert record.tpot_s is None
    assert record.itl_samples_s() == []


# NC-26 (kind): the same with cumulative usage on the one event (5 tokens known on it): still no
# ITL sample of 0 for the tokens that came together.
def test_nc26_kind_one_event_with_per_event_usage_gives_no_zero_itl(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(_content_with_usage("Hello big world out", 5))),
        W(130, sse(CF("stop"), "[DONE]")),
    ]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.token_counts == [5]
    assert (record.tpot_s, record.itl_samples_s()) == (None, [])


# NC-20 (kind): a whole tool call (arguments as an object) in one event: TPOT unknown, not 0.
def test_nc20_kind_tool_call_in_one_event_tpot_unknown(run_scripted):
    call = {"index": 0, "id": "t1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(C({"tool_calls": [call]}))),
        W(130, sse(CF("tool_calls"), U(5, 3), "[DONE]")),
    ]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 3
    assert (record.tpot_s, record.itl_samples_s()) == (None, [])


# NC-20 (kind): content parts of a type without text (audio) and usage saying 2 tokens: the reply
# is empty, and the message names the part llmload skipped.
def test_nc20_kind_empty_reply_of_unread_typed_parts_names_them(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(C({"content": [{"type": "audio", "audio": {"data": "AAAA"}}]}))),
        W(130, sse(CF("stop"), U(5, 2), "[DONE]")),
    ]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.EMPTY
    assert record.error is not None
    assert "completion_tokens=2" in record.error.message
    assert "choices[0].delta.content[0] has type 'audio', which carries no text llmload reads" in record.error.message


# NC-20 (kind): an event that cannot be read is counted in what was seen (2 events, not 1).
def test_nc20_kind_seen_counts_the_event_that_failed(run_scripted):
    writes = [W(10, sse(ROLE)), W(50, sse(C({"content": True}))), W(60, sse(CF("stop"), "[DONE]"))]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "seen: 2 events (0 with tokens)" in record.error.message
