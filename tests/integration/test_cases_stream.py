"""Stream parsing, token and timing cases over real HTTP: ScriptedServer → GeventHTTPTransport → StreamingClient.

``run.at(100)`` is the moment the write scheduled at 100 ms was really sent,
in seconds after the client's send, compared within ±5 ms: on a quiet
machine that is the case's stated value; on a busy one the server's own
lateness (checked < 50 ms) does not fail the client.
"""

from __future__ import annotations

import json

import pytest

from llmload.request.chunks import parse_chunk
from llmload.request.payloads import build_completion_request
from llmload.request.record import ITLKind, Outcome, TokenSource
from llmload.request.sse import SSEDecoder
from llmload.request.tokens import HFTokenCounter
from llmload.testing import CF, ROLE, TF, TU, C, Ending, Reply, T, U, W, Write, json_reply, sse
from tests.conftest import near

pytestmark = [pytest.mark.integration, pytest.mark.timing]


def text_of(writes: list[Write]) -> str:
    """The generated text carried by ``writes``, decoded with the same byte splits as on the wire."""
    decoder, text = SSEDecoder(), ""
    for write in writes:
        for event in decoder.feed(write.data):
            if event.data != "[DONE]":
                text += parse_chunk(json.loads(event.data)).text
    return text


def completion_request():
    return build_completion_request(model="m", prompt="count", max_tokens=16)


