"""Typed-event replies (Responses API, Anthropic Messages) and embeddings bodies → ``ChunkDelta`` values (pure).

Both APIs stream named events (an ``event:`` line, the same name as the
data's ``type``). Only deltas that carry text count as tokens (TTFT, ITL);
structural events (``response.created``, ``response.output_item.added``,
``content_block_start``, ``ping`` …) never do.

Responses API (OpenAI; vLLM and SGLang serve it):

- tokens: ``response.output_text.delta`` and ``response.refusal.delta``
  (content), ``response.reasoning_text.delta`` /
  ``response.reasoning_summary_text.delta`` (reasoning),
  ``response.function_call_arguments.delta`` (tool arguments), each with a
  non-empty ``delta`` string;
- the end: ``response.completed`` carries ``response.usage``
  (``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``,
  ``output_tokens_details.reasoning_tokens``); ``response.incomplete`` ends it
  with ``response.incomplete_details.reason``: ``max_output_tokens`` is the
  finish reason ``length``, ``content_filter`` stays itself, any other reason
  is ``incomplete:<reason>``, an abnormal finish (``llmload.request.finish``);
- failures: ``response.failed`` (its ``response.error``) and ``error`` events;
- the reply's id (``response.id`` of ``response.created`` / ``.completed``)
  is kept (``ReplyAccumulator.response_id``) for ``previous_response_id``.

Anthropic Messages:

- tokens: ``content_block_delta`` with a ``text_delta`` (content),
  ``thinking_delta`` (reasoning) or ``input_json_delta`` (tool arguments);
- usage: ``message_start``'s ``message.usage.input_tokens`` (and
  ``cache_read_input_tokens``), ``message_delta``'s cumulative
  ``usage.output_tokens``; ``message_delta.delta.stop_reason`` is the finish
  reason (``end_turn``/``stop_sequence`` → ``stop``, ``max_tokens`` →
  ``length``, ``tool_use`` → ``tool_calls``, ``refusal`` → ``content_filter``);
- the end: ``message_stop``; failures: ``error`` events (``{"error": {"type", "message"}}``).

A reply ends at its final event (``acc.done``, as ``[DONE]`` ends a chat
stream); a ``data: [DONE]`` some gateways add is read as the same end.
"""

from __future__ import annotations

import json
from typing import Any

from llmload.errors import SSEProtocolError
from llmload.request.chunks import ChunkDelta, ReplyAccumulator, first_detail, read_server_error
from llmload.request.record import Outcome
from llmload.request.shapes import describe
from llmload.request.sse import SSEDecoder, SSEEvent, is_done
from llmload.request.stream import ReplyFailure

__all__ = [
    "TypedReplyReader",
    "anthropic_finish",
    "parse_embeddings_body",
    "parse_messages_body",
    "parse_responses_body",
    "response_id",
    "responses_finish",
]

_NO_DELTA = ChunkDelta("", False, False, None, None, None)

# Responses API text deltas: event type → (content, reasoning)
_RESPONSES_TEXT = {
    "response.output_text.delta": (True, False),
    "response.refusal.delta": (True, False),
    "response.reasoning_text.delta": (False, True),
    "response.reasoning.delta": (False, True),
    "response.reasoning_summary_text.delta": (False, True),
    "response.function_call_arguments.delta": (False, False),
}
# Messages content_block_delta types → (field, content, reasoning)
_MESSAGES_TEXT = {
    "text_delta": ("text", True, False),
    "thinking_delta": ("thinking", False, True),
    "input_json_delta": ("partial_json", False, False),
}
_ANTHROPIC_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


_RESPONSE_ID_EVENTS = frozenset({"response.created", "response.completed", "response.incomplete"})


def response_id(response: Any) -> str | None:
    """The ``id`` of a Responses ``response`` object (what ``previous_response_id`` continues); None if absent."""
    value = response.get("id") if type(response) is dict else None
    return value if isinstance(value, str) and value else None


