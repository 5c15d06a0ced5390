"""Request bodies for ``/v1/completions`` and ``/v1/chat/completions`` (pure functions).

Bodies follow the OpenAI API as served by vLLM, SGLang and llama.cpp. When
streaming, ``stream_options.include_usage`` is requested (unless the caller
says the endpoint refuses it) so that the server's token counts (the
preferred source, see ``tokens.py``) arrive in the final chunk; servers that
ignore it simply send no usage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from llmload.errors import ConfigError

__all__ = [
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "Endpoint",
    "LLMRequest",
    "build_chat_request",
    "build_completion_request",
    "check_endpoint_path",
    "check_host_path",
    "check_host_v1",
    "doubled_v1_hint",
]

Endpoint = Literal["chat", "completions", "responses", "messages", "embeddings"]

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"

# Paths of other APIs than the two llmload's bodies are for: posting a chat or completions
# body there fails every request, or worse, is answered in a shape no figure can be read from.
_OTHER_APIS = {
    "/responses": "the OpenAI Responses API",
    "/messages": "the Anthropic Messages API",
    "/embeddings": "the embeddings API",
    "/chat/completions": "the chat/completions API",
    "/completions": "the completions API",
    "/audio/speech": "the text-to-speech API",
    "/audio/transcriptions": "the transcription API",
    "/images/generations": "the image generation API",
    "/rerank": "a rerank API",
}
_BODY_NAMES = {
    "chat": "ChatUser posts chat/completions bodies",
    "completions": "CompletionUser posts completions bodies",
    "responses": "ResponsesUser posts Responses API bodies",
    "messages": "MessagesUser posts Anthropic Messages bodies",
    "embeddings": "EmbeddingsUser posts embeddings bodies",
}
# The suffix of each endpoint's own API, and the user (packaged locustfile) that speaks each other API.
_OWN_SUFFIX = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
    "messages": "/messages",
    "embeddings": "/embeddings",
}
_SPEAKERS = {
    "/responses": "ResponsesUser (locust -f $(llmload locustfile responses))",
    "/messages": "MessagesUser (locust -f $(llmload locustfile messages))",
    "/embeddings": "EmbeddingsUser (locust -f $(llmload locustfile embeddings))",
    "/chat/completions": "ChatUser (locust -f $(llmload locustfile chat))",
    "/completions": "CompletionUser (locust -f $(llmload locustfile completions))",
}
_OWN_PATHS = {
    "chat": CHAT_PATH,
    "completions": COMPLETIONS_PATH,
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "embeddings": "/v1/embeddings",
}

# Keys the builders own; `extra` may not override them.
_RESERVED = frozenset({"model", "prompt", "messages", "stream", "max_tokens", "max_completion_tokens"})


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One ready-to-send request.

    Attributes:
        endpoint: ``"chat"`` or ``"completions"``.
        path: URL path, e.g. ``/v1/chat/completions``.
        body: the JSON body, UTF-8 encoded.
        model: the model name in the body.
        stream: whether an SSE stream was requested.
        prompt_text: the prompt as plain text (chat: message contents joined
            with newlines); only used to count prompt tokens locally when the
            server reports no usage.
        requested_prompt_tokens: the workload's own estimate of the prompt
            length in tokens; None if it has none.
        min_output_tokens: the reply length the body asks for as a minimum:
            ``max_tokens`` with ``ignore_eos``, else an integer ``min_tokens``
            extra field (vLLM, SGLang); None when the server may stop when it likes.
        headers: headers this request needs besides the run's, as (name, value)
            pairs: the API's own (Anthropic's ``anthropic-version``,
            ``x-api-key``) and the request's own (``--session-header``).
        inputs: embeddings: the number of inputs in the batch (the reply
            must carry as many vectors); None for generation APIs.
    """

    endpoint: Endpoint
    path: str
    body: bytes
    model: str
    stream: bool
    prompt_text: str
    requested_prompt_tokens: int | None = None
    min_output_tokens: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    inputs: int | None = None


