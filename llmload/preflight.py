"""Checks run once before any load: the server is up, serves the model, and answers correctly.

A run that "succeeds" against a dead server or a wrong model name wastes a
benchmark slot (BC-29); these checks stop it first, with one clear line.

1. ``GET /v1/models`` (with the API key): the requested model is served (else
   stop, listing the served models); without ``--model`` the first one is used.
2. One small probe request per user class (``max_tokens`` 2, streaming as
   configured): it must succeed; whether streamed replies carry ``usage`` says
   where token counts will come from.
3. When the server reports a context length (vLLM's ``max_model_len``), warn
   if prompt + ``max_tokens`` exceed it.
4. The open-file limit covers the users of this process: raise the soft limit
   up to the hard limit, or refuse with the numbers (BC-24).
"""

from __future__ import annotations

import json
import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmload.client import StreamingClient, Transport
from llmload.config import RunConfig
from llmload.errors import ConfigError, RequestError
from llmload.payloads import LLMRequest
from llmload.record import TokenSource

__all__ = ["ModelList", "PreflightReport", "check_open_files", "fetch_models", "probe"]

# Sockets per user (1) plus Locust's own (zmq, web UI, logs) and a margin.
_FDS_PER_PROCESS_MARGIN = 256


@dataclass(frozen=True, slots=True)
class ModelList:
    """What ``GET /v1/models`` said: served ids and, when reported, their context lengths (tokens)."""

    ids: tuple[str, ...]
    context_tokens: dict[str, int]


@dataclass
class PreflightReport:
    """Findings printed before load; ``warnings`` never stop the run."""

    model: str
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def fetch_models(host: str, get: Callable[[str], Any], api_key_env: str) -> ModelList:
    """Read ``GET /v1/models``.

    Raises:
        ConfigError: unreachable host, non-200 answer, or not an OpenAI model list.
    """
    try:
        reply = get("/v1/models")
    except RequestError as exc:
        raise ConfigError(f"cannot reach {host}/v1/models: {exc}. Is the server up and -H right?") from exc
    status, body = reply.status, reply.body
    if status in (401, 403):
        raise ConfigError(
            f"GET {host}/v1/models answered HTTP {status} (not authorised); "
            f"set the API key in ${api_key_env} or pass --api-key-file PATH"
        )
    if status == 407:
        raise ConfigError(
            f"GET {host}/v1/models: the proxy answered HTTP 407 (proxy authentication required); put its "
            "credentials in the proxy variable (http://USER:PASSWORD@HOST:PORT) or pass --ignore-proxy-env"
        )
    if status != 200:
        excerpt = body[:200].decode("utf-8", "replace")
        hint = (
            f"drop the /v1: pass -H {host.rstrip('/')[: -len('/v1')]}"
            if host.rstrip("/").endswith("/v1")
            else "check -H: it must be the server's base URL (e.g. http://HOST:8000), without a path"
        )
        raise ConfigError(f"GET {host}/v1/models answered HTTP {status} ({excerpt}); {hint}")
    try:
        data = json.loads(body)["data"]
        ids = tuple(str(m["id"]) for m in data)
        context = {
            str(m["id"]): int(m["max_model_len"])
            for m in data
            if isinstance(m, dict) and isinstance(m.get("max_model_len"), int)
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"GET {host}/v1/models did not return an OpenAI model list ({body[:200]!r}); "
            "is -H an OpenAI-compatible server?"
        ) from exc
    return ModelList(ids=ids, context_tokens=context)


def choose_model(models: ModelList, wanted: str | None, host: str) -> str:
    """Return ``wanted`` if served, else the first served model when ``wanted`` is None.

    Raises:
        ConfigError: the model is not served (the message lists what is).
    """
    if wanted is None:
        if not models.ids:
            raise ConfigError(f"{host}/v1/models lists no model; pass --model NAME")
        return models.ids[0]
    if wanted not in models.ids:
        raise ConfigError(f'model "{wanted}" not served; available: {", ".join(models.ids) or "none"}')
    return wanted


def probe(
    transport: Transport,
    requests: Sequence[tuple[str, LLMRequest]],
    config: RunConfig,
    models: ModelList,
    model: str,
) -> PreflightReport:
    """Send one small request per user class and report where token counts will come from.

    Args:
        transport: connection to the target.
        requests: (user class name, probe request with small max_tokens) pairs.
        config: run options (for max_tokens in the context check).
        models: the model list (context length).
        model: the model being tested.

    Raises:
        ConfigError: a probe request failed (the message carries the server's reason).
    """
    report = PreflightReport(model=model)
    client = StreamingClient(transport)
    for name, request in requests:
        record = client.run(request)
        if not record.ok:
            error = record.error
            reason = f"{error.category}: {error.message}" if error else record.outcome.value
            raise ConfigError(
                f"probe request for {name} ({request.path}) failed: {reason}. "
                "Fix the server or the options (use --skip-preflight to bypass)"
            )
        source = record.completion_tokens.source
        if not request.stream:
            report.notes.append(f"{name}: non-streaming; token counts from the server's usage")
        elif source is TokenSource.SERVER:
            report.notes.append(f"{name}: the server streams usage; token counts come from the server")
        else:
            report.warnings.append(
                f"{name}: the server sent no usage in its stream; completion tokens will be "
                + (
                    "counted with --tokenizer"
                    if config.tokenizer
                    else "the number of streamed chunks (a lower bound; pass --tokenizer PATH)"
                )
            )
        context = models.context_tokens.get(model)
        prompt = record.prompt_tokens.value
        if context is not None and prompt is not None and prompt + config.max_tokens > context:
            report.warnings.append(
                f"{name}: prompt ({prompt} tokens) + --max-tokens ({config.max_tokens}) exceeds the "
                f"model's context length ({context}); replies will be cut short or refused"
            )
    return report


def check_open_files(users_in_process: int) -> str | None:
    """Make sure this process may open a socket per user; return a note if the limit was raised.

    Raises:
        ConfigError: the hard limit is too low (the message gives the numbers and the fix).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = users_in_process + _FDS_PER_PROCESS_MARGIN
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ConfigError(
            f"open-file limit {soft} (hard {hard}) < needed ~{needed} for {users_in_process} users in "
            "this process; raise it (ulimit -n) or spread users over more workers (--processes N)"
        )
    target = needed if hard == resource.RLIM_INFINITY else max(needed, min(hard, 65536))
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return f"raised the open-file soft limit from {soft} to {target} for {users_in_process} users"
