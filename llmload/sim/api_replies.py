"""The simulator's Responses API, Anthropic Messages and embeddings: request intake and reply bytes.

Requests become the same ``GenerationRequest`` as chat (same token model, same
engine timing, same counters); only the bytes differ:

- ``POST /v1/responses``: ``input`` (a string, or message items with string
  or ``input_text`` parts) and ``instructions`` count as chat messages;
  ``max_output_tokens``. Streams: ``response.created``,
  ``response.output_item.added``, ``response.content_part.added``, one
  ``response.output_text.delta`` per token, the ``.done`` events, then
  ``response.completed`` (finish ``stop``) or ``response.incomplete``
  (``length`` → reason ``max_output_tokens``; an injected ``abort`` → reason
  ``abort``), with ``usage``. No ``[DONE]``. A body without ``input`` gets 400.
  Every reply written to the end is stored (``ResponseStore``, the newest
  ``STORED_RESPONSES``) under its ``id``: a request with
  ``previous_response_id`` continues it (its input tokens are the stored
  conversation's tokens, prompt and output, plus the new input's), and an id
  not stored gets a 400 that names it, as the OpenAI API answers.
- ``POST /v1/messages``: ``messages`` and ``system`` count as chat messages;
  ``max_tokens`` is required (400 without). Streams: ``message_start`` (input
  tokens), ``content_block_start``, ``ping``, one ``text_delta`` per token,
  ``content_block_stop``, ``message_delta`` (``stop_reason`` ``end_turn`` /
  ``max_tokens``, output tokens), ``message_stop``.
- ``POST /v1/embeddings``: ``input`` (a string or a list of strings), one
  8-float vector per input; prompt tokens are the texts' tokens (no template);
  the engine runs the prefill and one step; no completion tokens.

Fault flags apply with each API's own failure event: ``--midstream-error-rate``
ends a Responses stream with ``response.failed`` and a Messages stream with an
``error`` event; ``--abort-rate`` ends them with ``response.incomplete``
(reason ``abort``) and ``stop_reason`` ``abort``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from llmload.sim.protocol import (
    Endpoint,
    ErrorReply,
    GenerationRequest,
    count_chat_prompt_tokens,
    count_text_tokens,
    read_request_body,
)
from llmload.sim.replies import ReplyPlan

__all__ = [
    "API_ENDPOINTS",
    "STORED_RESPONSES",
    "MessagesStreamEncoder",
    "ResponseStore",
    "ResponsesStreamEncoder",
    "encode_api_whole_reply",
    "encode_embeddings",
    "failure_event",
    "parse_api_request",
]

API_ENDPOINTS = frozenset({Endpoint.RESPONSES, Endpoint.MESSAGES, Endpoint.EMBEDDINGS})
"""The endpoints this module answers (chat and completions are ``llmload.sim.replies``)."""

_EMBEDDING_DIM = 8

STORED_RESPONSES = 10_000
"""How many finished Responses replies the simulator keeps for ``previous_response_id`` (oldest dropped first)."""


class ResponseStore:
    """Finished Responses replies by id → the conversation's tokens so far (prompt + output); bounded."""

    __slots__ = ("_by_id", "capacity")

    def __init__(self, capacity: int = STORED_RESPONSES) -> None:
        """An empty store of at most ``capacity`` (>= 1) replies."""
        self.capacity = max(1, capacity)
        self._by_id: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        """Replies stored."""
        return len(self._by_id)

    def keep(self, response_id: str, context_tokens: int) -> None:
        """Store a finished reply; the oldest one goes when the store is full."""
        self._by_id[response_id] = context_tokens
        self._by_id.move_to_end(response_id)
        while len(self._by_id) > self.capacity:
            self._by_id.popitem(last=False)

    def context_tokens(self, response_id: str) -> int | None:
        """The stored conversation's tokens of ``response_id``; None if not stored (or dropped)."""
        return self._by_id.get(response_id)


