"""Requests the simulator accepts: JSON body → ``GenerationRequest`` or ``ErrorReply``.

Token model for prompts (deterministic, no tokenizer needed):

- A text is ``len(re.findall(r"\\w+|[^\\w\\s]", text))`` tokens: each run of
  word characters is one token, each other non-space character is one token.
  ``"Hello, world!"`` is 4 tokens. A prompt given as token ids counts one per id.
- A chat prompt adds a fixed template overhead, following the count OpenAI's
  cookbook gives for its chat models (``num_tokens_from_messages``): 3 tokens
  per message, plus the role's tokens, plus 1 + the name's tokens when a
  message has a ``name``, plus 3 tokens that prime the assistant reply. One
  user message ``"hello world"`` is 3 + 1 + 2 + 3 = 9 prompt tokens.

Validation follows vLLM's OpenAI server: unknown model → 404 ``NotFoundError``;
malformed JSON, missing or mistyped fields, or prompt + max_tokens longer than
the context → 400 ``BadRequestError``; both with the body
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "CHAT_REPLY_PRIMER_TOKENS",
    "CHAT_TOKENS_PER_MESSAGE",
    "CHAT_TOKENS_PER_NAME",
    "COMPLETIONS_DEFAULT_MAX_TOKENS",
    "Endpoint",
    "ErrorReply",
    "GenerationRequest",
    "count_chat_prompt_tokens",
    "count_text_tokens",
    "parse_generation_request",
    "read_request_body",
]

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

CHAT_TOKENS_PER_MESSAGE = 3
"""Template tokens around every chat message (start marker, role separator, end marker)."""
CHAT_TOKENS_PER_NAME = 1
"""Extra template token when a chat message carries a ``name``."""
CHAT_REPLY_PRIMER_TOKENS = 3
"""Template tokens that open the assistant's reply after the last message."""
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
"""``max_tokens`` of /v1/completions when the request omits it (OpenAI's legacy default).

/v1/chat/completions without ``max_tokens`` may use the rest of the context,
``max_model_len - prompt_tokens``, as vLLM does.
"""


