"""ReplyReader: events of one reply into a ReplyAccumulator, plain token deltas through a learned template."""

from __future__ import annotations

import json
import time

import pytest

from llmload.request.record import Outcome
from llmload.request.stream import LoopTokens, ReplyFailure, ReplyReader
from llmload.testing import CF, TF, C, T, U, sse


def _created(payload: str, second: int) -> str:
    return payload.replace('"created":0', f'"created":{second}')


def test_reply_reader_learns_again_when_the_server_changes_a_field_of_its_deltas():
    # llama-server writes the current second as "created" into every chunk
    reader = ReplyReader()
    for i in range(40):
        reader.feed(sse(_created(T(f" w{i}"), 1 if i < 20 else 2)), float(i))
    template = reader._template
    assert template is not None
    assert '"created":2' in template.prefix  # learned again after the change
    assert len(reader.acc.token_times_s) == 40
    assert reader.acc.pieces == [f" w{i}" for i in range(40)]


def test_reply_reader_splits_a_run_and_decodes_what_follows_it():
    reader = ReplyReader()
    reader.feed(sse(T("a")), 0.0)  # learns the template
    reader.feed(sse(T(" b"), T(" c"), TF("length"), "[DONE]"), 1.0)
    assert reader.acc.pieces == ["a", " b", " c"]
    assert reader.acc.token_times_s == [0.0, 1.0, 1.0]
    assert reader.acc.finish_reason == "length"
    assert reader.acc.done is True


def test_reply_reader_raises_a_server_error_after_a_run_of_deltas():
    reader = ReplyReader()
    reader.feed(sse(T("a")), 0.0)
    with pytest.raises(ReplyFailure) as failure:
        reader.feed(sse(T(" b"), '{"error":{"message":"boom","type":"InternalServerError"}}'), 1.0)
    assert failure.value.outcome is Outcome.SERVER_ERROR
    assert reader.acc.pieces == ["a", " b"]  # tokens before the error are accounted (and excluded later)


# NC-21: a [DONE] whose blank line never comes still ends the reply, on every path of the reader.
@pytest.mark.parametrize("done", [b"data: [DONE]", b"data: [DONE]\n", b"data:[DONE]\r\n"])
def test_nc21_reply_reader_ends_at_a_done_line_without_its_blank_line(done):
    plain = sse(C({"content": "a"}), C({"content": "b"}))
    for reads in ([plain + done], [plain, done], [plain + sse(CF("stop")) + done], [plain, b"data: [DO", b"NE]\n"]):
        reader = ReplyReader()
        for data in reads:
            reader.feed(data, 1.0)
        assert reader.acc.done, reads
        assert reader.acc.pieces == ["a", "b"]


# NC-27: the event pending at the end of the body is accounted by finish().
def test_nc27_reply_reader_finish_accounts_the_pending_event():
    reader = ReplyReader()
    reader.feed(sse(C({"content": "a"})) + b"data: " + CF("stop").encode() + b"\n", 1.0)
    assert reader.acc.finish_reason is None
    reader.finish(2.0)
    assert reader.acc.finish_reason == "stop"


def _read(*reads: bytes) -> ReplyReader:
    reader = ReplyReader()
    for i, data in enumerate(reads):
        reader.feed(data, 0.01 * (i + 1))
    return reader


def test_nc21_kind_usage_chunk_with_no_choices_after_a_finish_ends_the_reply():
    reader = _read(sse(C({"content": "Hi"})), sse(CF("stop")), sse(U(5, 1)))
    assert reader.usage_ended
    assert not reader.acc.done
    assert reader.acc.completion_tokens == 1


@pytest.mark.parametrize(
    "reads",
    [
        (sse(U(5, 0)), sse(C({"content": "Hi"}))),  # usage before any finish
        (  # per-chunk usage (continuous usage stats): choices are not empty
            sse(
                '{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}],'
                '"usage":{"completion_tokens":1}}'
            ),
        ),
    ],
    ids=["usage-first", "usage-on-a-token-chunk"],
)
def test_nc21_kind_usage_that_is_not_the_final_chunk_does_not_end_the_reply(reads):
    assert not _read(*reads).usage_ended