def anthropic_finish(stop_reason: Any) -> str | None:
    """The finish reason of an Anthropic ``stop_reason`` (mapped onto OpenAI's names; others kept as sent)."""
    if stop_reason is None:
        return None
    reason = str(stop_reason)
    return _ANTHROPIC_FINISH.get(reason, reason)


def responses_finish(response: Any) -> str:
    """The finish reason of a Responses ``response`` object by its ``status`` and ``incomplete_details``."""
    status = response.get("status") if type(response) is dict else None
    if status != "incomplete":
        return "stop" if status in (None, "completed") else f"status:{status}"
    details = response.get("incomplete_details")
    reason = details.get("reason") if type(details) is dict else None
    if reason == "max_output_tokens":
        return "length"
    if reason == "content_filter":
        return "content_filter"
    return f"incomplete:{reason or 'unknown'}"


class TypedReplyReader:
    """Decodes and accounts one typed-event reply (``api``: ``"responses"`` or ``"messages"``), read by read.

    Same surface as ``llmload.request.stream.ReplyReader`` (``acc``, ``feed``,
    ``finish``, ``has_partial_event``, ``finish_at_s``, ``usage_ended``), so
    ``StreamingClient`` reads either; these replies end only at their final
    event, so ``finish_at_s`` stays None and ``usage_ended`` False.
    """

    __slots__ = ("_decoder", "_messages", "acc", "finish_at_s", "usage_ended")

    def __init__(self, api: str, *, keep_text: bool = True) -> None:
        """A reader at the start of a reply of ``api``."""
        self.acc = ReplyAccumulator(keep_text=keep_text)
        self._decoder = SSEDecoder()
        self._messages = api == "messages"
        self.finish_at_s: float | None = None
        self.usage_ended = False

    @property
    def has_partial_event(self) -> bool:
        """True when bytes of an event not yet terminated by a blank line are buffered."""
        return self._decoder.has_partial_event

    def feed(self, data: bytes, t: float) -> None:
        """Account the events ``data`` completes, all as arrived ``t`` seconds after send.

        Raises:
            ReplyFailure: a failure event (``SERVER_ERROR``) or invalid JSON (``STREAM_ERROR``).
            llmload.errors.SSEProtocolError: an event whose data is not an object.
        """
        decoder = self._decoder
        self._events(decoder.feed(data), t)
        if not self.acc.done and not decoder.at_event_boundary and decoder.pending_done:
            self._events(decoder.flush(), t)  # a [DONE] line still waiting for its blank line: the body may stay open

    def finish(self, t: float) -> None:
        """The body ended: account an event still pending without its blank line, as arrived at ``t``."""
        if not self.acc.done and self._decoder.has_partial_event:
            self._events(self._decoder.flush(), t)

    def _events(self, events: list[SSEEvent], t: float) -> None:
        acc = self.acc
        for event in events:
            if acc.done:
                return
            payload = event.data
            if is_done(payload):
                acc.done = True
                return
            if not payload:
                continue
            try:
                obj = json.loads(payload)
            except ValueError as exc:
                acc.unread_events += 1
                raise ReplyFailure(Outcome.STREAM_ERROR, "invalid JSON in stream", f"{exc}: {payload[:120]!r}") from exc
            if type(obj) is not dict:
                acc.unread_events += 1
                raise SSEProtocolError(f"the {event.event or 'message'} event is {describe(obj)}; expected an object")
            kind = event.event or obj.get("type")
            kind = kind if isinstance(kind, str) else ""
            delta = self._messages_event(kind, obj) if self._messages else _responses_event(kind, obj)
            if kind in _RESPONSE_ID_EVENTS:
                acc.response_id = response_id(obj.get("response")) or acc.response_id
            if delta is not None:
                acc.add(delta, t)
            if kind in ("response.completed", "response.incomplete", "message_stop"):
                acc.done = True

    @staticmethod
    def _messages_event(kind: str, obj: dict[str, Any]) -> ChunkDelta | None:
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if type(delta) is not dict:
                return None
            shape = _MESSAGES_TEXT.get(str(delta.get("type")))
            if shape is None:
                return None  # signature_delta and other non-text deltas
            text = delta.get(shape[0])
            if type(text) is not str or not text:
                return None
            return ChunkDelta(text, True, shape[1], None, None, None, shape[2])
        if kind == "message_delta":
            delta = obj.get("delta")
            reason = anthropic_finish(delta.get("stop_reason")) if type(delta) is dict else None
            usage = obj.get("usage")
            counts = _usage(usage)
            counts.finish_reason, counts.reasoning_tokens = reason, None
            return counts
        if kind == "message_start":
            message = obj.get("message")
            usage = message.get("usage") if type(message) is dict else None
            counts = _usage(usage)
            counts.completion_tokens = counts.reasoning_tokens = None
            return counts
        if kind == "error" or "error" in obj:
            _raise_error(obj, "error")
        return None


