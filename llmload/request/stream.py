"""One streamed reply's body bytes → its events, decoded and accounted in a ``ReplyAccumulator``.

``ReplyReader.feed`` takes each read with its arrival time. Every SSE event
is decoded (``llmload.request.sse``), its JSON read into a ``ChunkDelta``
(``llmload.request.chunks``) and accounted; an error object, invalid JSON or a
chunk of the wrong shape raises ``ReplyFailure``. Definitions of what counts
are those of ``llmload.request.client``.

Plain token deltas skip both the SSE decoder and the JSON decoder: a server
sends every token delta of one reply as the same JSON text with only the
generated text changing (same id, created, model and index, no
finish_reason, no usage, no logprobs). Only a plain string delta is learned:
content given as parts or objects, mirrored reasoning and object tool-call
arguments (``ChunkDelta.shaped``) always take the full path.
``DeltaTemplate`` learns that text's surroundings from the first such
delta, and a run of whole events of that form in one
read is split in a single pass (``str.split`` on "surroundings of one event
+ start of the next"). Anything else, or any text that a JSON encoder would
have escaped, takes the full path, so both paths account exactly the same.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from llmload.errors import SSEProtocolError
from llmload.request.chunks import ChunkDelta, ReplyAccumulator, parse_chunk, read_server_error
from llmload.request.record import Outcome
from llmload.request.sse import SSEDecoder, SSEEvent, is_done

__all__ = ["DeltaTemplate", "LoopTokens", "ReplyFailure", "ReplyReader"]

_TEMPLATE_TRIES = 8  # events a reply may take to offer a plain token delta to learn from
# A learned template stops matching when the server changes a field of its deltas (llama-server
# writes the current second as "created" in every chunk): a plain delta that missed it is
# learned from again, at most once in this many events.
_RELEARN_EVENTS = 16
_TEMPLATE_PROBE = "llmload-template-probe"
_EVENT_END = b"\n\n"
_ONE_EVENT_TEXT_CHARS = 256  # a block at most this much longer than one event's surroundings may be one event

# what the probe must read back as, by (has_content, has_reasoning) of the learned delta (made once, not per reply)
_PROBE_DELTAS = tuple(
    tuple(ChunkDelta(_TEMPLATE_PROBE, True, content, None, None, None, reasoning) for reasoning in (False, True))
    for content in (False, True)
)

Scan = Callable[[str, int], tuple[Any, int]]
"""``json`` C scanner: (text, index) → (value, end index); raises StopIteration if no value starts there."""


class ReplyFailure(Exception):  # noqa: N818 - a value the client turns into the record's outcome
    """The reply is a failure of this outcome and category (raised by ``ReplyReader.feed``)."""

    def __init__(self, outcome: Outcome, category: str, message: str, status: int | None = None) -> None:
        """``category`` is a bounded label; ``status`` the HTTP status to record, if any."""
        super().__init__(message)
        self.outcome, self.category, self.message, self.status = outcome, category, message, status


def new_scanner() -> Scan:
    """The C scanner behind ``json.loads``.

    Calling it directly skips loads' three Python layers and two regex
    matches, ~40 % of the decode cost of a typical chunk; anything it does not
    consume whole (surrounding whitespace, trailing data, invalid JSON) is
    handed to ``json.loads``.
    """
    scan: Scan = vars(json.JSONDecoder())["scan_once"]
    return scan


class DeltaTemplate:
    """The text around the generated text of one reply's plain token deltas.

    Learned from the first such delta: ``prefix`` is its JSON up to and
    including the quote that opens the text, ``suffix`` everything from the
    closing quote on. ``prefix + X + suffix`` where ``X`` is non-empty and
    holds no quote, no backslash and only printable characters is a JSON
    string literal with the same surroundings, so it decodes to exactly the
    learned delta with text ``X``.
    """

    __slots__ = (
        "_head_chars",
        "_one_event_chars",
        "_tail_chars",
        "event_head",
        "event_head_bytes",
        "event_tail",
        "event_tail_bytes",
        "has_content",
        "prefix",
        "separator",
        "suffix",
    )

    def __init__(self, prefix: str, suffix: str, *, has_content: bool) -> None:
        """Surroundings ``prefix``/``suffix``; ``has_content``: the text is content (not reasoning)."""
        self.prefix, self.suffix, self.has_content = prefix, suffix, has_content
        self.event_head = "data: " + prefix
        self.event_tail = suffix + "\n\n"
        self.separator = suffix + "\n\ndata: " + prefix
        self._head_chars, self._tail_chars = len(self.event_head), len(self.event_tail)
        # the longest block that may be one event (split_run's shortcut)
        self._one_event_chars = self._head_chars + self._tail_chars + _ONE_EVENT_TEXT_CHARS
        # the same as UTF-8 bytes, for a receive matched before it is decoded (LoopTokens)
        self.event_head_bytes, self.event_tail_bytes = self.event_head.encode(), self.event_tail.encode()

    @classmethod
    def learn(cls, payload: str, obj: Any, delta: ChunkDelta, scan: Scan) -> DeltaTemplate | None:
        """A template from a decoded event (``payload``, its JSON ``obj``, its ``delta``); None if not plain."""
        text = delta.text
        if (
            delta.finish_reason is not None
            or delta.shaped  # parts, objects, mirrored fields: always the full path
            or delta.logprob_tokens is not None
            or delta.prompt_tokens is not None
            or delta.completion_tokens is not None
            or not plain_text(text)
            or len(obj.get("choices") or ()) != 1
        ):
            return None
        needle = f'"{text}"'
        at = payload.find(needle)
        if at < 0 or payload.find(needle, at + 1) >= 0:
            return None  # escaped by the server, or not the only place it appears
        template = cls(payload[: at + 1], payload[at + 1 + len(text) :], has_content=delta.has_content)
        try:  # the surroundings must read back as the same delta around any other text
            probe = parse_chunk(scan(template.prefix + _TEMPLATE_PROBE + template.suffix, 0)[0])
        except (ValueError, StopIteration):
            return None
        if probe != _PROBE_DELTAS[delta.has_content][delta.has_reasoning]:
            return None
        return template

    def match(self, payload: str) -> str | None:
        """The text of one event's data if it is this template around plain text, else None."""
        prefix, suffix = self.prefix, self.suffix
        if len(payload) > len(prefix) + len(suffix) and payload.startswith(prefix) and payload.endswith(suffix):
            text = payload[len(prefix) : len(payload) - len(suffix)]
            if plain_text(text):
                return text
        return None

    def split_run(self, block: str) -> tuple[list[str], str] | None:
        """Split off the leading run of this template's events from whole events.

        Args:
            block: SSE text that starts at an event boundary and ends with a
                blank line (whole events only).

        Returns:
            The texts of the leading run of plain token deltas (``data: ``
            with one space, LF line ends) and the rest of ``block`` from the
            first event that is not one (to decode in full); None if
            ``block`` does not start with such an event.
        """
        head = self.event_head
        if not block.startswith(head):
            return None
        # One event (the usual read): the suffix opens with a quote and plain text has none, so this
        # is the result of the split below, without it. Longer blocks (several events) skip the check.
        tail = self.event_tail
        size = len(block)
        if size <= self._one_event_chars and block.endswith(tail):
            text = block[self._head_chars : size - self._tail_chars]
            if text and '"' not in text and "\\" not in text and text.isprintable():
                return [text], ""
        separator = self.separator
        texts = block[self._head_chars :].split(separator)
        last = texts[-1]
        end = last.find(tail)
        if end > 0:
            texts[-1] = last[:end]
            rest = last[end + self._tail_chars :]
            joined = "".join(texts)  # one pass over every text instead of four per text
            if all(texts) and '"' not in joined and "\\" not in joined and joined.isprintable():
                return texts, rest
            texts[-1] = last
        for i, text in enumerate(texts):
            if i == len(texts) - 1 or not plain_text(text):
                # event i is another shape (finish, usage, error...) or its text is escaped
                return (texts[:i], head + separator.join(texts[i:])) if i else None
        raise AssertionError("unreachable: the last part always ends the loop")