def _event(name: str, obj: dict[str, Any]) -> bytes:
    data = json.dumps({"type": name, **obj}, separators=(",", ":"))
    return b"event: " + name.encode() + b"\ndata: " + data.encode() + b"\n\n"


class _InvalidBodyError(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def parse_api_request(
    endpoint: Endpoint, raw: bytes, served_model: str, max_model_len: int, stored: ResponseStore | None = None
) -> tuple[GenerationRequest, int] | ErrorReply:
    """Validate a Responses, Messages or embeddings body; (request, number of inputs) or the 4xx reply to send.

    ``stored``: the replies a Responses ``previous_response_id`` may continue (None: none).
    """
    body = read_request_body(raw, served_model)
    if isinstance(body, ErrorReply):
        return body
    try:
        return _parse(endpoint, body, max_model_len, stored)
    except _InvalidBodyError as exc:
        return ErrorReply(400, "BadRequestError", str(exc), exc.param)
    except ValueError as exc:  # the chat token counter's own field errors
        return ErrorReply(400, "BadRequestError", str(exc), "input" if endpoint is Endpoint.RESPONSES else "messages")


def _parse(
    endpoint: Endpoint, body: dict[str, Any], max_model_len: int, stored: ResponseStore | None
) -> tuple[GenerationRequest, int]:
    inputs = 1
    if endpoint is Endpoint.EMBEDDINGS:
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise _InvalidBodyError("'input' is required for /v1/embeddings: a string or a list of strings", "input")
        prompt_tokens, max_tokens, inputs = sum(count_text_tokens(t) for t in texts), 1, len(texts)
    elif endpoint is Endpoint.RESPONSES:
        if "input" not in body:
            raise _InvalidBodyError("Field required: 'input' (missing_required_parameter) for /v1/responses", "input")
        messages = _responses_messages(body["input"], body.get("instructions"))
        prompt_tokens = count_chat_prompt_tokens(messages) + _continued_tokens(body, stored)
        max_tokens = _positive(body, "max_output_tokens") or max(1, max_model_len - prompt_tokens)
    else:
        max_tokens = _positive(body, "max_tokens") or 0
        if not max_tokens:
            raise _InvalidBodyError("'max_tokens' is required for /v1/messages", "max_tokens")
        system, given = body.get("system"), body.get("messages")
        if isinstance(system, str) and isinstance(given, list):
            given = [{"role": "system", "content": system}, *given]
        prompt_tokens = count_chat_prompt_tokens(given)
    if endpoint is not Endpoint.EMBEDDINGS and prompt_tokens + max_tokens > max_model_len:
        raise _InvalidBodyError(
            f"This model's maximum context length is {max_model_len} tokens; the request asks for "
            f"{prompt_tokens + max_tokens} ({prompt_tokens} prompt, {max_tokens} output)",
            "max_tokens",
        )
    stream = body.get("stream", False) is True and endpoint is not Endpoint.EMBEDDINGS
    request = GenerationRequest(
        endpoint=endpoint,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=0,
        ignore_eos=endpoint is Endpoint.EMBEDDINGS or body.get("ignore_eos") is True,
        stream=stream,
        include_usage=True,
        continuous_usage=False,
    )
    return request, inputs


def _continued_tokens(body: dict[str, Any], stored: ResponseStore | None) -> int:
    """The stored conversation's tokens that ``previous_response_id`` continues; 0 without one."""
    previous = body.get("previous_response_id")
    if previous is None:
        return 0
    if not isinstance(previous, str) or not previous:
        raise _InvalidBodyError(
            f"'previous_response_id' must be a response id string, got {previous!r}", "previous_response_id"
        )
    tokens = stored.context_tokens(previous) if stored is not None else None
    if tokens is None:
        raise _InvalidBodyError(
            f"Previous response with id '{previous}' not found (previous_response_not_found); "
            "continue a response this server returned and still stores",
            "previous_response_id",
        )
    return tokens


def _positive(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise _InvalidBodyError(f"'{name}' must be an integer >= 1, got {value!r}", name)
    return value


def _responses_messages(given: Any, instructions: Any) -> list[dict[str, Any]]:
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    if not isinstance(items, list) or not items:
        raise _InvalidBodyError("'input' must be a string or a non-empty list of message items", "input")
    messages: list[dict[str, Any]] = []
    if isinstance(instructions, str):
        messages.append({"role": "system", "content": instructions})
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _InvalidBodyError(f"input[{i}] must be a message item {{'role', 'content'}}", "input")
        content = item.get("content")
        if isinstance(content, list):  # input_text parts → chat text parts
            content = [{"type": "text", "text": p.get("text")} if isinstance(p, dict) else p for p in content]
        messages.append({"role": item.get("role", "user"), "content": content})
    return messages


# ── streams ──────────────────────────────────────────────────────────────
class ResponsesStreamEncoder:
    """Byte templates of one Responses API stream (``StreamEncoder``'s surface: ``role_chunk`` opens it)."""

    __slots__ = ("_created", "_id", "_model", "_prompt_tokens", "_seq", "_token_head", "_words")

    def __init__(self, request: GenerationRequest, request_id: str, created_unix: int, model: str) -> None:
        """Templates for ``request``; ``request_id`` becomes ``resp_…`` and ``msg_…``."""
        self._id, self._created, self._model, self._prompt_tokens = (
            request_id,
            created_unix,
            model,
            request.prompt_tokens,
        )
        self._seq = 0
        self._words: list[bytes] = []
        self._token_head = (
            b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_'
            + request_id.encode()
            + b'","output_index":0,"content_index":0,"delta":"'
        )

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": f"resp_{self._id}", "object": "response", "created_at": self._created, "model": self._model,
            "status": status, **extra,
        }  # fmt: skip

    def role_chunk(self) -> bytes:
        """The opening structural events (no token)."""
        item = {"id": f"msg_{self._id}", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        return b"".join(
            (
                _event(
                    "response.created", {"response": self._response("in_progress"), "sequence_number": self._next()}
                ),
                _event(
                    "response.output_item.added", {"output_index": 0, "item": item, "sequence_number": self._next()}
                ),
                _event(
                    "response.content_part.added",
                    {
                        "item_id": item["id"],
                        "output_index": 0,
                        "content_index": 0,
                        "part": part,
                        "sequence_number": self._next(),
                    },
                ),
            )
        )

    def add_tokens(self, words: list[bytes], start: int, stop: int, out: list[bytes]) -> None:
        """Append one ``response.output_text.delta`` per token of ``words[start:stop]``."""
        self._words = words
        head = self._token_head
        for i in range(start, stop):
            out.extend((head, words[i], b'","sequence_number":%d}\n\n' % self._next()))

    def add_end(self, finish_reason: str, completion_tokens: int, out: list[bytes]) -> None:
        """Append the ``.done`` events and ``response.completed`` or ``response.incomplete`` with usage."""
        text = b"".join(self._words[:completion_tokens]).decode()
        item_id = f"msg_{self._id}"
        out.append(_event("response.output_text.done", {"item_id": item_id, "output_index": 0, "content_index": 0,
                                                        "text": text, "sequence_number": self._next()}))  # fmt: skip
        out.append(_event("response.output_item.done", {"output_index": 0, "sequence_number": self._next(),
                                                        "item": {"id": item_id, "type": "message"}}))  # fmt: skip
        usage = {
            "input_tokens": self._prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self._prompt_tokens + completion_tokens,
        }  # fmt: skip
        if finish_reason == "stop":
            response = self._response("completed", usage=usage, incomplete_details=None)
            out.append(_event("response.completed", {"response": response, "sequence_number": self._next()}))
            return
        reason = "max_output_tokens" if finish_reason == "length" else finish_reason
        response = self._response("incomplete", usage=usage, incomplete_details={"reason": reason})
        out.append(_event("response.incomplete", {"response": response, "sequence_number": self._next()}))


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


class MessagesStreamEncoder:
    """Byte templates of one Anthropic Messages stream (``StreamEncoder``'s surface)."""

    __slots__ = ("_id", "_model", "_prompt_tokens")

    _TOKEN_HEAD = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"'
    )

    def __init__(self, request: GenerationRequest, request_id: str, created_unix: int, model: str) -> None:
        """Templates for ``request`` (``created_unix`` is not part of this API)."""
        del created_unix
        self._id, self._model, self._prompt_tokens = request_id, model, request.prompt_tokens

    def role_chunk(self) -> bytes:
        """``message_start`` (input tokens), ``content_block_start`` and a ``ping`` (no token)."""
        message: dict[str, Any] = {
            "id": f"msg_{self._id}", "type": "message", "role": "assistant", "content": [], "model": self._model,
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self._prompt_tokens, "output_tokens": 1},
        }  # fmt: skip
        return b"".join(
            (
                _event("message_start", {"message": message}),
                _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                _event("ping", {}),
            )
        )

    def add_tokens(self, words: list[bytes], start: int, stop: int, out: list[bytes]) -> None:
        """Append one ``text_delta`` per token of ``words[start:stop]``."""
        head = self._TOKEN_HEAD
        for i in range(start, stop):
            out.extend((head, words[i], b'"}}\n\n'))

    def add_end(self, finish_reason: str, completion_tokens: int, out: list[bytes]) -> None:
        """Append ``content_block_stop``, ``message_delta`` (stop reason, output tokens) and ``message_stop``."""
        out.append(_event("content_block_stop", {"index": 0}))
        delta = {"stop_reason": _STOP_REASONS.get(finish_reason, finish_reason), "stop_sequence": None}
        out.append(_event("message_delta", {"delta": delta, "usage": {"output_tokens": completion_tokens}}))
        out.append(_event("message_stop", {}))


