"""Checks run once before any load: the server is up, serves the model, and answers correctly.

A run that "succeeds" against a dead server or a wrong model name wastes a
benchmark slot (every request 404, yet the run completes); these checks stop it first, with one clear line.

1. ``GET /v1/models`` (with the API key): the requested model is served (else
   stop, listing the served models); without ``--model`` the first one is used.
   A server without a model list (404/405) is a warning when ``--model`` is
   given (the probe decides) and a stop asking for ``--model`` otherwise.
2. One small probe request per user class (``max_tokens`` 2, streaming as
   configured): it must succeed; whether streamed replies carry ``usage`` says
   where token counts will come from.
3. When the server reports a context length (vLLM's ``max_model_len``) and
   the probe's prompt tokens + ``max_tokens`` exceed it: stop when every
   request sends that prompt (the server would refuse them all), else warn.
4. The open-file limit covers the users of this process: raise the soft limit
   up to the hard limit, or refuse with the numbers (else connections cap concurrency).
"""

from __future__ import annotations

import json
import resource
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from llmload.errors import ConfigError, ProxyUnreachableError, RequestError, WrongProtocolError
from llmload.request.api_bodies import API_NAMES
from llmload.request.client import FINISH_WAIT_S, ReplyEnd, StreamingClient, Transport
from llmload.request.error_pages import describe_error_page, summarize_body
from llmload.request.payloads import LLMRequest, doubled_v1_hint
from llmload.request.record import RequestRecord, TokenSource, UsageNote
from llmload.settings.config import RunConfig

__all__ = [
    "ModelList",
    "PreflightReport",
    "check_open_files",
    "fetch_models",
    "join_url",
    "not_streamed_warning",
    "probe",
]

# Sockets per user (1) plus Locust's own (zmq, web UI, logs) and a margin.
_FDS_PER_PROCESS_MARGIN = 256


@dataclass(frozen=True, slots=True)
class ModelList:
    """What ``GET /v1/models`` said: served ids and, when reported, their context lengths (tokens)."""

    ids: tuple[str, ...]
    context_tokens: dict[str, int]
    missing: str | None = None
    """Why there is no list (``GET /v1/models`` answered 404/405 and ``--model`` was given), or None."""


@dataclass
class PreflightReport:
    """Findings printed before load; ``warnings`` never stop the run."""

    model: str
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    not_streamed: list[str] = field(default_factory=list)
    """Endpoints whose streamed probe was answered with one JSON body (already warned about)."""


def fetch_models(
    host: str, get: Callable[[str], Any], api_key_env: str, *, model: str | None = None, key_sent_as: str | None = None
) -> ModelList:
    """Read ``GET /v1/models``.

    Args:
        host: the target's public base URL (for messages).
        get: ``GET path`` on the target.
        api_key_env: the variable named by ``--api-key-env`` (for messages).
        model: ``--model``; when given, a server without a model list (404/405)
            is not an error: the result has ``missing`` set and the probe decides.
        key_sent_as: the header that carried an API key, or None when no key was sent.

    Raises:
        ConfigError: unreachable host, refused key, non-200 answer (404/405
            without ``model``), or not an OpenAI model list.
    """
    url = join_url(host, "/v1/models")
    try:
        reply = get("/v1/models")
    except RequestError as exc:
        raise _unreachable(url, exc) from exc
    status, body = reply.status, reply.body
    refused = _refused_protocol(url, status, body, getattr(reply, "content_type", ""))
    if refused is not None:
        raise refused
    if status in (401, 403):
        if key_sent_as is not None:
            raise ConfigError(
                f"GET {url} answered HTTP {status} (not authorised) to the API key sent as {key_sent_as}; "
                "check the key, and --api-key-header if the server expects it in another header"
            )
        raise ConfigError(
            f"GET {url} answered HTTP {status} (not authorised); "
            f"set the API key in ${api_key_env} or pass --api-key-file PATH"
        )
    if status in (404, 405) and model is not None:
        return ModelList((), {}, missing=f"GET {url} answered HTTP {status}: the server has no model list")
    if status == 407:
        raise ConfigError(
            f"GET {url}: the proxy answered HTTP 407 (proxy authentication required); put its "
            "credentials in the proxy variable (http://USER:PASSWORD@HOST:PORT) or pass --ignore-proxy-env"
        )
    if status != 200:
        excerpt = summarize_body(body[:4096], getattr(reply, "content_type", ""))
        if host.rstrip("/").endswith("/v1"):  # the path is wrong, not the model list missing: no --model hint
            hint = (
                f"drop the /v1: pass -H {host.rstrip('/')[: -len('/v1')]} (llmload adds /v1/models "
                "and /v1/chat/completions itself)"
            )
        else:
            hint = "check -H: it must be the server's base URL (e.g. http://HOST:8000), without a path"
            if status in (404, 405):
                hint += "; a server without a model list needs --model NAME (the probe request then checks it)"
        raise ConfigError(f"GET {url} answered HTTP {status} ({excerpt}); {hint}")
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
            f"GET {url} did not return an OpenAI model list ({body[:200]!r}); is -H an OpenAI-compatible server?"
        ) from exc
    return ModelList(ids=ids, context_tokens=context)


