"""Request bodies for the Responses API, Anthropic Messages and embeddings (pure functions).

Shapes follow the APIs as served by vLLM, SGLang and gateways:

- ``POST /v1/responses`` (OpenAI Responses): ``input`` (a string, or message
  items ``{"role", "content"}``), ``max_output_tokens``, ``stream``;
  ``previous_response_id`` continues a stored conversation on the server.
- ``POST /v1/messages`` (Anthropic Messages): ``messages`` (user/assistant
  turns), ``system`` apart, ``max_tokens`` (required), ``stream``; the
  headers ``anthropic-version`` and ``x-api-key``.
- ``POST /v1/embeddings``: ``input`` (a list of strings, one vector each);
  nothing is generated, so nothing streams.

``extra`` fields are merged into the body as for chat (``llmload.request.payloads``);
keys the builders own may not be overridden.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from llmload.errors import ConfigError
from llmload.request.payloads import LLMRequest

__all__ = [
    "ANTHROPIC_VERSION",
    "API_NAMES",
    "EMBEDDINGS_PATH",
    "MESSAGES_PATH",
    "RESPONSES_PATH",
    "build_embeddings_request",
    "build_messages_request",
    "build_responses_request",
    "messages_connection_headers",
]

RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"
EMBEDDINGS_PATH = "/v1/embeddings"
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header sent with every Messages request (the API's stable version)."""

API_NAMES = {
    "responses": "the OpenAI Responses API",
    "messages": "the Anthropic Messages API",
    "embeddings": "the embeddings API",
}
"""What each of these endpoints is called in messages (the preflight's refusals, which name the path posted)."""

_RESERVED = frozenset({"model", "input", "messages", "system", "stream", "max_tokens", "max_output_tokens"})


def build_responses_request(
    *,
    model: str,
    messages: Sequence[Mapping[str, str]],
    max_tokens: int,
    temperature: float | None = None,
    ignore_eos: bool = False,
    stream: bool = True,
    extra: Mapping[str, Any] | None = None,
    requested_prompt_tokens: int | None = None,
    previous_response_id: str | None = None,
    path: str | None = None,
) -> LLMRequest:
    """Build a ``/v1/responses`` request.

    Args:
        model: served model name.
        messages: ``{"role", "content"}`` mappings with string values; one
            user message is sent as a plain string ``input``, several as
            message items (a ``system`` message becomes ``instructions``).
        max_tokens: ``max_output_tokens``, > 0.
        temperature: sampling temperature; None leaves the server default.
        ignore_eos: ask for exactly ``max_tokens`` tokens (vLLM/SGLang's sampling
            extension, passed through by their Responses and Messages servers).
        stream: request the typed event stream.
        extra: additional body fields.
        requested_prompt_tokens: the workload's prompt length estimate.
        previous_response_id: continue the server-stored conversation of that response.
        path: URL path instead of ``/v1/responses``.

    Raises:
        ConfigError: an argument is invalid; the message names it.
    """
    clean = _checked_messages(messages)
    system = [m["content"] for m in clean if m["role"] == "system"]
    turns = [m for m in clean if m["role"] != "system"]
    if not turns:
        raise ConfigError("the Responses API needs at least one user message; the prompt has only system text")
    body: dict[str, Any] = {"model": _checked_model(model)}
    if system:
        body["instructions"] = "\n".join(system)
    body["input"] = turns[0]["content"] if len(turns) == 1 and turns[0]["role"] == "user" else turns
    body["max_output_tokens"] = _checked_max_tokens(max_tokens)
    if previous_response_id is not None:
        body["previous_response_id"] = previous_response_id
    _add_sampling(body, temperature, stream, extra, ignore_eos)
    return LLMRequest(
        endpoint="responses",
        path=path or RESPONSES_PATH,
        body=_encode(body),
        model=model,
        stream=stream,
        prompt_text="\n".join(m["content"] for m in clean),
        requested_prompt_tokens=requested_prompt_tokens,
        min_output_tokens=max_tokens if ignore_eos else None,
    )


