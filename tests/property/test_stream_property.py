"""ReplyReader properties: the plain-delta fast path accounts exactly what decoding every event would."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.request.chunks import ReplyAccumulator, parse_chunk
from llmload.request.sse import SSEDecoder
from llmload.request.stream import ReplyReader
from llmload.testing import ROLE, TF, TU, C, T, U

_PLAIN = st.sampled_from(["a", " b", "x", "é", "data: ", "}", "💡", " the"])
_AWKWARD = st.sampled_from(['"', "\\", "\u2028", "\n", "\t", "\r", "\x00"])
_TEXTS = st.one_of(
    st.lists(_PLAIN, max_size=4).map("".join),  # mostly plain deltas: the fast path
    st.lists(st.one_of(_PLAIN, _AWKWARD), max_size=4).map("".join),
)
_CHAT_TEXTS = st.lists(_TEXTS, min_size=1, max_size=30)


def _event(payload: str, *, crlf: bool = False, space: bool = True) -> bytes:
    sep = "\r\n" if crlf else "\n"
    return f"data:{' ' if space else ''}{payload}{sep}{sep}".encode()


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """A reply's events: token deltas with awkward texts, now and then another shape."""
    chat = draw(st.booleans())
    events = [_event(ROLE)] if chat else []
    for text in draw(_CHAT_TEXTS):
        payload = C({"content": text}) if chat else T(text)
        events.append(_event(payload, crlf=draw(st.integers(0, 9)) == 0, space=draw(st.integers(0, 9)) != 0))
        extra = draw(st.integers(0, 19))
        if extra == 0:
            events.append(b": ping\n\n")
        elif extra == 1:
            events.append(_event(C({"reasoning_content": text}) if chat else TU(text, 1, None)))
        elif extra == 2:
            events.append(_event(T(text).replace('"c1"', '"c2"')))  # the server changed the id
    events.append(_event(TF("length") if not chat else U(3, 4)))
    events.append(_event("[DONE]"))
    events.append(_event(T("after the end")))
    return events


def _reference(reads: list[bytes]) -> ReplyAccumulator:
    """Every event through the SSE decoder and the JSON decoder, nothing skipped."""
    acc = ReplyAccumulator()
    decoder = SSEDecoder()
    for t, data in enumerate(reads):
        for event in decoder.feed(data):
            if acc.done:
                break
            if event.data == "[DONE]":
                acc.done = True
                continue
            acc.add(parse_chunk(json.loads(event.data)), float(t))
    return acc


def _state(acc: ReplyAccumulator) -> tuple[object, ...]:
    return (
        acc.pieces,
        acc.token_times_s,
        acc.first_content_s,
        acc.finish_reason,
        acc.prompt_tokens,
        acc.completion_tokens,
        acc.usage_per_event(),
        acc.logprob_counts(),
        acc.usage_log,
        acc.reasoning_streamed,
        acc.done,
    )


@settings(max_examples=300, deadline=None)
@given(events=streams(), cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12), data=st.data())
def test_reply_reader_equals_decoding_every_event(events, cuts, data):
    raw = b"".join(events)
    if data.draw(st.booleans()):
        bounds = sorted({c % (len(raw) + 1) for c in cuts})  # anywhere, even inside a character
    else:
        ends = [sum(len(e) for e in events[: i + 1]) for i in range(len(events))]
        bounds = sorted({ends[c % len(ends)] for c in cuts})  # at event boundaries: the fast path
    reads = [raw[a:b] for a, b in zip([0, *bounds], [*bounds, len(raw)], strict=True) if b > a]
    reader = ReplyReader()
    for t, chunk in enumerate(reads):
        if not reader.acc.done:
            reader.feed(chunk, float(t))
    assert _state(reader.acc) == _state(_reference(reads))


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=40),
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.05, allow_nan=False), min_size=40, max_size=40),
)
def test_itl_samples_add_up_to_the_decode_time_whatever_the_chunking(counts, gaps):
    # n tokens in events of random sizes (server-reported per-event counts): exactly
    # n - 1 samples, summing to last - first token time, so mean ITL == TPOT
    # (none, and no TPOT, when all the tokens came at one instant).
    from llmload.request.record import RequestRecord, TokenCount, TokenSource

    times = [0.1]
    for gap in gaps[: len(counts) - 1]:
        times.append(times[-1] + gap)
    total = sum(counts)
    record = RequestRecord(
        endpoint="completions",
        model="m",
        started_at_unix=0.0,
        token_times_s=times,
        token_counts=list(counts),
        completion_tokens=TokenCount(total, TokenSource.SERVER),
        end_s=times[-1],
    )
    samples = record.itl_samples_s()
    if len(times) < 2 or times[-1] <= times[0]:  # the tokens did not spread over time: unknown, not 0
        assert samples == []
        assert record.tpot_s is None
        return
    assert len(samples) == total - 1
    assert min(samples, default=0.0) >= 0.0
    assert abs(sum(samples) - (times[-1] - times[0])) < 1e-9
    if total > 1:
        assert record.tpot_s is not None
        assert abs(sum(samples) / len(samples) - record.tpot_s) < 1e-9