def _unreachable(url: str, exc: RequestError) -> ConfigError:
    """The stop for a ``GET /v1/models`` that got no HTTP/1.1 answer: a server that speaks another protocol is
    named as such, not asked whether it is up."""
    text = str(exc).rstrip(".")
    if isinstance(exc, WrongProtocolError):
        return ConfigError(f"GET {url} got no HTTP/1.1 answer: {text.removeprefix(f'GET {url}: ')}")
    if isinstance(exc, ProxyUnreachableError):  # the server was never contacted: name the proxy, not the server
        return ConfigError(f"cannot reach the proxy for {url}: {text}")
    return ConfigError(f"cannot reach {url}: {text}. Is the server up and -H right?")


def _refused_protocol(url: str, status: int, body: bytes, content_type: str) -> ConfigError | None:
    """The stop for ``505 HTTP Version Not Supported``: the server refuses HTTP/1.1; else None."""
    if status != 505:
        return None
    return ConfigError(f"GET {url} answered HTTP 505: {describe_error_page(505, body[:4096], content_type)}")


def join_url(base: str, path: str) -> str:
    """``base`` and ``path`` with one ``/`` between them; a query string in ``base`` goes last."""
    base, _, query = base.partition("?")
    joined = base.rstrip("/") + "/" + path.lstrip("/")
    return f"{joined}{'&' if '?' in joined else '?'}{query}" if query else joined


def choose_model(models: ModelList, wanted: str | None, host: str) -> str:
    """Return ``wanted`` if served, else the first served model when ``wanted`` is None.

    Raises:
        ConfigError: the model is not served (the message lists what is and says
            to pass ``--model`` with one of them), or no model is listed.
    """
    if wanted is None:
        if not models.ids:
            raise ConfigError(f"{join_url(host, '/v1/models')} lists no model; pass --model NAME")
        return models.ids[0]
    if models.missing is None and wanted not in models.ids:
        if not models.ids:
            raise ConfigError(
                f'model "{wanted}" not served; available: none ({join_url(host, "/v1/models")} lists no model). '
                "Check that -H is the server you meant and that it has loaded a model"
            )
        raise ConfigError(
            f'model "{wanted}" not served; available: {", ".join(models.ids)}. '
            f"Pass --model <one of them>, e.g. --model {shlex.quote(models.ids[0])}"
        )
    return wanted