def plain_text(text: str) -> bool:
    """Non-empty text that a JSON encoder writes between quotes unchanged (no quote, backslash, control)."""
    return bool(text) and '"' not in text and "\\" not in text and text.isprintable()


class ReplyReader:
    """Decodes and accounts one SSE reply, read by read.

    Attributes:
        acc: what the reply has carried so far (``acc.done`` after ``[DONE]``).
        usage_ended: a usage chunk with no choices (``"choices": []``) came
            after a finish_reason: with ``stream_options.include_usage`` that
            is the last chunk before ``[DONE]`` (OpenAI), so the reply is complete.
        finish_at_s: when the last event accounted was a chunk carrying a
            finish_reason and no token, its arrival time; else None.
    """

    __slots__ = ("_decoder", "_learn", "_learn_after", "_scan", "_template", "acc", "finish_at_s", "usage_ended")

    def __init__(self, scan: Scan | None = None, *, keep_text: bool = True) -> None:
        """A reader at the start of a reply.

        Args:
            scan: a JSON scanner (``new_scanner``) to share between readers.
            keep_text: keep the generated text (for a tokenizer or the
                conversation); without it ~8 KiB less per 128-token stream.
        """
        self.acc = ReplyAccumulator(keep_text=keep_text)
        self._decoder = SSEDecoder()
        self._scan = scan if scan is not None else new_scanner()
        self._template: DeltaTemplate | None = None
        self._learn = True  # no template yet: learn one from the first plain token delta
        self._learn_after = 0  # with a template: learn again from a delta that missed it after this many events
        self.usage_ended = False
        self.finish_at_s: float | None = None

    @property
    def has_partial_event(self) -> bool:
        """True when bytes of an event not yet terminated by a blank line are buffered."""
        return self._decoder.has_partial_event

    def feed(self, data: bytes, t: float) -> None:
        """Account the events that ``data`` completes, all as arrived ``t`` seconds after send.

        Events after ``[DONE]`` are ignored. A ``data: [DONE]`` line at the
        end of ``data`` ends the reply even before its blank line arrives.

        Raises:
            ReplyFailure: an error object (``SERVER_ERROR``) or invalid JSON
                (``STREAM_ERROR``) in the stream.
            llmload.errors.SSEProtocolError: an event that is not a completion chunk.
        """
        template, decoder = self._template, self._decoder
        if template is None:
            self._events(decoder.feed(data), t)
            if not decoder.at_event_boundary:
                self._end_at_pending_done(t)
            return
        start = 0
        if not decoder.at_event_boundary:
            cut = data.find(_EVENT_END)  # complete the pending event first
            if cut < 0:
                self._events(decoder.feed(data), t)
                self._end_at_pending_done(t)
                return
            start = cut + 2
            self._events(decoder.feed(data[:start]), t)
            if self.acc.done:
                return
            if not decoder.at_event_boundary:
                self._events(decoder.feed(data[start:]), t)
                self._end_at_pending_done(t)
                return
        end = data.rfind(_EVENT_END) + 2
        if end > start:  # whole events: data[start:end] begins and ends at event boundaries
            block = data[start:end].decode("utf-8", "replace")
            run = template.split_run(block)
            if run is None:
                self._events(decoder.feed_text(block), t)
            else:
                texts, rest = run
                self.acc.add_tokens(texts, t, template.has_content)
                self.finish_at_s = None
                if rest:
                    self._events(decoder.feed_text(rest), t)
            start = end
        if start < len(data) and not self.acc.done:
            self._events(decoder.feed(data[start:]), t)
            self._end_at_pending_done(t)

    def _end_at_pending_done(self, t: float) -> None:
        """End the reply at a ``[DONE]`` line still waiting for its blank line: a server may hold the body open."""
        decoder = self._decoder
        if not self.acc.done and decoder.pending_done:
            self._events(decoder.flush(), t)

    def finish(self, t: float) -> None:
        """The body ended: account an event still pending without its blank line, as arrived at ``t``.

        Raises:
            ReplyFailure: as ``feed``; invalid JSON in that event says it was the unterminated last one.
        """
        if self.acc.done or not self._decoder.has_partial_event:
            return
        try:
            self._events(self._decoder.flush(), t)
        except ReplyFailure as exc:
            if exc.outcome is not Outcome.STREAM_ERROR:
                raise
            message = f"the last event, not terminated by a blank line, is cut short: {exc.message}"
            raise ReplyFailure(exc.outcome, exc.category, message, exc.status) from exc

    def _events(self, events: list[SSEEvent], t: float) -> None:
        acc, template, scan = self.acc, self._template, self._scan
        for event in events:
            payload = event.data
            if template is not None and event.event is None:
                text = template.match(payload)
                if text is not None:
                    acc.add_token(text, t, template.has_content)
                    self.finish_at_s = None
                    continue
            if is_done(payload):
                acc.done = True
                return
            if not payload:
                continue  # an empty data field carries nothing
            try:
                try:
                    obj, end = scan(payload, 0)
                except StopIteration:  # not a JSON value at index 0 (e.g. leading space)
                    end = -1
                if end != len(payload):
                    obj = json.loads(payload)  # same value, or the same error, as json.loads alone
            except ValueError as exc:
                acc.unread_events += 1
                message = f"{exc}: {payload[:120]!r}"
                raise ReplyFailure(Outcome.STREAM_ERROR, "invalid JSON in stream", message) from exc
            if event.event is not None or type(obj) is not dict or "error" in obj or "choices" not in obj:
                error = read_server_error(obj, event.event)  # {"object": "error"} has no choices
                if error is not None:
                    raise ReplyFailure(Outcome.SERVER_ERROR, error.category, error.message, 200)
            try:
                delta = parse_chunk(obj)
            except SSEProtocolError:
                acc.unread_events += 1  # received, though not understood: the failure message counts it
                raise
            acc.add(delta, t)
            if delta.has_token:
                self.finish_at_s = None
            elif delta.finish_reason is not None:
                self.finish_at_s = t
            if (
                acc.finish_reason is not None
                and not obj.get("choices")
                and (delta.completion_tokens is not None or delta.prompt_tokens is not None)
            ):
                self.usage_ended = True  # the final usage chunk (a [DONE] later in this read still counts)
            if event.event is None and delta.has_token:
                if self._learn:
                    template = self._template = DeltaTemplate.learn(payload, obj, delta, scan)
                    self._learn = template is None and acc.events < _TEMPLATE_TRIES
                elif template is not None and acc.events >= self._learn_after:
                    self._learn_after = acc.events + _RELEARN_EVENTS
                    template = self._template = DeltaTemplate.learn(payload, obj, delta, scan) or template


