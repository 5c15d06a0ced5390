"""SSEDecoder: WHATWG event-stream parsing, fed in arbitrary pieces."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from llmload.request.sse import SSEDecoder, SSEEvent, is_done
from llmload.request.stream import ReplyReader


def feed_all(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def datas(*chunks: bytes) -> list[str]:
    return [event.data for event in feed_all(*chunks)]


def test_sse_decoder_single_event_per_chunk():
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\n') == [SSEEvent('{"a":1}')]
    assert decoder.feed(b"data: [DONE]\n\n") == [SSEEvent("[DONE]")]


def test_sse_decoder_several_events_in_one_chunk():
    assert datas(b"data: a\n\ndata: b\n\ndata: c\n\n") == ["a", "b", "c"]


def test_sse_decoder_event_split_inside_the_field_name():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\n\nda") == [SSEEvent("x")]
    assert decoder.feed(b"ta: y\n\n") == [SSEEvent("y")]


def test_sse_decoder_crlf_and_cr_line_ends():
    assert datas(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == ["a", "b", "c"]


def test_sse_decoder_cr_then_lf_in_next_feed_is_one_line_end():
    # If CR and LF were two line ends, the second would dispatch "a" before "b" is appended.
    assert datas(b"data: a\r", b"\ndata: b\r\n\r\n") == ["a\nb"]


def test_sse_decoder_cr_then_lf_alone_in_next_feed():
    assert datas(b"data: a\r", b"\n", b"\r\n") == ["a"]


def test_sse_decoder_ignores_comments_and_meta_only_blocks():
    stream = b": ping\n\nretry: 3000\n\nid: 7\n\nevent: ping\n\n:\n\ndata: x\n\n"
    assert feed_all(stream) == [SSEEvent("x", None, "7")]


def test_sse_decoder_joins_multiline_data_with_lf():
    assert datas(b"data: a\ndata:\ndata: c\n\n") == ["a\n\nc"]


def test_sse_decoder_strips_exactly_one_space():
    assert datas(b"data:x\n\ndata: x\n\ndata:  x\n\n") == ["x", "x", " x"]


def test_sse_decoder_empty_data_field_dispatches_empty_event():
    assert datas(b"data:\n\n") == [""]


def test_sse_decoder_field_without_colon_is_a_field_with_empty_value():
    assert datas(b"data\n\n") == [""]
    assert datas(b"event\ndata: x\n\n") == ["x"]


def test_sse_decoder_unknown_fields_ignored():
    assert datas(b"foo: bar\ndata: x\n\n") == ["x"]


def test_sse_decoder_utf8_char_split_across_feeds():
    assert datas(b"data: caf\xc3", b"\xa9\n\n") == ["café"]


def test_sse_decoder_four_byte_char_split_in_every_position():
    raw = "data: 🦙\n\n".encode()
    for cut in range(len(raw) + 1):
        assert datas(raw[:cut], raw[cut:]) == ["🦙"]


def test_sse_decoder_invalid_utf8_becomes_replacement_char():
    assert datas(b"data: a\xffb\n\n") == ["a\ufffdb"]
    assert datas(b"data: a\xc3", b"b\n\n") == ["a\ufffdb"]


def test_sse_decoder_event_type_applies_to_one_event():
    assert feed_all(b"event: error\ndata: x\n\ndata: y\n\n") == [SSEEvent("x", "error"), SSEEvent("y")]


def test_sse_decoder_id_persists_and_empty_id_resets():
    events = feed_all(b"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n")
    assert [e.id for e in events] == ["1", "1", None]


def test_sse_decoder_id_with_nul_is_ignored():
    assert feed_all(b"id: 1\n\nid: 2\x003\ndata: a\n\n") == [SSEEvent("a", None, "1")]


def test_sse_decoder_leading_bom_dropped_once():
    assert datas(b"\xef\xbb\xbfdata: a\n\n") == ["a"]
    assert datas(b"\xef\xbb", b"\xbfdata: a\n\n") == ["a"]
    # a BOM later in the stream is not a BOM but part of a field name
    assert datas(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == ["a"]


# NC-27: the event pending at the end of the body is dispatched, not discarded.
def test_nc27_sse_decoder_flush_dispatches_event_without_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: pending\n") == [SSEEvent("a")]
    assert decoder.has_partial_event
    assert decoder.flush() == [SSEEvent("pending")]
    assert not decoder.has_partial_event
    assert decoder.flush() == []


def test_nc27_sse_decoder_flush_ends_an_unterminated_last_line():
    assert datas(b"data: a\n\nid: 4\nevent: x\ndata: b\ndata: c") == ["a", "b\nc"]
    assert feed_all(b"event: x\ndata: b\r")[-1] == SSEEvent("b", "x")
    assert datas(b"data: caf\xc3") == ["caf\ufffd"]  # a cut-short character, never an exception


def test_sse_decoder_flush_after_complete_events_dispatches_nothing():
    for stream in (b"data: a\n\n", b"data: a\r\n\r", b"data: a\n\n: ping\n", b"data: a\n\nevent: x\n"):
        decoder = SSEDecoder()
        assert decoder.feed(stream) == [SSEEvent("a")]
        assert decoder.flush() == []


def test_sse_decoder_no_partial_event_after_complete_events():
    decoder = SSEDecoder()
    decoder.feed(b"data: a\r\n\r")
    assert not decoder.has_partial_event


def test_sse_decoder_reusable_after_flush():
    decoder = SSEDecoder()
    decoder.feed(b"data: a")
    decoder.flush()
    assert decoder.feed(b"data: b\n\n") == [SSEEvent("b")]


def test_sse_decoder_empty_feed_yields_nothing():
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"data: a\n\n") == [SSEEvent("a")]


def test_sse_decoder_several_events_in_one_chunk_keep_the_last_id():
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 7\ndata: a\n\n") == [SSEEvent("a", None, "7")]
    assert decoder.feed(b"data: b\n\ndata:c\n\n") == [SSEEvent("b", None, "7"), SSEEvent("c", None, "7")]


def test_sse_decoder_several_events_with_another_field_in_one_chunk():
    assert feed_all(b"data: a\n\nevent: x\ndata: b\n\ndata: c\n\n") == [
        SSEEvent("a"),
        SSEEvent("b", "x"),
        SSEEvent("c"),
    ]


def _event_of(size_bytes: int) -> bytes:
    """One chat chunk event whose content is ``size_bytes`` long (as large as tool-call arguments get)."""
    return b'data: {"choices":[{"index":0,"delta":{"content":"' + b"a" * size_bytes + b'"}}]}\n\n'


def _decoder_reads(stream: bytes) -> None:
    decoder = SSEDecoder()
    events = [event for i in range(0, len(stream), 16384) for event in decoder.feed(stream[i : i + 16384])]
    assert len(events) == 1


def _reader_reads(stream: bytes) -> None:
    reader = ReplyReader()
    for i in range(0, len(stream), 16384):
        reader.feed(stream[i : i + 16384], 0.0)
    assert reader.acc.events == 1


def _growth(read: Callable[[bytes], None]) -> float:
    """Best-of-five time for a 16 MiB event over that for a 4 MiB one, both fed in 16 KiB reads, interleaved.

    Linear work gives about 4, work that re-joins the pending line on every read about 16.
    """
    small, large = _event_of(4 << 20), _event_of(16 << 20)
    best = {len(small): float("inf"), len(large): float("inf")}
    for _ in range(5):
        for stream in (small, large):
            started = time.perf_counter()
            read(stream)
            best[len(stream)] = min(best[len(stream)], time.perf_counter() - started)
    return best[len(large)] / best[len(small)]


@pytest.mark.timing
@pytest.mark.parametrize("read", [_decoder_reads, _reader_reads], ids=["decoder", "reply-reader"])
def test_sse_decoder_cost_is_linear_in_the_size_of_one_event(read: Callable[[bytes], None]) -> None:
    # A 16 MiB event read 16 KiB at a time: the decoder alone, and the reply reader, which also asks
    # on every read that ends mid-event whether a lone [DONE] line is pending. The bound sits between
    # linear (~4) and quadratic (~16) growth: this checks the growth, not the speed.
    ratio = _growth(read)
    assert ratio < 11.0, f"16 MiB / 4 MiB decode time ratio {ratio:.1f}: not linear"


def test_sse_decoder_keeps_a_character_split_after_whole_events():
    # The read ends with whole events and then the first byte of "é" (a later line
    # starts with it): the byte must wait for its partner, whatever the split.
    reads = [b"data:x\n\n\xc3", b"\xa9: note\n\n", b"data: \xc3", b"\xa9\n\n"]
    decoder = SSEDecoder()
    events = [event for chunk in reads for event in decoder.feed(chunk)]
    assert events == SSEDecoder().feed(b"".join(reads))
    assert [event.data for event in events] == ["x", "é"]


def test_nc21_sse_decoder_pending_done_only_for_a_lone_done_line():
    for stream in (
        b"data: [DONE]",
        b"data:[DONE]",
        b"data: [DONE]\n",
        b"data: [DONE]\r",
        b"data: a\n\ndata: [DONE]\r\n",
    ):
        decoder = SSEDecoder()
        decoder.feed(stream)
        assert decoder.pending_done, stream
    for stream in (b"data: [DONE]\n\n", b"data: [DON", b"event: x\ndata: [DONE]\n", b"data: a\ndata: [DONE]\n", b""):
        decoder = SSEDecoder()
        decoder.feed(stream)
        assert not decoder.pending_done, stream


@pytest.mark.parametrize(
    ("payload", "done"),
    [
        ("[DONE]", True),
        ("[DONE] ", True),
        (" [DONE]\t", True),
        ("[DONE]x", False),
        ("", False),
        ('{"a": "[DONE]"}', False),
    ],
)
def test_nc27_kind_is_done_allows_whitespace_around_the_sentinel_only(payload, done):
    assert is_done(payload) is done