def probe(
    transport: Transport,
    requests: Sequence[tuple[str, LLMRequest]],
    config: RunConfig,
    models: ModelList,
    model: str,
    *,
    retry: Callable[[LLMRequest, RequestRecord], LLMRequest | None] | None = None,
    host: str = "",
    prompts_vary: bool = False,
) -> PreflightReport:
    """Send one small request per user class and report where token counts will come from.

    Args:
        transport: connection to the target.
        requests: (user class name, probe request with small max_tokens) pairs.
        config: run options (for max_tokens in the context check).
        models: the model list (context length).
        model: the model being tested.
        retry: given a failed probe, the request to send once more instead (e.g.
            without ``stream_options``), or None to stop.
        host: the ``-H`` URL; its path is named with the request's in a failure
            (the path actually requested) and a doubled ``/v1`` gets a hint.
        prompts_vary: the run's prompts differ in length (a dataset, a trace,
            sessions, synthetic lengths): a probe prompt that does not fit the
            context with ``--max-tokens`` is then a warning, not a stop.

    Raises:
        ConfigError: a probe request failed (the message carries the server's
            reason), or, with one prompt for every request, its prompt tokens
            + ``--max-tokens`` exceed the context length the server reports.
    """
    report = PreflightReport(model=model)
    client = StreamingClient(transport)
    for name, first in requests:
        request, record = first, client.run(first)
        again = retry(first, record) if retry is not None and not record.ok else None
        if again is not None:
            request, record = again, client.run(again)
        if not record.ok:
            error = record.error
            reason = f"{error.category}: {error.message}" if error else record.outcome.value
            api = API_NAMES.get(request.endpoint)
            if api is not None and error is not None and error.status in (404, 405):
                raise ConfigError(
                    f"the server does not serve {api}: the probe request for {name} "
                    f"(POST {urlsplit(host).path.rstrip('/')}{request.path}) answered HTTP {error.status} "
                    f"({error.message.strip().rstrip('.')[:200]}). Use a server or gateway that serves it, pass "
                    "--endpoint-path if it lives elsewhere, or load the chat API with ChatUser"
                )
            if api is not None and error is not None and error.status in (400, 422):
                reason = f"the server rejects the body llmload sends for {api}: {reason}"
            hint = doubled_v1_hint(host, request.path)
            fix = f"{hint[:1].upper()}{hint[1:]}; or fix" if hint else "Fix"
            raise ConfigError(
                f"probe request for {name} (POST {urlsplit(host).path.rstrip('/')}{request.path}) failed: "
                f"{reason.strip().rstrip('.')}. {fix} the server or the options (use --skip-preflight to bypass)"
            )
        source = record.completion_tokens.source
        if models.missing is not None:
            report.notes.append(f"{name}: the probe request to {model} succeeded")
        if client.reply_end is ReplyEnd.FINISH_WAIT:
            report.warnings.append(
                f"{name}: the server sent neither [DONE] nor an end of body after the finish_reason; each reply "
                f"is taken as complete {FINISH_WAIT_S:g} s after its finish chunk (E2E ends at that chunk, the "
                "connection is dropped), which holds every user that long: check the server or proxy"
            )
        if request.stream and not record.streamed:
            report.warnings.append(not_streamed_warning(name))
            report.not_streamed.append(request.endpoint)
        elif not request.stream:
            _whole_reply_counts(report, name, record, tokenizer=bool(config.tokenizer))
        elif source is TokenSource.SERVER:
            report.notes.append(f"{name}: the server streams usage; token counts come from the server")
        elif UsageNote.BELOW_EVENTS in record.usage_notes:
            report.warnings.append(
                f"{name}: the server's usage counts fewer tokens than it streamed events; usage is not used, "
                f"completion tokens come from {source.value}"
            )
        elif source is TokenSource.LOGPROBS:
            report.notes.append(f"{name}: no usage in the stream; token counts come from the tokens listed in logprobs")
        else:
            report.warnings.append(
                f"{name}: {_no_usage(record, 'stream')}; completion tokens will be "
                + (
                    "counted with --tokenizer"
                    if config.tokenizer
                    else "the number of streamed chunks (a lower bound; pass --tokenizer PATH)"
                )
            )
        context = models.context_tokens.get(model)
        prompt = record.prompt_tokens.value
        if context is not None and prompt is not None and prompt + config.max_tokens > context:
            over = (
                f"{name}: prompt ({prompt} token{'' if prompt == 1 else 's'}, the server's count) + --max-tokens "
                f"({config.max_tokens}) = "
                f"{prompt + config.max_tokens} exceeds the model's context length ({context} tokens, "
                f"max_model_len in GET /v1/models)"
            )
            fix = f"pass --max-tokens {context - prompt} or less" if context > prompt else "pass a shorter prompt"
            if not prompts_vary:
                raise ConfigError(
                    f"{over}: the server would refuse (vLLM, SGLang: HTTP 400) or cut short every request. "
                    f"{fix[:1].upper()}{fix[1:]} (use --skip-preflight to send them anyway)"
                )
            report.warnings.append(
                f"{over}; requests with a prompt this long will be refused or cut short: {fix} if most are"
            )
    return report


def _no_usage(record: RequestRecord, where: str) -> str:
    """What the server sent instead of a completion count: no usage, or usage without completion_tokens."""
    if record.usage_without_completion:
        return f"the server sent usage without completion_tokens in its {where}"
    return f"the server sent no usage in its {where}"


def _whole_reply_counts(report: PreflightReport, name: str, record: RequestRecord, *, tokenizer: bool) -> None:
    """Say where a non-streamed (--no-stream) reply's token counts come from; a warning when not from usage."""
    if record.inputs is not None:  # embeddings: input tokens only, nothing is generated
        if record.prompt_tokens.source is TokenSource.SERVER:
            report.notes.append(f"{name}: input token counts from the server's usage")
        else:
            report.warnings.append(
                f"{name}: the reply has no usage.prompt_tokens; input tokens will be "
                + ("counted with --tokenizer" if tokenizer else "unknown (n/a): pass --tokenizer PATH")
            )
        return
    source = record.completion_tokens.source
    if source is TokenSource.SERVER:
        report.notes.append(f"{name}: non-streaming; token counts from the server's usage")
    elif source is TokenSource.LOGPROBS:
        report.notes.append(
            f"{name}: non-streaming, {_no_usage(record, 'reply')}; token counts come from the tokens listed in logprobs"
        )
    elif tokenizer:
        report.warnings.append(
            f"{name}: non-streaming, {_no_usage(record, 'reply')}; completion tokens will be counted with --tokenizer"
        )
    else:
        report.warnings.append(
            f"{name}: non-streaming, {_no_usage(record, 'reply')}; token counts, output tok/s and total tok/s "
            "will be unavailable (n/a): pass --tokenizer PATH, or make the server return usage"
        )


def not_streamed_warning(who: str) -> str:
    """The one warning of a run whose streamed requests (``stream: true``) get one JSON body."""
    return (
        f"{who}: the server did not stream: it answered stream: true with one JSON body; those replies count "
        "with the server's usage, but TTFT, ITL and TPOT are unavailable (n/a) for them. Check the server or "
        "gateway (does it pass streaming through?), or pass --no-stream to measure whole replies on purpose"
    )


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