class LoopTokens:
    """Accounts a receive that is one whole plain token event as it is received, in the loop.

    The streaming client sets its ``take`` as ``GeventResponse.consumer`` once
    its reader has timed the first token. The transport calls it in the hub with
    the body bytes of each kernel-stamped receive while no earlier receive
    waits to be handed out, so the reply's events stay in order. When the
    bytes are exactly one event of the reader's learned ``DeltaTemplate``
    around plain text (UTF-8, no quote, backslash or non-printable
    character), it accounts that token as ``ReplyReader.feed`` would at the
    receive's arrival, with a read lag of 0 (one event and nothing past it:
    the stamp is its own arrival, as ``StreamingClient`` rules), and returns
    True; anything else, or any state in which the reply is not plainly
    streaming tokens (no template yet, a pending partial event, a finish
    chunk last, the usage chunk seen), returns False and the bytes take the
    user greenlet's path (None past the total timeout: that user is woken at
    once to raise it; asked about bytes queued behind others, it only says
    that). So both paths account
    exactly the same, and a streamed token costs no queue entry, hand-off or
    decode call.

    The first receive it leaves after one it accounted (events the kernel
    merged while the process was busy, a chunk of another shape) also gets
    None: the user is woken at once to decode it, so the receives after it
    are accounted here again. Woken at the batch time instead, that user
    would have every receive of the next ``BATCH_S`` queued behind it and
    decoded in its own greenlet, the costlier path, and more of them the
    busier the process. A reply whose receives are left one after another
    (several events per write) keeps the batched wake-up.

    Attributes:
        t: the latest arrival accounted, seconds after ``t0`` (the reply's
            read loop and this share it: each sets it before the other runs).
        size: body bytes accounted here.
    """

    __slots__ = (
        "_acc",
        "_clock",
        "_deadline_s",
        "_has_content",
        "_head",
        "_lags",
        "_reader",
        "_t0",
        "_tail",
        "_taking",
        "_template",
        "size",
        "t",
    )

    def __init__(
        self, reader: ReplyReader, lags: list[float], clock: Callable[[], float], t0: float, deadline_s: float
    ) -> None:
        """For ``reader``'s reply, sent at ``clock()`` = ``t0``; ``lags`` gets a 0.0 per event accounted.

        ``deadline_s``: the total timeout, in seconds after ``t0``; an event
        arriving after it is left to the read loop, which raises it.
        """
        self._reader, self._acc, self._lags = reader, reader.acc, lags
        self._clock, self._t0, self._deadline_s = clock, t0, deadline_s
        self._template: DeltaTemplate | None = None  # the reader's, when the fields below were made from it
        self._head = self._tail = b""
        self._has_content = False
        self._taking = False  # the last receive asked about was accounted here
        self.t = 0.0
        self.size = 0

    def take(self, data: bytes, stamp_ns: int, queued: bool = False) -> bool | None:
        """Account ``data`` (one receive's body bytes, kernel-stamped ``stamp_ns``, CLOCK_REALTIME ns) if plain.

        The consumer the transport calls (a bound method: cheaper to call than
        an instance). Returns True when accounted; False when left to the
        reader; None when left to it at once: bytes that arrived past the
        total timeout, which the read loop raises (the user is not kept waiting
        for a batch), or the first bytes left after bytes accounted here (see
        the class docstring). ``queued``: earlier bytes wait for the reader,
        so these are only left to it (at once if past the total timeout).
        """
        if queued:
            self._taking = False  # receives went past this (a process behind): the next left is not "right after"
            return self._left(stamp_ns)
        reader = self._reader
        if reader._template is not self._template:
            template = self._template = reader._template
            if template is None:
                return self._left_after(stamp_ns)
            self._head, self._tail = template.event_head_bytes, template.event_tail_bytes
            self._has_content = template.has_content
        elif self._template is None:
            return self._left_after(stamp_ns)
        if reader.finish_at_s is not None or reader.usage_ended or not reader._decoder._idle:
            return self._left_after(stamp_ns)
        head, tail = self._head, self._tail
        if not data.startswith(head):
            return self._left_after(stamp_ns)
        match = _ascii_text(data, len(head), len(data) - len(tail))
        if match is not None and data.endswith(tail):
            text = match[0].decode("ascii")  # printable ASCII from the head to the tail: the usual token
        elif data.isascii():
            return self._left_after(stamp_ns)  # several events, escaped or other text: no more to check
        else:
            other = self._other_text(data)
            if other is None:
                return self._left_after(stamp_ns)
            text = other
        age_ns = time.time_ns() - stamp_ns
        arrived_s = self._clock() - self._t0 - (age_ns * 1e-9 if age_ns > 0 else 0.0)
        t = self.t
        if arrived_s > t:  # noqa: PLR1730 - a plain comparison, once per token
            t = arrived_s
        if t > self._deadline_s:
            return None
        self.t = t
        self.size += len(data)
        self._lags.append(0.0)
        self._acc.add_token(text, t, self._has_content)
        self._taking = True
        return True

    def _left_after(self, stamp_ns: int) -> bool | None:
        """Bytes left to the reader as they came: None (wake it at once) right after bytes accounted here."""
        if self._taking:
            self._taking = False
            return None
        return self._left(stamp_ns)

    def _left(self, stamp_ns: int) -> bool | None:
        """Bytes left to the reader: False, or None (wake it at once) when they arrived past the total timeout."""
        age_ns = time.time_ns() - stamp_ns
        arrived_s = self._clock() - self._t0 - (age_ns * 1e-9 if age_ns > 0 else 0.0)
        return None if arrived_s > self._deadline_s or self.t > self._deadline_s else False

    def _other_text(self, data: bytes) -> str | None:
        """The text of ``data`` (an event starting with the head) when it is plain but not ASCII, else None."""
        tail = self._tail
        if len(data) > len(self._head) + len(tail) + 4 * _ONE_EVENT_TEXT_CHARS or not data.endswith(tail):
            return None
        raw = data[len(self._head) : len(data) - len(tail)]
        if not raw or b'"' in raw or b"\\" in raw:
            return None
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return None
        return text if text.isprintable() else None


# printable ASCII but quote and backslash, all of data[pos:endpos]: a token's text the JSON encoder wrote as is
# (one C scan per token)
_ascii_text = re.compile(rb"[ !#-\[\]-~]+").fullmatch
