"""Incremental Server-Sent Events decoder: byte chunks in, ``SSEEvent`` values out.

Implements the parsing half of the WHATWG HTML Standard, "Server-sent events",
section "Interpreting an event stream":

- UTF-8 is decoded incrementally, so a character split across reads is never
  corrupted; invalid bytes become U+FFFD and never raise. One leading BOM is
  dropped.
- Lines end with CRLF, LF or CR. A CR that ends one chunk and an LF that
  starts the next form a single line end.
- ``:`` starts a comment (``: ping`` keep-alives); ``data``, ``event`` and
  ``id`` fields are kept; ``retry`` and unknown fields are ignored. One space
  after the colon is removed, no more (``data:  x`` has the value `` x``).
- A blank line dispatches the event. Blocks whose data buffer is empty
  (``retry:``, ``id:`` or ``event:`` only, or comments) dispatch nothing.
  Several ``data`` lines are joined with ``\\n``.
- At the end of the stream (``flush``) an event not terminated by a blank
  line is dispatched, its unterminated last line included. The standard
  discards it, but a server that ends its body without the final blank line
  meant that event: it is often the one with the finish reason and usage
  (openai/openai-node #2725, rexxars/eventsource-parser #18). A cut-short
  event then fails as invalid JSON instead of vanishing.

Any split of the same byte stream into ``feed`` calls yields the same events
(``tests/property/test_sse_property.py`` proves it, fast path included).

Cost is linear in the bytes fed, whatever the size of one event: text that
ends no line is only appended to a list of pieces, joined once when its
line ends (a 16 MiB tool-call event read 16 KiB at a time is never copied
over and over).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent", "is_done"]

_DONE_LINE_CHARS = 24  # the longest end-of-stream sentinel line read as one ("data: [DONE]", whitespace around)

_BOM = "\ufeff"
_Utf8Decoder = codecs.getincrementaldecoder("utf-8")


def is_done(payload: str) -> bool:
    """True for the OpenAI end-of-stream sentinel ``[DONE]``, whitespace around it allowed.

    A data field ``[DONE] `` (a trailing space) ends the stream for
    openai-python, which tests the prefix; a strict comparison would read it
    as invalid JSON and fail a reply that had finished.
    """
    return payload == "[DONE]" or (len(payload) < _DONE_LINE_CHARS and payload.strip() == "[DONE]")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched server-sent event.

    Attributes:
        data: the joined ``data`` lines, without the final line feed.
        event: the ``event`` field; None for the default type (``message``).
        id: the last event id seen on the stream so far (ids persist across
            events, per the standard); None if never set or set to empty.
    """

    data: str
    event: str | None = None
    id: str | None = None


# SSEEvent(value, None, id) without the frozen dataclass __init__, which costs
# three object.__setattr__ calls (~0.5 us per event on the hot path); setting
# the slots through their descriptors gives the identical frozen object.
_new_event = object.__new__
_set_data: Callable[[SSEEvent, str], None] = vars(SSEEvent)["data"].__set__
_set_event: Callable[[SSEEvent, str | None], None] = vars(SSEEvent)["event"].__set__
_set_id: Callable[[SSEEvent, str | None], None] = vars(SSEEvent)["id"].__set__


