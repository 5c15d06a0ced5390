"""Section H cases on field shapes and usage over real HTTP: ScriptedServer → GeventHTTPTransport → StreamingClient.

``run.at(100)`` is the moment the write scheduled at 100 ms was really sent,
in seconds after the client's send, compared within ±5 ms (see
``test_cases_stream.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmload.request.payloads import build_chat_request
from llmload.request.record import ITLKind, Outcome, TokenSource, UsageNote
from llmload.testing import CF, ROLE, C, Reply, U, W, sse
from tests.conftest import near

pytestmark = [pytest.mark.integration, pytest.mark.timing]

_CHAT = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def usage_with_details(prompt: int, completion: int, **details: Any) -> str:
    """A usage-only chunk whose usage also has ``completion_tokens_details`` / ``prompt_tokens_details``."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage["total_tokens"] = prompt + completion
    if "reasoning_tokens" in details:
        usage["completion_tokens_details"] = {"reasoning_tokens": details["reasoning_tokens"]}
    if "cached_tokens" in details:
        usage["prompt_tokens_details"] = {"cached_tokens": details["cached_tokens"]}
    return _dumps({**_CHAT, "choices": [], "usage": usage})


def content_with_logprobs(text: str, tokens: list[str]) -> str:
    """A chat chunk carrying ``text`` and one ``logprobs.content`` entry per token."""
    entries = [{"token": t, "logprob": -0.1, "bytes": list(t.encode()), "top_logprobs": []} for t in tokens]
    choice = {"index": 0, "delta": {"content": text}, "logprobs": {"content": entries}, "finish_reason": None}
    return _dumps({**_CHAT, "choices": [choice]})