def build_messages_request(
    *,
    model: str,
    messages: Sequence[Mapping[str, str]],
    max_tokens: int,
    temperature: float | None = None,
    ignore_eos: bool = False,
    stream: bool = True,
    extra: Mapping[str, Any] | None = None,
    requested_prompt_tokens: int | None = None,
    api_key: str | None = None,
    path: str | None = None,
) -> LLMRequest:
    """Build an Anthropic ``/v1/messages`` request.

    Args:
        model, max_tokens, temperature, ignore_eos, stream, extra, requested_prompt_tokens: as for
            ``build_responses_request`` (``max_tokens`` is the body's ``max_tokens``).
        messages: as for ``build_responses_request``; ``system`` messages go to
            the top-level ``system`` field (Messages has no system role).
        api_key: sent as ``x-api-key`` (Anthropic's header); None sends none.
        path: URL path instead of ``/v1/messages``.

    Raises:
        ConfigError: an argument is invalid; the message names it.
    """
    clean = _checked_messages(messages)
    system = [m["content"] for m in clean if m["role"] == "system"]
    turns = [{"role": m["role"], "content": m["content"]} for m in clean if m["role"] != "system"]
    if not turns:
        raise ConfigError("the Messages API needs at least one user message; the prompt has only system text")
    body: dict[str, Any] = {"model": _checked_model(model), "max_tokens": _checked_max_tokens(max_tokens)}
    if system:
        body["system"] = "\n".join(system)
    body["messages"] = turns
    _add_sampling(body, temperature, stream, extra, ignore_eos)
    headers = [("anthropic-version", ANTHROPIC_VERSION)]
    if api_key:
        headers.append(("x-api-key", api_key))
    return LLMRequest(
        endpoint="messages",
        path=path or MESSAGES_PATH,
        body=_encode(body),
        model=model,
        stream=stream,
        prompt_text="\n".join(m["content"] for m in clean),
        requested_prompt_tokens=requested_prompt_tokens,
        headers=tuple(headers),
        min_output_tokens=max_tokens if ignore_eos else None,
    )


def build_embeddings_request(
    *,
    model: str,
    inputs: Sequence[str],
    extra: Mapping[str, Any] | None = None,
    requested_prompt_tokens: int | None = None,
    path: str | None = None,
) -> LLMRequest:
    """Build a ``/v1/embeddings`` request for a batch of ``inputs`` (one vector expected per input).

    Raises:
        ConfigError: no inputs, an input that is not a string, or an invalid argument.
    """
    if isinstance(inputs, (str, bytes)) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise ConfigError(f"embeddings inputs must be a non-empty list of strings, got {inputs!r}")
    body: dict[str, Any] = {"model": _checked_model(model), "input": list(inputs)}
    for key, value in (extra or {}).items():
        if key in _RESERVED:
            raise ConfigError(f"extra body field {key!r} is set by llmload itself; use the matching option instead")
        body[key] = value
    return LLMRequest(
        endpoint="embeddings",
        path=path or EMBEDDINGS_PATH,
        body=_encode(body),
        model=model,
        stream=False,
        prompt_text="\n".join(inputs),
        requested_prompt_tokens=requested_prompt_tokens,
        inputs=len(inputs),
    )


def messages_connection_headers(
    headers: Mapping[str, str], *, bearer_from_key: bool, explicit: Sequence[tuple[str, str]] = ()
) -> dict[str, str]:
    """The run's connection ``headers`` as Anthropic's Messages API expects them.

    Messages takes the API key as ``x-api-key`` (``build_messages_request``),
    so the ``Authorization: Bearer`` header llmload made from that key
    (``bearer_from_key``) is left out; an ``Authorization`` the user passed
    in ``explicit`` (``--header``) is kept.
    """
    if not bearer_from_key or any(name.lower() == "authorization" for name, _ in explicit):
        return dict(headers)
    return {name: value for name, value in headers.items() if name.lower() != "authorization"}


def _checked_messages(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    if isinstance(messages, (str, bytes)) or not messages:
        raise ConfigError(f"messages must be a non-empty list of {{'role', 'content'}} mappings, got {messages!r}")
    clean: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(role, str) or not role or not isinstance(content, str):
            raise ConfigError(
                f"messages[{i}] must be a mapping with string 'role' and 'content', got {message!r}; "
                'e.g. {"role": "user", "content": "hello"}'
            )
        clean.append({"role": role, "content": content})
    return clean


def _checked_model(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"model must be a non-empty string, got {model!r}; pass --model NAME")
    return model


def _checked_max_tokens(max_tokens: int) -> int:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}; pass e.g. 256")
    return max_tokens


def _add_sampling(
    body: dict[str, Any], temperature: float | None, stream: bool, extra: Mapping[str, Any] | None, ignore_eos: bool
) -> None:
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ConfigError(f"temperature must be a number >= 0 or None, got {temperature!r}")
        body["temperature"] = temperature
    if ignore_eos:
        body["ignore_eos"] = True
    body["stream"] = stream
    for key, value in (extra or {}).items():
        if key in _RESERVED:
            raise ConfigError(f"extra body field {key!r} is set by llmload itself; use the matching option instead")
        if key == "stream_options":
            continue  # a chat/completions field: the Responses and Messages APIs reject it
        body[key] = value


def _encode(body: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"request body is not JSON-serialisable: {exc}; check the extra fields") from exc