def _responses_event(kind: str, obj: dict[str, Any]) -> ChunkDelta | None:
    shape = _RESPONSES_TEXT.get(kind)
    if shape is not None:
        text = obj.get("delta")
        if type(text) is not str or not text:
            return None
        return ChunkDelta(text, True, shape[0], None, None, None, shape[1])
    if kind in ("response.completed", "response.incomplete"):
        response = obj.get("response")
        usage = response.get("usage") if type(response) is dict else None
        counts = _usage(usage)
        counts.finish_reason = responses_finish(response)
        return counts
    if kind == "response.failed":
        response = obj.get("response")
        error = response.get("error") if type(response) is dict else None
        _raise_error({"error": error} if type(error) is dict else obj, "response.failed")
    if kind == "error":
        _raise_error(obj if "error" in obj else {"error": obj}, "error")
    return None


def _raise_error(obj: dict[str, Any], event: str) -> None:
    error = read_server_error(obj, "error")
    assert error is not None  # event "error" always reads as one
    category = error.category if event == "error" else f"{event} {error.category}"
    raise ReplyFailure(Outcome.SERVER_ERROR, category, f"{event} event: {error.message}", 200)


_REASONING_PLACES = (("output_tokens_details", "reasoning_tokens"),)
_CACHED_PLACES = (("input_tokens_details", "cached_tokens"), (None, "cache_read_input_tokens"))


def _usage(usage: Any) -> ChunkDelta:
    """The counts of a Responses or Messages ``usage`` object as a delta without text; None: not sent.

    ``input_tokens`` / ``output_tokens`` that are not counts fail the stream
    (``SSEProtocolError``); a detail that is not one is unknown and named in
    ``unreadable_detail`` (``llmload.request.chunks.first_detail``).
    """
    if type(usage) is not dict:
        return ChunkDelta("", False, False, None, None, None)
    reasoning, bad_reasoning = first_detail(usage, _REASONING_PLACES)
    cached, bad_cached = first_detail(usage, _CACHED_PLACES)
    return ChunkDelta(
        "", False, False, None, _count(usage.get("input_tokens"), "input_tokens"),
        _count(usage.get("output_tokens"), "output_tokens"), reasoning_tokens=reasoning, cached_tokens=cached,
        unreadable_detail="; ".join(filter(None, (bad_reasoning, bad_cached))) or None,
    )  # fmt: skip


def _count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if type(value) is int and value >= 0:
        return value
    raise SSEProtocolError(f"usage.{name} is {describe(value)}; expected a non-negative integer token count")