def build_completion_request(
    *,
    model: str,
    prompt: str,
    max_tokens: int,
    temperature: float | None = None,
    ignore_eos: bool = False,
    stream: bool = True,
    extra: Mapping[str, Any] | None = None,
    requested_prompt_tokens: int | None = None,
    max_tokens_field: str = "max_tokens",
    include_usage: bool = True,
    path: str | None = None,
) -> LLMRequest:
    """Build a ``/v1/completions`` request.

    Args:
        model: served model name.
        prompt: the prompt text.
        max_tokens: upper bound on generated tokens, > 0.
        temperature: sampling temperature; None leaves the server default.
        ignore_eos: ask the server to keep generating past EOS (a vLLM/SGLang
            extension); only sent when true.
        stream: request an SSE stream.
        extra: additional body fields (e.g. ``top_p``, ``logit_bias``); a
            ``stream_options`` mapping is merged with ``include_usage``.
        requested_prompt_tokens: the workload's prompt length estimate.
        max_tokens_field: the body field of ``max_tokens`` (``max_completion_tokens`` for some endpoints).
        include_usage: when streaming, ask for ``stream_options.include_usage``.
        path: URL path instead of the endpoint's ``/v1/...`` path.

    Raises:
        ConfigError: an argument is invalid; the message names it.
    """
    if not isinstance(prompt, str):
        raise ConfigError(f"prompt must be a string, got {type(prompt).__name__}; pass the prompt text")
    body: dict[str, Any] = {"model": _checked_model(model), "prompt": prompt}
    _add_common(
        body,
        max_tokens=max_tokens,
        temperature=temperature,
        ignore_eos=ignore_eos,
        stream=stream,
        extra=extra,
        max_tokens_field=max_tokens_field,
        include_usage=include_usage,
    )
    return LLMRequest(
        endpoint="completions",
        path=path or COMPLETIONS_PATH,
        body=_encode(body),
        model=model,
        stream=stream,
        prompt_text=prompt,
        requested_prompt_tokens=requested_prompt_tokens,
        min_output_tokens=_min_output_tokens(max_tokens, ignore_eos, extra),
    )


def build_chat_request(
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    max_tokens: int,
    temperature: float | None = None,
    ignore_eos: bool = False,
    stream: bool = True,
    extra: Mapping[str, Any] | None = None,
    requested_prompt_tokens: int | None = None,
    max_tokens_field: str = "max_tokens",
    include_usage: bool = True,
    path: str | None = None,
) -> LLMRequest:
    """Build a ``/v1/chat/completions`` request.

    Args:
        model: served model name.
        messages: ``{"role": ..., "content": ...}`` mappings with string
            values, in conversation order; at least one.
        max_tokens, temperature, ignore_eos, stream, extra,
            requested_prompt_tokens, max_tokens_field, include_usage, path: as for
            ``build_completion_request``.

    Raises:
        ConfigError: an argument is invalid; the message names it.
    """
    if isinstance(messages, (str, bytes)) or not messages:
        raise ConfigError(f"messages must be a non-empty list of {{'role', 'content'}} mappings, got {messages!r}")
    clean: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        calls = message.get("tool_calls") if isinstance(message, Mapping) else None
        if not isinstance(role, str) or not role or not (isinstance(content, str) or (content is None and calls)):
            raise ConfigError(
                f"messages[{i}] must be a mapping with string 'role' and 'content', got {message!r}; "
                'e.g. {"role": "user", "content": "hello"}'
            )
        item: dict[str, Any] = {"role": role, "content": content}
        for key in ("tool_calls", "tool_call_id"):  # tool turns (OpenAI function calling)
            if key in message:
                item[key] = message[key]
        clean.append(item)
    body: dict[str, Any] = {"model": _checked_model(model), "messages": clean}
    _add_common(
        body,
        max_tokens=max_tokens,
        temperature=temperature,
        ignore_eos=ignore_eos,
        stream=stream,
        extra=extra,
        max_tokens_field=max_tokens_field,
        include_usage=include_usage,
    )
    return LLMRequest(
        endpoint="chat",
        path=path or CHAT_PATH,
        body=_encode(body),
        model=model,
        stream=stream,
        prompt_text="\n".join(m["content"] or "" for m in clean),
        requested_prompt_tokens=requested_prompt_tokens,
        min_output_tokens=_min_output_tokens(max_tokens, ignore_eos, extra),
    )


def _min_output_tokens(max_tokens: int, ignore_eos: bool, extra: Mapping[str, Any] | None) -> int | None:
    """The reply length a body asks for at least: ``max_tokens`` with ignore_eos, else ``min_tokens`` (capped)."""
    if ignore_eos:
        return max_tokens
    asked = (extra or {}).get("min_tokens")
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
        return None
    return min(asked, max_tokens)


def _checked_model(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"model must be a non-empty string, got {model!r}; pass --model NAME")
    return model


def _add_common(
    body: dict[str, Any],
    *,
    max_tokens: int,
    temperature: float | None,
    ignore_eos: bool,
    stream: bool,
    extra: Mapping[str, Any] | None,
    max_tokens_field: str,
    include_usage: bool,
) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}; pass e.g. 256")
    body[max_tokens_field] = max_tokens
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ConfigError(f"temperature must be a number >= 0 or None, got {temperature!r}")
        body["temperature"] = temperature
    if ignore_eos:
        body["ignore_eos"] = True
    body["stream"] = stream
    options: dict[str, Any] = {}
    for key, value in (extra or {}).items():
        if key in _RESERVED:
            raise ConfigError(f"extra body field {key!r} is set by llmload itself; use the matching option instead")
        if key == "stream_options":
            if not isinstance(value, Mapping):
                raise ConfigError(f"extra 'stream_options' must be a mapping, got {value!r}")
            options.update(value)
        else:
            body[key] = value
    if stream and include_usage:
        options["include_usage"] = True
    if stream and options:
        body["stream_options"] = options
    elif options:
        raise ConfigError(
            f"stream_options {options!r} only apply to streamed requests (servers reject them otherwise); "
            "drop them or enable streaming"
        )