# ── A. SSE stream parsing ──────────────────────────────────────────────────
# BC-01: Several SSE events in one TCP write are all read.
def test_bc01_several_events_in_one_write(run_scripted):
    writes = [
        W(100, sse(ROLE, C({"content": "Hel"}), C({"content": "lo"}))),
        W(150, sse(C({"content": " world"}), CF("stop"), U(5, 3), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert text_of(writes) == "Hello world"
    assert len(record.token_times_s) == 3
    assert record.completion_tokens.value == 3
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.ttft_s == run.at(100)
    assert record.e2e_s == run.at(150)
    assert record.tpot_s == near((run.sent(150) - run.sent(100)) / 2)  # 25 ms


# BC-02: An event split across writes, inside the `data: ` prefix and inside a UTF-8 char.
def test_bc02_event_split_inside_prefix_and_utf8_char(run_scripted, recording_counter):
    writes = [
        W(100, b"data: "),
        W(110, ROLE.encode() + b"\n\nda"),
        W(120, b"ta: " + C({"content": "caf\u00e9"}).encode().split(b"\xa9")[0]),
        W(130, b"\xa9" + C({"content": "caf\u00e9"}).encode().split(b"\xa9")[1] + b"\n\n"),
        W(200, sse(C({"content": "!"}), CF("stop"), U(4, 2), "[DONE]")),
    ]
    assert writes[0].data == b"data: "
    assert writes[2].data.endswith(b"caf\xc3")
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.ttft_s == run.at(130)  # the role event at 110 ms is not a token
    assert record.completion_tokens.value == 2
    assert text_of(writes) == "café!"
    # the same bytes without usage: the client hands the tokenizer the joined, undamaged text
    no_usage = [*writes[:4], W(200, sse(C({"content": "!"}), CF("stop"), "[DONE]"))]
    run = run_scripted(Reply(no_usage), token_counter=recording_counter)
    record = run.record
    assert record.outcome is Outcome.OK
    assert recording_counter.texts[0] == "café!"
    assert "\ufffd" not in recording_counter.texts[0]


# BC-04: `data:` without the optional space.
def test_bc04_data_field_without_space(run_scripted):
    writes = [
        W(90, b"data:" + ROLE.encode() + b"\n\n"),
        W(
            100,
            b"data:" + C({"content": "x"}).encode() + b"\n\ndata:  " + C({"content": "y"}).encode() + b"\n\n",
        ),
        W(120, b"data:" + CF("stop").encode() + b"\n\ndata:[DONE]\n\n"),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert text_of(writes) == "xy"
    assert len(record.token_times_s) == 2
    assert record.ttft_s == run.at(100)
    assert record.e2e_s == run.at(120)


# BC-05: Comments, keep-alives and meta-only events are not tokens.
def test_bc05_comments_keepalives_and_meta_only_blocks(run_scripted):
    writes = [
        W(0, b": ping\n\nretry: 3000\n\n"),
        W(900, b"id: 1\ndata: " + ROLE.encode() + b"\n\n"),
        W(950, b":\n\n: keep-alive\n\n"),
        W(1000, b"id: 2\ndata: " + C({"content": "ok"}).encode() + b"\n\n: ping\n\nevent: ping\n\n"),
        W(1100, b"id: 3\ndata: " + CF("stop").encode() + b"\n\n" + sse(U(3, 1), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.ttft_s == run.at(1000)
    assert record.token_times_s == [run.at(1000)]
    assert record.completion_tokens.value == 1


# BC-06: A final usage chunk with `"choices": []`.
def test_bc06_final_usage_chunk_with_empty_choices(run_scripted):
    writes = [
        W(80, sse(ROLE)),
        W(100, sse(C({"content": "Hi"}))),
        W(120, sse(C({"content": " there"}))),
        W(140, sse(CF("stop"))),
        W(145, sse(U(12, 2), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert run.requests[0].json()["stream_options"] == {"include_usage": True}
    assert record.outcome is Outcome.OK
    assert record.prompt_tokens.value == 12
    assert record.prompt_tokens.source is TokenSource.SERVER
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.ttft_s == run.at(100)
    assert record.last_token_s == run.at(120)
    assert record.tpot_s == near(run.sent(120) - run.sent(100))  # 20 ms
    assert record.e2e_s == run.at(145)


# Usage sent on several chunks is cumulative: the last value wins, never a sum.
def test_bc06_cumulative_usage_takes_last_value(run_scripted):
    def chunk(content: str, completion_tokens: int) -> str:
        return C({"content": content})[:-1] + (
            f',"usage":{{"prompt_tokens":12,"completion_tokens":{completion_tokens},'
            f'"total_tokens":{12 + completion_tokens}}}}}'
        )

    writes = [
        W(80, sse(ROLE)),
        W(100, sse(chunk("Hi", 1))),
        W(120, sse(chunk(" there", 2))),
        W(140, sse(CF("stop"))),
        W(145, sse(U(12, 2), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.completion_tokens.value == 2  # not 1 + 2 + 2
    assert record.token_counts == [1, 1]
    assert record.itl_kind is ITLKind.TOKEN
    assert record.tpot_s == near(run.sent(120) - run.sent(100))  # 20 ms


# Without usage the client tokenizer counts the output.
def test_bc06_no_usage_falls_back_to_client_tokenizer(run_scripted, recording_counter):
    writes = [
        W(80, sse(ROLE)),
        W(100, sse(C({"content": "Hi"}))),
        W(120, sse(C({"content": " there"}))),
        W(140, sse(CF("stop"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes), token_counter=recording_counter)
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.TOKENIZER
    assert recording_counter.texts[0] == "Hi there"  # the full text, once
    assert record.prompt_tokens.source is TokenSource.TOKENIZER
    assert record.e2e_s == run.at(140)


@pytest.mark.parametrize("role", [ROLE, C({"role": "assistant", "content": None})], ids=["empty", "null"])
# BC-08: A role-only first chunk is not the first token.
def test_bc08_role_only_first_chunk_is_not_a_token(run_scripted, role):
    writes = [
        W(5, sse(role)),
        W(400, sse(C({"content": "Hi"}))),
        W(420, sse(C({"content": "!"}), CF("stop"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.ttft_s == run.at(400)
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.CHUNKS
    assert record.itl_samples_s() == [near(run.sent(420) - run.sent(400))]  # [20 ms]


# BC-09: An empty reply is no success with TTFT = 0.
def test_bc09_empty_response_is_not_a_success(run_scripted):
    writes = [W(50, sse(ROLE)), W(60, sse(CF("length"), U(20, 0), "[DONE]"))]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.EMPTY
    assert record.outcome.is_failure
    assert record.error is not None
    assert record.error.category == "empty response"
    assert "finish_reason='length'" in record.error.message
    assert record.ttft_s is None
    assert record.itl_samples_s() == []
    assert record.tpot_s is None
    assert record.completion_tokens.value == 0


# An error object sent mid-stream after HTTP 200.
def test_bc10_error_object_mid_stream(run_scripted):
    error = '{"error":{"message":"simulated engine failure","type":"InternalServerError","param":null,"code":500}}'
    writes = [
        W(100, sse(ROLE)),
        W(120, sse(C({"content": "The"}))),
        W(140, sse(C({"content": " answer"}))),
        W(150, sse(error, "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "InternalServerError/500"
    assert record.error.message == "simulated engine failure"
    assert len(record.token_times_s) == 2  # kept on the record; excluded by outcome


# An error object as the only event, then close.
def test_bc10_error_object_as_only_event_then_close(run_scripted):
    error = (
        '{"error":{"code":400,"message":"prompt of 5000 tokens does not fit context of 4096",'
        '"type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}'
    )
    run = run_scripted(Reply([W(30, sse(error))], ending=Ending.CLOSE))
    record = run.record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "exceed_context_size_error/400"
    assert "does not fit context" in record.error.message


# An HTTP 200 JSON error body on a streaming request.
def test_bc11_json_error_body_on_stream_request(run_scripted):
    body = (
        '{"object":"error","message":"model \'nope\' is not served here","type":"NotFoundError",'
        '"param":null,"code":404}'
    )
    assert len(body.encode()) == 109
    run = run_scripted(json_reply(200, body))
    record = run.record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "NotFoundError/404"
    assert record.error.message == "model 'nope' is not served here"


# BC-12: Reasoning deltas (`reasoning_content` / `reasoning`) are tokens.
def test_bc12_reasoning_deltas_count_as_tokens(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(300, sse(C({"reasoning_content": "Let"}))),
        W(320, sse(C({"reasoning_content": " me"}))),
        W(340, sse(C({"reasoning": " think"}))),
        W(900, sse(C({"content": "42"}))),
        W(910, sse(CF("stop"), U(10, 5), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.ttft_s == run.at(300)
    assert record.ttfc_s == run.at(900)
    assert record.completion_tokens.value == 5


# A reasoning-only reply has tokens but no first content.
def test_bc12_reasoning_only_reply_has_no_first_content(run_scripted):
    writes = [
        W(10, sse(ROLE)),
        W(300, sse(C({"reasoning_content": "Let"}))),
        W(320, sse(C({"reasoning_content": " me"}))),
        W(340, sse(C({"reasoning": " think"}))),
        W(350, sse(CF("length"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.ttft_s == run.at(300)
    assert record.ttfc_s is None
    assert record.completion_tokens.value == 3


# ── B. Token counting ──────────────────────────────────────────────────────
# BC-14: Multi-token chunks: tokens come from usage, not from counting events.
def test_bc14_multi_token_chunks_use_server_counts(run_scripted):
    writes = [
        W(100, sse(TU("one two three four", 4, None))),
        W(110, sse(TU(" five six seven eight", 8, None))),
        W(120, sse(TU(" nine ten eleven twelve", 12, None))),
        W(130, sse(TU(" thirteen fourteen fifteen sixteen", 16, "length"))),
        W(131, sse("[DONE]")),
    ]
    request = build_completion_request(
        model="m", prompt="count", max_tokens=16, extra={"stream_options": {"continuous_usage_stats": True}}
    )
    run = run_scripted(Reply(writes), request)
    record = run.record
    assert run.requests[0].json()["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert record.outcome is Outcome.OK
    assert record.completion_tokens.value == 16
    assert record.token_counts == [4, 4, 4, 4]
    assert record.tpot_s == near((run.sent(130) - run.sent(100)) / 15)  # 2 ms
    # 16 tokens, 15 ITL samples: the first event's 3 other tokens are 0 s, then three gaps
    # each spread over 4 tokens; they add up to last − first token, so mean ITL = TPOT
    samples = record.itl_samples_s()
    assert len(samples) == 15
    assert sum(samples) == pytest.approx(record.token_times_s[-1] - record.token_times_s[0])


@pytest.mark.parametrize("bos", [False, True], ids=["plain", "bos-post-processor"])
# The client tokenizer counts the joined text once (no per-chunk re-tokenisation, no BOS per chunk).
def test_bc15_client_tokenizer_counts_joined_text_once(run_scripted, tiny_tokenizer, tiny_bos_tokenizer, bos):
    tokenizer = tiny_bos_tokenizer if bos else tiny_tokenizer
    assert len(tokenizer.encode("Hello world").ids) == (3 if bos else 2)  # the BOS really is added by default
    per_chunk = sum(len(tokenizer.encode(s, add_special_tokens=False).ids) for s in ("Hel", "lo", " world"))
    assert per_chunk > 2
    writes = [
        W(100, sse(C({"content": "Hel"}))),
        W(110, sse(C({"content": "lo"}))),
        W(120, sse(C({"content": " world"}), CF("stop"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes), token_counter=HFTokenCounter(tokenizer))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.TOKENIZER


# ── C. Timing definitions ──────────────────────────────────────────────────
# The ITL list does not contain the TTFT.
def test_bc18_itl_excludes_ttft(run_scripted):
    writes = [
        W(500, sse(T("a"))),
        W(520, sse(T("b"))),
        W(540, sse(T("c"))),
        W(541, sse(TF("stop"), "[DONE]")),
    ]
    run = run_scripted(Reply(writes), completion_request())
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.finish_reason == "stop"
    assert record.ttft_s == run.at(500)
    gaps = [run.sent(520) - run.sent(500), run.sent(540) - run.sent(520)]  # [20 ms, 20 ms]
    assert record.itl_samples_s() == [near(gaps[0]), near(gaps[1])]
    assert record.tpot_s == near(sum(gaps) / 2)


@pytest.mark.slow
# BC-21: E2E covers the whole stream, not the time to headers.
def test_bc21_e2e_covers_the_whole_stream_not_the_headers(run_scripted):
    writes = [W(60, sse(ROLE))]
    writes += [W(160 + 100 * i, sse(C({"content": f" t{i}"}))) for i in range(29)]
    writes.append(W(3060, sse(C({"content": " t29"}), CF("stop"), "[DONE]")))
    run = run_scripted(Reply(writes, headers_at_ms=50))
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.headers_s == near(run.headers_sent())  # 50 ms
    assert record.ttft_s == run.at(160)
    assert record.e2e_s == run.at(3060)
    assert len(record.token_times_s) == 30