def test_nc32_kind_finish_wait_starts_only_after_a_finish_chunk_without_a_token():
    stop = '{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":"stop"}]}'
    reader = _read(sse(stop % "a"), sse(stop % "b"))
    assert reader.finish_at_s is None  # tokens that carry a finish_reason: read on to [DONE]
    reader.feed(sse(CF("stop")), 0.5)
    assert reader.finish_at_s == 0.5
    reader.feed(sse(C({"content": "c"})), 0.6)
    assert reader.finish_at_s is None


# ── LoopTokens: whole plain token events accounted in the loop, as ReplyReader.feed would ──
_NOW_S = 100.0  # the client clock's reading in these tests (t0 = 90 s: arrivals are ~10 s after the send)


def _loop_tokens(reader: ReplyReader, deadline_s: float = 1e9) -> tuple[LoopTokens, list[float]]:
    lags: list[float] = []
    return LoopTokens(reader, lags, lambda: _NOW_S, 90.0, deadline_s), lags


def _llama_server_chunk(text: str) -> str:
    """A chat chunk laid out as llama-server writes it: choices first, the reply's id and second after the text."""
    chunk = {
        "choices": [{"finish_reason": None, "index": 0, "delta": {"content": text}}],
        "created": 1733423456,
        "id": "chatcmpl-5QYb2kq",
        "model": "m",
        "system_fingerprint": "b4100",
        "object": "chat.completion.chunk",
    }
    return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    "token", [T, lambda text: C({"content": text}), _llama_server_chunk], ids=["completions", "chat", "llama-server"]
)
def test_issue19_loop_tokens_account_a_plain_event_as_feed_does_at_its_stamp(token):
    fed, tapped = ReplyReader(), ReplyReader()
    for reader in (fed, tapped):
        reader.feed(sse(token("a")), 1.0)  # learns the template
    tap, lags = _loop_tokens(tapped)
    stamp_ns = time.time_ns() - 5_000_000  # arrived 5 ms ago
    texts = [" b", " ünï", " ✓ c", " 1,2;3"]
    for text in texts:
        assert tap.take(sse(token(text)), stamp_ns)
        fed.feed(sse(token(text)), 9.995)
    assert tapped.acc.pieces == fed.acc.pieces == ["a", *texts]
    assert tapped.acc.events == fed.acc.events
    assert tapped.acc.first_content_s == fed.acc.first_content_s
    assert tapped.acc.token_times_s[0] == 1.0
    assert tapped.acc.token_times_s[1:] == pytest.approx([9.995] * 4, abs=0.002)  # _NOW_S - t0 - 5 ms
    assert tap.t == tapped.acc.token_times_s[-1]
    assert lags == [0.0] * 4  # one event and nothing past it: the stamp is its own arrival
    assert tap.size == sum(len(sse(token(text))) for text in texts)


def test_issue19_loop_tokens_leave_every_other_receive_to_the_reader():
    reader = ReplyReader()
    stamp_ns = time.time_ns()
    tap, lags = _loop_tokens(reader)
    assert not tap.take(sse(T("a")), stamp_ns)  # no template learned yet: the reader times the first token
    reader.feed(sse(T("a")), 1.0)
    declined = [
        sse(T(" b"), T(" c")),  # two events: the reader splits them and rules their lag
        sse(T(' "q"')),  # escaped text
        sse(T("back\\slash")),
        sse(T("line\u2028sep")),  # not printable (sent unescaped: JSON allows it)
        sse(T(" b")) + b"data: ",  # bytes past the event
        sse(T(" b"))[:-1],  # the blank line still to come
        sse(TF("length")),  # a finish chunk
        sse(T(" b")).replace(b"data: ", b"data:"),  # another spelling of the field
        sse(T(" b")).replace(b" b", b" \xff"),  # not UTF-8
        sse(T("")),  # no text
    ]
    for data in declined:
        assert tap.take(data, stamp_ns) is False, data
    assert reader.acc.pieces == ["a"]
    assert lags == []
    reader.feed(b"data: {", 2.0)  # a partial event pending in the decoder: the next bytes complete it
    assert not tap.take(sse(T(" b")), stamp_ns)