# ── whole (non-streamed) replies ─────────────────────────────────────────
def parse_responses_body(obj: Any) -> ChunkDelta:
    """Read a whole Responses ``response`` object: its output text, finish reason and usage.

    Raises:
        ReplyFailure: ``status`` ``failed`` (with the server's error).
        SSEProtocolError: not a response object.
    """
    if type(obj) is not dict or type(obj.get("output", [])) is not list:
        raise SSEProtocolError(f"the reply is {describe(obj)}; expected a Responses API response object")
    if obj.get("status") == "failed":
        error = obj.get("error")
        _raise_error({"error": error} if type(error) is dict else obj, "response.failed")
    pieces: list[str] = []
    content = reasoning = False
    for item in obj.get("output") or ():
        if type(item) is not dict:
            continue
        kind = item.get("type")
        if kind == "function_call" and isinstance(item.get("arguments"), str):
            pieces.append(item["arguments"])
            continue
        for key in ("content", "summary"):
            for part in item.get(key) or ():
                text = part.get("text") if type(part) is dict else None
                text = part.get("refusal") if text is None and type(part) is dict else text
                if isinstance(text, str) and text:
                    pieces.append(text)
                    if kind == "reasoning":
                        reasoning = True
                    else:
                        content = True
    u = _usage(obj.get("usage"))
    text = "".join(pieces)
    return ChunkDelta(
        text, bool(text), content, responses_finish(obj), u.prompt_tokens, u.completion_tokens, reasoning,
        reasoning_tokens=u.reasoning_tokens, cached_tokens=u.cached_tokens, unreadable_detail=u.unreadable_detail,
    )  # fmt: skip


def parse_messages_body(obj: Any) -> ChunkDelta:
    """Read a whole Anthropic ``message`` object: its content blocks, stop reason and usage.

    Raises:
        SSEProtocolError: not a message object.
    """
    if type(obj) is not dict or type(obj.get("content", [])) is not list:
        raise SSEProtocolError(f"the reply is {describe(obj)}; expected an Anthropic message object")
    pieces: list[str] = []
    content = reasoning = False
    for block in obj.get("content") or ():
        if type(block) is not dict:
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            pieces.append(block["text"])
            content = True
        elif kind == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
            pieces.append(block["thinking"])
            reasoning = True
        elif kind == "tool_use" and block.get("input") is not None:
            pieces.append(json.dumps(block["input"]))
    u = _usage(obj.get("usage"))
    text = "".join(pieces)
    return ChunkDelta(
        text, bool(text), content, anthropic_finish(obj.get("stop_reason")), u.prompt_tokens, u.completion_tokens,
        reasoning, cached_tokens=u.cached_tokens, unreadable_detail=u.unreadable_detail,
    )  # fmt: skip


def parse_embeddings_body(obj: Any, inputs: int | None) -> ChunkDelta:
    """Check an embeddings reply (one non-empty vector per input) and read its ``usage.prompt_tokens``.

    Vectors may be float lists or base64 strings (``encoding_format``).

    Raises:
        ReplyFailure: the wrong number of vectors, or an empty one (``SERVER_ERROR``).
        SSEProtocolError: not an embeddings list.
    """
    data = obj.get("data") if type(obj) is dict else None
    if type(data) is not list:
        raise SSEProtocolError(f"the reply is {describe(obj)}; expected an embeddings list with 'data'")
    if inputs is not None and len(data) != inputs:
        raise ReplyFailure(
            Outcome.SERVER_ERROR,
            "wrong number of embeddings",
            f"the reply carries {len(data)} embeddings for {inputs} inputs; the batch failed",
        )
    for i, item in enumerate(data):
        vector = item.get("embedding") if type(item) is dict else None
        if not vector or not isinstance(vector, (list, str)):
            raise ReplyFailure(
                Outcome.SERVER_ERROR,
                "empty embedding",
                f"data[{i}].embedding is {describe(vector)}; expected a non-empty vector",
            )
    usage = obj.get("usage")
    prompt = _count(usage.get("prompt_tokens"), "prompt_tokens") if type(usage) is dict else None
    return ChunkDelta("", False, False, None, prompt, None) if prompt is not None else _NO_DELTA
