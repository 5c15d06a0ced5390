"""SSEDecoder properties: chunk-boundary invariance, agreement with a plain reading of the spec, no crash."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.request.sse import SSEDecoder, SSEEvent

# ── a straightforward, whole-stream reading of the WHATWG algorithm ──────
_LINE_END = re.compile(r"\r\n|\r|\n")


def reference_decode(raw: bytes) -> list[SSEEvent]:
    text = raw.decode("utf-8", "replace")
    text = text.removeprefix("\ufeff")
    parts = _LINE_END.split(text)
    # The end of the stream ends an unterminated last line and then the event (as a blank line
    # would): llmload dispatches the pending event where the standard discards it (NC-27).
    lines = [*parts[:-1], parts[-1], ""] if parts[-1] else [*parts[:-1], ""]
    events: list[SSEEvent] = []
    data, event_type, last_id = "", "", ""
    for line in lines:
        if line == "":
            if data:
                events.append(SSEEvent(data[:-1], event_type or None, last_id or None))
            data, event_type = "", ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data += value + "\n"
        elif name == "event":
            event_type = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return events


def decode_in_pieces(raw: bytes, cuts: list[int]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    start = 0
    for cut in [*sorted(cuts), len(raw)]:
        events += decoder.feed(raw[start:cut])
        start = cut
    return events + decoder.flush()


# ── stream generator: realistic lines with every line-end style ──────────
_text = st.text(alphabet=st.sampled_from([*'abc {}":,é€🦙\u00a0', "\ufeff"]), max_size=12)
_line = st.one_of(
    st.builds(lambda v, sp: "data:" + (" " if sp else "") + v, _text, st.booleans()),
    st.builds(lambda v: "data:" + v, _text),
    st.builds(lambda v: ": " + v, _text),  # comment / keep-alive
    st.builds(lambda v: "event: " + v, _text),
    st.builds(lambda v: "id: " + v, _text),
    st.just("retry: 3000"),
    st.just("data"),
    st.just(""),  # blank line: dispatch
)
_eol = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.tuples(_line, _eol), max_size=25))
    bom = "\ufeff" if draw(st.booleans()) else ""
    tail = draw(st.sampled_from(["", "\n\n", "data: unterminated"]))
    return (bom + "".join(line + eol for line, eol in lines) + tail).encode()


@st.composite
def stream_and_cuts(draw: st.DrawFn, streams: st.SearchStrategy[bytes]) -> tuple[bytes, list[int]]:
    raw = draw(streams)
    cuts = draw(st.lists(st.integers(min_value=0, max_value=len(raw)), max_size=20, unique=True))
    return raw, cuts


@settings(max_examples=400, deadline=None)
@given(stream_and_cuts(sse_streams()))
def test_sse_decoder_ignores_chunk_boundaries(case):
    raw, cuts = case
    assert decode_in_pieces(raw, cuts) == decode_in_pieces(raw, [])


@settings(max_examples=400, deadline=None)
@given(stream_and_cuts(sse_streams()))
def test_sse_decoder_matches_whole_stream_reference(case):
    raw, cuts = case
    assert decode_in_pieces(raw, cuts) == reference_decode(raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(['data: {"a":1}', "data:[DONE]", 'data:  {"é":"🦙"}']), max_size=10))
def test_sse_decoder_fast_path_matches_reference(lines):
    # one complete single-line event per feed: every feed takes the fast path
    raw_events = [(line + "\n\n").encode() for line in lines]
    decoder = SSEDecoder()
    events = [e for raw in raw_events for e in decoder.feed(raw)]
    assert events == reference_decode(b"".join(raw_events))


@settings(max_examples=500, deadline=None)
@given(stream_and_cuts(st.binary(max_size=200)))
def test_sse_decoder_never_raises_on_random_bytes(case):
    raw, cuts = case
    events = decode_in_pieces(raw, cuts)
    assert events == reference_decode(raw)


@settings(max_examples=300, deadline=None)
@given(
    stream_and_cuts(
        st.lists(st.sampled_from([b"data:", b" ", b"\r", b"\n", b":", b"\xc3", b"\xa9", b"\xff", b"x", b"id"])).map(
            b"".join
        )
    )
)
def test_sse_decoder_split_invariant_on_adversarial_bytes(case):
    raw, cuts = case
    assert decode_in_pieces(raw, cuts) == reference_decode(raw)


_whole_blocks = st.lists(
    st.sampled_from(
        [
            *['data: {"a":1}\n\n', "data:[DONE]\n\n", 'data:  {"é":"🦙"}\n\n', "data:\n\n", "data: a:b\n\n"],
            *["id: 7\ndata: x\n\n", ": ping\n\n", "event: error\ndata: e\n\n", "data: 1\ndata: 2\n\n", "\n"],
        ]
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_whole_blocks, max_size=8))
def test_sse_decoder_several_whole_events_per_feed_match_reference(feeds):
    # each feed is whole events: the multi-event fast path, or the general path when a block
    # carries another field, a comment or a blank line
    raw_feeds = ["".join(blocks).encode() for blocks in feeds]
    decoder = SSEDecoder()
    events = [e for raw in raw_feeds for e in decoder.feed(raw)]
    assert events == reference_decode(b"".join(raw_feeds))