class Endpoint(Enum):
    """The served APIs; the value is the URL path and the metrics label.

    Responses, Messages and embeddings bodies are read by ``llmload.sim.api_replies``.
    """

    COMPLETIONS = "/v1/completions"
    CHAT = "/v1/chat/completions"
    RESPONSES = "/v1/responses"
    MESSAGES = "/v1/messages"
    EMBEDDINGS = "/v1/embeddings"


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A validated generation request.

    Attributes:
        endpoint: which API shape to answer in.
        prompt_tokens: prompt length under the sim's token model (see module doc).
        max_tokens: most tokens to generate (explicit, or the endpoint default).
        min_tokens: the reply is never shorter than this (vLLM's ``min_tokens``).
        ignore_eos: generate exactly ``max_tokens`` tokens.
        stream: answer with server-sent events.
        include_usage: ``stream_options.include_usage``: end the stream with a
            ``"choices": []`` chunk carrying ``usage``.
        continuous_usage: ``stream_options.continuous_usage_stats`` together with
            ``include_usage`` (vLLM): every chunk also carries the cumulative ``usage``.
        cached_tokens: prompt tokens found in the prefix cache (``--prefix-cache-blocks``),
            reported as ``usage.prompt_tokens_details.cached_tokens``; None = no cache.
        stored_as: the Responses API id the reply is kept under for
            ``previous_response_id`` (``llmload.sim.api_replies.ResponseStore``); None: not kept.
    """

    endpoint: Endpoint
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    cached_tokens: int | None = None
    stored_as: str | None = None


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An HTTP error answer in the OpenAI/vLLM error shape."""

    status: int
    type: str
    message: str
    param: str | None = None

    @property
    def status_line(self) -> str:
        """WSGI status line, e.g. ``"404 Not Found"``."""
        reasons = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
        return f"{self.status} {reasons.get(self.status, 'Error')}"

    def body(self) -> bytes:
        """Return ``{"error": {"message", "type", "param", "code"}}`` as JSON bytes."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.status}
        return json.dumps({"error": error}, separators=(",", ":")).encode()


class _InvalidFieldError(ValueError):
    """A field failed validation; converted to a 400 ``ErrorReply`` by the parser."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.param = param


def count_text_tokens(text: str) -> int:
    """Return the number of prompt tokens in ``text`` under the sim's token model."""
    return sum(1 for _ in _TOKEN_RE.finditer(text))


def count_chat_prompt_tokens(messages: object) -> int:
    """Return the prompt tokens of a chat ``messages`` list, template overhead included.

    Raises:
        _InvalidFieldError: ``messages`` is not a non-empty list of ``{"role", "content"}``
            objects with text content.
    """
    if not isinstance(messages, list) or not messages:
        raise _InvalidFieldError('\'messages\' must be a non-empty list of {"role": ..., "content": ...}', "messages")
    total = CHAT_REPLY_PRIMER_TOKENS
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _InvalidFieldError(f"messages[{i}] must be an object with a string 'role'", "messages")
        total += CHAT_TOKENS_PER_MESSAGE + count_text_tokens(message["role"])
        total += _count_content_tokens(message.get("content"), i)
        name = message.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise _InvalidFieldError(f"messages[{i}].name must be a string, got {name!r}", "messages")
            total += CHAT_TOKENS_PER_NAME + count_text_tokens(name)
    return total


def _count_content_tokens(content: object, index: int) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text_tokens(content)
    if isinstance(content, list):
        total = 0
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise _InvalidFieldError(
                    f'messages[{index}].content parts must be {{"type": "text", "text": ...}}; '
                    "the simulator accepts text only",
                    "messages",
                )
            total += count_text_tokens(part["text"])
        return total
    raise _InvalidFieldError(f"messages[{index}].content must be a string or a list of text parts", "messages")


def _count_completion_prompt_tokens(prompt: object) -> int:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of exactly one prompt
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    if isinstance(prompt, list) and all(type(t) is int for t in prompt):
        return len(prompt)  # token ids
    raise _InvalidFieldError(
        "'prompt' must be a string, a list of token ids, or a list holding one of those; "
        "the simulator serves one prompt per request",
        "prompt",
    )


def _optional_int(body: dict[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int or value < minimum:
        raise _InvalidFieldError(f"'{name}' must be an integer >= {minimum}, got {value!r}", name)
    return value


def _optional_bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _InvalidFieldError(f"'{name}' must be true or false, got {value!r}", name)
    return value


def read_request_body(raw: bytes, served_model: str) -> dict[str, Any] | ErrorReply:
    """The body as a JSON object naming ``served_model``, or the 400/404 reply a server gives instead."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return ErrorReply(400, "BadRequestError", f"request body is not valid JSON ({exc}); send a JSON object")
    if not isinstance(body, dict):
        return ErrorReply(400, "BadRequestError", 'request body must be a JSON object, e.g. {"model": ...}')
    model = body.get("model")
    if not isinstance(model, str):
        return ErrorReply(400, "BadRequestError", f"'model' is required; use \"{served_model}\"", "model")
    if model != served_model:
        return ErrorReply(404, "NotFoundError", f"model '{model}' is not served; available: {served_model}")
    return body


def parse_generation_request(
    endpoint: Endpoint, raw: bytes, served_model: str, max_model_len: int
) -> GenerationRequest | ErrorReply:
    """Validate a request body for ``endpoint``.

    Args:
        endpoint: the generation endpoint the body was posted to.
        raw: the HTTP request body.
        served_model: the only model name accepted.
        max_model_len: context length in tokens.

    Returns:
        The request, or the 400/404 reply to send instead.
    """
    body = read_request_body(raw, served_model)
    if isinstance(body, ErrorReply):
        return body
    try:
        return _parse_fields(endpoint, body, max_model_len)
    except _InvalidFieldError as exc:
        return ErrorReply(400, "BadRequestError", str(exc), exc.param)


def _parse_fields(endpoint: Endpoint, body: dict[str, Any], max_model_len: int) -> GenerationRequest:
    if endpoint is Endpoint.CHAT:
        if "messages" not in body:
            raise _InvalidFieldError("'messages' is required for /v1/chat/completions", "messages")
        prompt_tokens = count_chat_prompt_tokens(body["messages"])
        max_tokens = _optional_int(body, "max_completion_tokens", 1)
        if max_tokens is None:
            max_tokens = _optional_int(body, "max_tokens", 1)
        if max_tokens is None:
            max_tokens = max(1, max_model_len - prompt_tokens)
    else:
        if "prompt" not in body:
            raise _InvalidFieldError("'prompt' is required for /v1/completions", "prompt")
        prompt_tokens = _count_completion_prompt_tokens(body["prompt"])
        max_tokens = _optional_int(body, "max_tokens", 1)
        if max_tokens is None:
            max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
    if prompt_tokens + max_tokens > max_model_len:
        raise _InvalidFieldError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    n = _optional_int(body, "n", 1)
    if n is not None and n != 1:
        raise _InvalidFieldError(f"'n' must be 1, got {n}; the simulator generates one choice per request", "n")
    min_tokens = _optional_int(body, "min_tokens", 0) or 0
    if min_tokens > max_tokens:
        raise _InvalidFieldError(f"'min_tokens' ({min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens")
    stream = _optional_bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise _InvalidFieldError("'stream_options' can only be set when 'stream' is true", "stream_options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise _InvalidFieldError(f"'stream_options' must be an object, got {options!r}", "stream_options")
    include_usage = _optional_bool(options, "include_usage")
    return GenerationRequest(
        endpoint=endpoint,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_optional_bool(body, "ignore_eos"),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=include_usage and _optional_bool(options, "continuous_usage_stats"),
    )