class SSEDecoder:
    """Turn a byte stream into events, one ``feed`` per network read.

    The common case, one complete ``data: ...`` event per read, takes a fast
    path that skips line splitting; it yields exactly what the general path
    would.
    """

    __slots__ = (
        "_after_cr",
        "_bom_pending",
        "_data",
        "_event",
        "_idle",
        "_last_id",
        "_tail",
        "_utf8",
    )

    def __init__(self) -> None:
        """Create a decoder positioned at the start of a stream."""
        # the incremental UTF-8 decoder, made when a read first ends inside a character or an event (a
        # stream of whole ASCII-ended reads never needs one, and making one costs more than the rest of the set-up)
        self._utf8: codecs.IncrementalDecoder | None = None
        self._tail: list[str] = []  # pieces of the current line, not yet ended
        self._after_cr = False  # last text ended with CR: a leading LF next time is the same line end
        self._data: list[str] = []  # data lines of the event being built
        self._event = ""  # event type buffer
        self._last_id = ""  # last event id buffer; persists across events
        self._bom_pending = True  # a BOM may still start the stream
        # True when no partial line, CR, event or UTF-8 sequence is pending:
        # the precondition of the fast path.
        self._idle = True

    @property
    def has_partial_event(self) -> bool:
        """True when bytes of an event not yet terminated by a blank line are buffered."""
        utf8 = self._utf8
        return bool(self._tail or self._data or self._event or (utf8 is not None and utf8.getstate()[0]))

    @property
    def pending_done(self) -> bool:
        """True when the one thing pending is a ``data: [DONE]`` line that no blank line has ended yet.

        The OpenAI end-of-stream sentinel cannot start a longer event, so a
        reader may end the reply there instead of waiting for a blank line
        that a server holding the body open may never send.
        """
        if self._event:
            return False
        tail = self._tail
        if not tail:
            data = self._data
            return len(data) == 1 and is_done(data[0])
        # O(1) whatever the pending line's length (called on every read that ends mid-event, so a
        # 16 MiB event must not be re-joined per read): the sentinel line is short.
        if self._data or len(tail) > _DONE_LINE_CHARS or sum(map(len, tail)) > _DONE_LINE_CHARS:
            return False
        line = "".join(tail)
        return line[:5] == "data:" and is_done(line[5:])

    @property
    def at_event_boundary(self) -> bool:
        """True when nothing is pending: no partial line, event, CR or UTF-8 sequence."""
        return self._idle

    def feed_text(self, text: str) -> list[SSEEvent]:
        """Decode text that begins at an event boundary, already decoded from whole UTF-8 characters.

        For a caller that decoded the bytes of whole events itself; the result
        is that of ``feed`` on the same bytes.

        Raises:
            ValueError: the decoder was not ``at_event_boundary``.
        """
        if not self._idle:
            raise ValueError("feed_text needs a decoder at an event boundary; use feed()")
        if not text:
            return []
        events = self._feed_text(text)
        self._idle = not self._tail and not self._after_cr and not self._data and not self._event
        return events

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode the next bytes of the stream.

        Args:
            chunk: the bytes of one read, of any length and split anywhere.

        Returns:
            The events completed by this chunk, in stream order (often empty).
        """
        if not chunk:
            return []
        if self._idle:
            # Nothing pending, so decoding the chunk on its own equals incremental
            # decoding whenever it ends with an ASCII byte.
            text = chunk.decode("utf-8", "replace") if chunk[-1] < 0x80 else self._utf8_decoder().decode(chunk)
            if text[:5] == "data:" and "\r" not in text:
                end = text.rfind("\n\n")
                if end > 0:
                    # Fast path: the text starts with whole single-line data events
                    # ("data:V\n\n" repeated; V without CR or LF): one, or several when
                    # reads lag behind the server, maybe followed by the start of the
                    # next event (decoded by the general path). Starting with "data:"
                    # also settles the BOM question.
                    values = text[5:end].split("\n\ndata:")
                    for value in values:
                        if "\n" in value:
                            break  # another field, a comment or a blank line: general path
                    else:
                        self._bom_pending = False
                        last_id = self._last_id or None
                        events = []
                        for value in values:
                            event = _new_event(SSEEvent)
                            _set_data(event, value[1:] if value[:1] == " " else value)
                            _set_event(event, None)
                            _set_id(event, last_id)
                            events.append(event)
                        rest = text[end + 2 :]
                        if rest:
                            events += self._feed_text(rest)
                        self._set_idle(chunk)  # a partial character may wait in the UTF-8 decoder
                        return events
        else:
            text = self._utf8_decoder().decode(chunk)
        events = self._feed_text(text) if text else []
        self._set_idle(chunk)
        return events

    def _utf8_decoder(self) -> codecs.IncrementalDecoder:
        """The stream's incremental UTF-8 decoder (made on first use: until then it holds nothing)."""
        utf8 = self._utf8
        if utf8 is None:
            utf8 = self._utf8 = _Utf8Decoder("replace")
        return utf8

    def _set_idle(self, chunk: bytes) -> None:
        """Note whether nothing is pending after ``chunk`` (the fast path's precondition)."""
        self._idle = (
            chunk[-1] < 0x80  # an ASCII last byte leaves no partial UTF-8 sequence
            and not self._tail
            and not self._after_cr
            and not self._data
            and not self._event
        )

    def flush(self) -> list[SSEEvent]:
        """Signal the end of the stream, dispatch what is pending and reset the decoder.

        Returns:
            The event that was pending (not terminated by a blank line, its
            last line maybe not even by a line end), or an empty list.
            ``has_partial_event`` beforehand says whether there is one.
        """
        utf8 = self._utf8
        text = utf8.decode(b"", True) if utf8 is not None else ""  # a cut-short UTF-8 sequence becomes U+FFFD
        pending = bool(text or self._tail or self._data or self._event)
        # The end of the stream ends the last line and the event: as if a blank line followed.
        events = self._feed_text(text + "\n\n") if pending else []
        if utf8 is not None:
            utf8.reset()
        self._tail = []
        self._after_cr = False
        self._data = []
        self._event = ""
        self._idle = True
        return events

    def _feed_text(self, text: str) -> list[SSEEvent]:
        if self._bom_pending:
            self._bom_pending = False
            if text[0] == _BOM:
                text = text[1:]
        if self._after_cr:
            self._after_cr = False
            if text[:1] == "\n":
                text = text[1:]
        if "\n" not in text and "\r" not in text:
            self._tail.append(text)  # no line ends here: nothing to parse yet
            return []
        tail = self._tail
        if tail:
            tail.append(text)
            buf = "".join(tail)
            tail.clear()
        else:
            buf = text
        if "\r" in buf:
            self._after_cr = buf[-1] == "\r"
            buf = buf.replace("\r\n", "\n").replace("\r", "\n")
        lines = buf.split("\n")
        last = lines.pop()
        if last:
            tail.append(last)
        events: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    event = _new_event(SSEEvent)
                    _set_data(event, "\n".join(data))
                    _set_event(event, self._event or None)
                    _set_id(event, self._last_id or None)
                    events.append(event)
                    data = self._data = []
                self._event = ""
                continue
            if line[0] == ":":
                continue  # comment or keep-alive
            colon = line.find(":")
            if colon < 0:
                field, value = line, ""
            else:
                field, value = line[:colon], line[colon + 1 :]
                if value[:1] == " ":
                    value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id" and "\0" not in value:
                self._last_id = value
            # "retry" only matters to a reconnecting client; other fields are ignored.
        return events