# NC-20: `delta.content` as a list of typed parts (thinking parts are reasoning, text parts content).
def test_nc20_content_as_list_of_typed_parts(run_scripted):
    def thinking(text: str) -> str:
        return C({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": text}]}]})

    writes = [
        W(10, sse(ROLE)),
        W(150, sse(thinking("Let me"))),
        W(170, sse(thinking(" check."))),
        W(300, sse(C({"content": [{"type": "text", "text": "42"}]}))),
        W(320, sse(C({"content": " is the answer."}))),
        W(330, sse(CF("stop"), U(11, 9), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.ttft_s == run.at(150)  # thinking parts are generated tokens
    assert record.ttfc_s == run.at(300)  # the first text part is the first content
    assert record.completion_tokens.value == 9
    assert record.completion_tokens.source is TokenSource.SERVER
    assert len(record.token_times_s) == 4


# NC-20 (kind): a delta field whose JSON type cannot be understood fails naming the field and its type.
def test_nc20_not_understood_field_is_a_stream_error_naming_path_and_type(run_scripted):
    writes = [W(10, sse(ROLE)), W(50, sse(C({"content": 42}))), W(60, sse(CF("stop"), "[DONE]"))]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "choices[0].delta.content is a number (42)" in record.error.message
    assert "concatenate" not in record.error.message


# NC-20 (kind): tool-call arguments sent as an object are counted as their JSON text.
def test_nc20_tool_call_arguments_as_object(run_scripted, recording_counter):
    call = {"index": 0, "id": "t1", "type": "function", "function": {"name": "f", "arguments": {"city": "Oslo"}}}
    writes = [W(10, sse(ROLE)), W(40, sse(C({"tool_calls": [call]}))), W(50, sse(CF("tool_calls"), "[DONE]"))]
    run = run_scripted(Reply(writes), token_counter=recording_counter)
    assert run.record.outcome is Outcome.OK, run.record.error
    assert run.record.ttft_s == run.at(40)
    assert recording_counter.texts[0] == 'f{"city":"Oslo"}'


# NC-23: reasoning tokens counted in usage but never streamed: TPOT over what was streamed.
def test_nc23_hidden_reasoning_tokens_tpot_over_streamed_tokens(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(500, sse(C({"content": "The"}))),
        W(520, sse(C({"content": " answer"}))),
        W(540, sse(C({"content": " is"}))),
        W(560, sse(C({"content": " 42"}))),
        W(570, sse(CF("stop"))),
        W(575, sse(usage_with_details(12, 104, reasoning_tokens=100), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 104
    assert record.reasoning_tokens == 100
    assert record.hidden_reasoning_tokens == 100
    assert record.streamed_tokens == 4
    assert UsageNote.HIDDEN_REASONING in record.usage_notes
    expected = (run.sent(560) - run.sent(500)) / 3  # 20 ms, not 60 ms / 103 = 0.58 ms
    assert record.tpot_s == near(expected)
    assert record.tpot_s > 0.015
    itl = record.itl_samples_s()
    assert record.itl_kind is ITLKind.TOKEN
    assert sum(itl) / len(itl) == near(expected)  # mean ITL equals TPOT


# NC-23 (kind): reasoning that was streamed stays in TPOT; cached prompt tokens are read.
def test_nc23_streamed_reasoning_is_not_hidden_and_cached_tokens_are_read(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(C({"reasoning_content": "hm"}))),
        W(120, sse(C({"content": "ok"}))),
        W(130, sse(CF("stop"), usage_with_details(30, 2, reasoning_tokens=1, cached_tokens=16), "[DONE]")),
    ]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.OK, record.error
    assert (record.reasoning_tokens, record.hidden_reasoning_tokens, record.cached_prompt_tokens) == (1, 0, 16)
    assert record.streamed_tokens == 2
    assert record.usage_notes == ()


# NC-26: several tokens per chunk, counted in `logprobs.content`, no usage.
def test_nc26_tokens_counted_from_logprobs_without_usage(run_scripted):
    request = build_chat_request(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=16, extra={"logprobs": True}
    )
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(content_with_logprobs("Hello there", ["Hello", " there"]))),
        W(130, sse(content_with_logprobs("! How", ["!", " How"]))),
        W(160, sse(content_with_logprobs(" are you?", [" are", " you", "?"]))),
        W(170, sse(CF("stop"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes), request)
    record = run.record
    assert run.requests[0].json()["logprobs"] is True
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 7
    assert record.completion_tokens.source is TokenSource.LOGPROBS
    assert record.token_counts == [2, 2, 3]
    assert record.tpot_s == near((run.sent(160) - run.sent(100)) / 6)  # 10 ms
    assert record.itl_kind is ITLKind.TOKEN


# NC-26 (kind): usage below the number of token-bearing events is not used; logprobs are.
def test_nc26_usage_below_token_events_falls_back_to_logprobs(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(content_with_logprobs("Hi", ["Hi"]))),
        W(120, sse(content_with_logprobs(" you", [" you"]))),
        W(140, sse(content_with_logprobs(" two", [" two"]))),
        W(150, sse(CF("stop"), U(5, 1), "[DONE]")),
    ]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 3
    assert record.completion_tokens.source is TokenSource.LOGPROBS
    assert UsageNote.BELOW_EVENTS in record.usage_notes


# NC-25: reasoning mirrored in both `reasoning` and `reasoning_content` is counted once.
def test_nc25_mirrored_reasoning_counted_once(run_scripted, recording_counter):
    writes = [
        W(10, sse(ROLE)),
        W(100, sse(C({"reasoning": "Think", "reasoning_content": "Think"}))),
        W(120, sse(C({"reasoning": " more", "reasoning_content": " more"}))),
        W(140, sse(C({"content": "Done"}))),
        W(150, sse(CF("stop"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes), token_counter=recording_counter)
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert recording_counter.texts[0] == "Think moreDone"
    assert len(record.token_times_s) == 3
    assert record.ttft_s == run.at(100)
    assert record.ttfc_s == run.at(140)


# NC-32: `finish_reason: "stop"` on every chunk: read on to `[DONE]`.
def test_nc32_finish_reason_on_every_chunk_reads_on_to_done(run_scripted):
    def stop_chunk(text: str) -> str:
        return _dumps({**_CHAT, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]})

    writes = [
        W(10, sse(ROLE)),
        W(100, sse(stop_chunk("Hel"))),
        W(120, sse(stop_chunk("lo"))),
        W(140, sse(stop_chunk(" you"))),
        W(150, sse(U(4, 3), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert len(record.token_times_s) == 3
    assert record.completion_tokens.value == 3
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.e2e_s == run.at(150)
    assert record.tpot_s == near((run.sent(140) - run.sent(100)) / 2)