def test_issue19_loop_tokens_wake_the_reader_at_once_for_the_first_receive_left_after_accounted_ones():
    # A busy process let the kernel merge two events into one receive in the middle of a reply whose
    # tokens were accounted in the loop. Woken at the batch time (100 ms later), the user would have
    # every receive until then queued behind that one and decoded in its greenlet; woken at once, it
    # decodes that one and the loop accounts the next again. Left ones that follow stay batched.
    reader = ReplyReader()
    reader.feed(sse(T("a")), 1.0)
    tap, _ = _loop_tokens(reader)
    stamp_ns = time.time_ns()
    assert tap.take(sse(T(" b")), stamp_ns) is True
    assert tap.take(sse(T(" c"), T(" d")), stamp_ns) is None  # the first left after an accounted one: now
    assert tap.take(sse(T(" e"), T(" f")), stamp_ns) is False  # left again: the batched wake-up
    assert tap.take(sse(T(" g")), stamp_ns, queued=True) is False  # queued behind them
    reader.feed(sse(T(" c"), T(" d"), T(" e"), T(" f"), T(" g")), 2.0)  # the user took them
    assert tap.take(sse(T(" h")), stamp_ns) is True  # accounted in the loop again
    assert tap.take(sse(T(' "q"')), stamp_ns) is None  # escaped text right after: the reader, at once
    reader.feed(sse(T(' "q"')), 2.5)
    assert tap.take(sse(T(" i")), stamp_ns) is True
    assert tap.take(sse(T(" j")), stamp_ns, queued=True) is False  # receives queued past the loop meanwhile:
    reader.feed(sse(T(" j")), 3.0)
    assert tap.take(sse(T(" k"), T(" l")), stamp_ns) is False  # the next one left is not "right after"
    assert reader.acc.pieces == ["a", " b", " c", " d", " e", " f", " g", " h", ' "q"', " i", " j"]
    # several events per write from the start: every receive is left, none at once (batched)
    merged = ReplyReader()
    merged.feed(sse(T("a")), 1.0)
    tap, _ = _loop_tokens(merged)
    assert [tap.take(sse(T(" b"), T(" c")), stamp_ns) for _ in range(3)] == [False] * 3


def test_issue19_loop_tokens_leave_tokens_after_a_finish_or_past_the_total_timeout_to_the_reader():
    reader = ReplyReader()
    reader.feed(sse(T("a"), TF("length")), 1.0)
    assert reader.finish_at_s == 1.0  # the read loop waits a bounded time for usage or [DONE]
    tap, _ = _loop_tokens(reader)
    assert not tap.take(sse(T(" b")), time.time_ns())
    late = ReplyReader()
    late.feed(sse(T("a")), 1.0)
    tap, lags = _loop_tokens(late, deadline_s=5.0)  # arrivals here are ~10 s after the send
    assert tap.take(sse(T(" b")), time.time_ns()) is None  # the read loop raises the total timeout: wake it now
    assert tap.take(sse(T(' "q"')), time.time_ns()) is None  # anything it leaves to the reader, past the timeout
    assert tap.take(sse(T(" b")), time.time_ns(), queued=True) is None  # queued behind earlier bytes too
    in_time, _ = _loop_tokens(late)
    assert in_time.take(sse(T(" b")), time.time_ns(), queued=True) is False  # behind earlier bytes: never taken
    assert late.acc.pieces == ["a"]
    assert lags == []