def failure_event(endpoint: Endpoint) -> bytes:
    """The API's own mid-stream failure event (``--midstream-error-rate``)."""
    message = "llmload sim: injected engine failure mid-stream"
    if endpoint is Endpoint.RESPONSES:
        error = {"code": "server_error", "message": message}
        return _event("response.failed", {"response": {"status": "failed", "error": error}})
    return _event("error", {"error": {"type": "api_error", "message": message}})


# ── whole replies ────────────────────────────────────────────────────────
def encode_api_whole_reply(
    request: GenerationRequest, plan: ReplyPlan, request_id: str, created: int, model: str
) -> bytes:
    """The non-streamed Responses ``response`` or Anthropic ``message`` of a finished reply."""
    text = b"".join(plan.words).decode()
    n, p = len(plan.words), request.prompt_tokens
    body: dict[str, Any]
    if request.endpoint is Endpoint.RESPONSES:
        incomplete = plan.finish_reason != "stop"
        reason = "max_output_tokens" if plan.finish_reason == "length" else plan.finish_reason
        body = {
            "id": f"resp_{request_id}", "object": "response", "created_at": created, "model": model,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": reason} if incomplete else None,
            "output": [{"id": f"msg_{request_id}", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": p, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": n,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": p + n},
        }  # fmt: skip
    else:
        body = {
            "id": f"msg_{request_id}", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": _STOP_REASONS.get(plan.finish_reason, plan.finish_reason), "stop_sequence": None,
            "usage": {"input_tokens": p, "output_tokens": n},
        }  # fmt: skip
    return json.dumps(body, separators=(",", ":")).encode()


def encode_embeddings(inputs: int, prompt_tokens: int, model: str, seed: int) -> bytes:
    """One deterministic ``_EMBEDDING_DIM``-float vector per input, with ``usage.prompt_tokens``."""
    data = [
        {"object": "embedding", "index": i, "embedding": [round(((seed + i * 7 + d) % 13) / 13.0, 4)
                                                          for d in range(_EMBEDDING_DIM)]}
        for i in range(inputs)
    ]  # fmt: skip
    body = {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}  # fmt: skip
    return json.dumps(body, separators=(",", ":")).encode()