def _encode(body: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"request body is not JSON-serialisable: {exc}; check the extra fields") from exc


def check_host_path(host: str, endpoint: Endpoint) -> None:
    """Refuse a ``-H`` whose path is another API's (``-H http://h/v1/responses``), as ``check_endpoint_path``.

    llmload appends its own path (``/v1/chat/completions``) to the host's; a
    host that already names an API endpoint is the OpenAI ``base_url`` habit
    gone one step further.

    Raises:
        ConfigError: the host's path ends like another API's; the message names it and the fix.
    """
    parts = urlsplit(host)
    path = parts.path.rstrip("/")
    if path:
        own = _OWN_PATHS[endpoint]
        root = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # never a user:password
        fix = f"Pass the server's root, -H {root} (llmload adds {own})"
        _refuse_other_api(path, endpoint, f"-H {root}{parts.path} ends in {path}, which", fix)


def check_host_v1(host: str, endpoint: Endpoint, endpoint_path: str | None = None) -> None:
    """Refuse a ``-H`` ending in ``/v1`` when the path posted to starts with ``/v1/`` (every request would 404).

    ``-H`` is the server's root, as vLLM bench's ``--base-url`` (llmload adds
    ``/v1/chat/completions`` and ``/v1/models``), not an OpenAI client's
    ``base_url``, which ends in ``/v1``. Not stripped silently: a host whose
    own path ends in ``/v1`` is kept for an ``--endpoint-path`` without ``/v1``
    (``-H https://gw/openai/v1 --endpoint-path /chat/completions``).

    Args:
        host: the ``-H`` URL (credentials are never shown).
        endpoint: the API whose default path (``/v1/...``) is posted to without ``endpoint_path``.
        endpoint_path: ``--endpoint-path``, or None.

    Raises:
        ConfigError: the doubled ``/v1``; the message names ``-H`` as given and the root to pass instead.
    """
    parts = urlsplit(host)
    path = parts.path.rstrip("/")
    posted = (endpoint_path or _OWN_PATHS[endpoint]).partition("?")[0]
    if not (path.lower().endswith("/v1") and posted.lower().startswith("/v1/")):
        return
    root = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # never a user:password
    fixed = f"{root}{path[: -len('/v1')]}" + (" (keeping its query string)" if parts.query else "")
    adds = f"--endpoint-path {posted} starts with /v1 too" if endpoint_path else f"llmload adds {posted} itself"
    raise ConfigError(
        f"-H {root}{parts.path} ends in /v1 and {adds}, so every request would go to {path}{posted} "
        f"and fail. Pass the server's root without /v1: -H {fixed} (like vLLM bench's --base-url; "
        "an OpenAI client's base_url ends in /v1, llmload's -H does not)",
        options=("-H",),
    )


def doubled_v1_hint(host: str, path: str) -> str | None:
    """The fix when ``-H`` already ends in ``/v1`` and ``path`` (the endpoint path) starts with it; else None."""
    base = urlsplit(host).path.rstrip("/")
    if base.lower().endswith("/v1") and path.lower().startswith("/v1/"):
        return f"drop /v1 from -H (llmload adds {path.partition('?')[0]})"
    return None


def check_endpoint_path(path: str, endpoint: Endpoint) -> None:
    """Refuse an ``--endpoint-path`` of another API than the one whose bodies ``endpoint``'s user posts.

    Raises:
        ConfigError: the path ends like another API's (``/v1/responses``,
            ``/v1/messages``, ``/v1/embeddings`` …); the message names it.
    """
    _refuse_other_api(path, endpoint, f"--endpoint-path {path}")


def _refuse_other_api(path: str, endpoint: Endpoint, what: str, fix: str | None = None) -> None:
    bare = path.partition("?")[0].rstrip("/").lower()
    own = _OWN_SUFFIX[endpoint]
    if bare.endswith(own) and not (endpoint == "completions" and bare.endswith("/chat/completions")):
        return
    for suffix, api in _OTHER_APIS.items():
        if suffix in ("/chat/completions", "/completions") and endpoint in ("chat", "completions"):
            continue  # chat and completions users accept each other's paths (gateways route either way)
        if bare.endswith(suffix):
            if fix is None:
                fix = (
                    f"Pass the path of the server's {own.strip('/')} endpoint, "
                    "e.g. --endpoint-path /openai/deployments/m/chat/completions"
                    if endpoint == "chat"
                    else f"Pass the path of the server's {own.strip('/')} endpoint"
                )
            speaker = _SPEAKERS.get(suffix)
            other = f"; to load {api}, run {speaker}" if speaker else ""
            raise ConfigError(
                f"{what} is {api}, but llmload's {_BODY_NAMES[endpoint]}; posting them there would fail "
                f"or be misread. {fix}{other}"
            )
