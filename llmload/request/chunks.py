"""OpenAI reply objects → typed values: completion chunks, error objects, per-reply totals (pure).

The JSON boundary of the data path (parsed here, typed inward): ``client.py`` hands every
decoded event (or non-streamed body) to ``parse_chunk``/``read_server_error``
and only typed values travel on. Shapes follow the OpenAI API as served by
vLLM, SGLang and llama.cpp:

- chat chunks carry ``choices[].delta`` (``content``, ``reasoning_content``
  or vLLM's newer ``reasoning``, ``tool_calls``); non-streamed chat bodies
  carry ``choices[].message``; completions carry ``choices[].text``; each
  text field may be a string, parts, an object or null
  (``llmload.request.shapes`` reads them and names what it cannot);
- ``usage`` (OpenAI names, or ``input_tokens``/``output_tokens`` when those
  are absent) may come with or without choices (``"choices": []``), once at the
  end or on every chunk, cumulative (vLLM ``continuous_usage_stats``) or
  incremental (``llmload.request.tokens.read_usage`` decides), with
  ``completion_tokens_details.reasoning_tokens`` and
  ``prompt_tokens_details.cached_tokens`` read when they are counts (a detail
  sent but not a count is unknown and named in ``unreadable_detail``, never 0);
- ``logprobs`` list one entry per token (``content`` for chat, ``tokens``
  for completions);
- errors come as ``{"error": {...}}`` or, from older vLLM, as a top-level
  ``{"object": "error", ...}`` (runpod-workers/worker-vllm #57).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from llmload.errors import SSEProtocolError
from llmload.request.shapes import DeltaText, describe, read_delta, read_text

__all__ = [
    "ChunkDelta",
    "ReplyAccumulator",
    "ServerError",
    "UsageValue",
    "first_detail",
    "parse_chunk",
    "read_server_error",
]

_LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # a server error type/code usable as a bounded label


@dataclass(slots=True)
class ChunkDelta:
    """What one chunk (or a whole non-streamed reply) contributed.

    Attributes:
        text: generated text of any kind (content, reasoning, tool-call name
            and arguments), joined; "" if none.
        has_token: the chunk carried a generated token of any kind.
        has_content: the chunk carried non-empty content (``content``/``text``/``refusal``).
        finish_reason: the last non-null finish_reason of its choices.
        prompt_tokens, completion_tokens: its ``usage`` values; None if absent.
        has_reasoning: the chunk carried non-empty reasoning text.
        shaped: some of its text came from parts, objects or mirrored fields
            (``llmload.request.shapes``), not from one plain string.
        reasoning_tokens: ``usage.completion_tokens_details.reasoning_tokens``;
            None if absent or not a count.
        cached_tokens: ``usage.prompt_tokens_details.cached_tokens``; None if absent or not a count.
        logprob_tokens: entries in its choices' ``logprobs.content`` (chat) or
            ``logprobs.tokens`` (completions), one per token; None without logprobs.
        skipped_part: a typed part without text it carried, skipped
            (``DeltaText.skipped``); None if none.
        usage_without_completion: it carried a ``usage`` object with no
            completion count (e.g. ``total_tokens`` alone).
        unreadable_detail: a usage detail it sent that is not a token count, as
            ``path is a string``; None if none (its count is then None, unknown).
    """

    text: str
    has_token: bool
    has_content: bool
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    has_reasoning: bool = False
    shaped: bool = False
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    logprob_tokens: int | None = None
    skipped_part: str | None = None
    usage_without_completion: bool = False
    unreadable_detail: str | None = None


def parse_chunk(obj: Any) -> ChunkDelta:
    """Read a decoded completion chunk or non-streamed completion body.

    Handles chat (``delta`` or ``message``) and completions (``text``)
    choices, any number of choices, and a ``usage`` block with or without
    choices. Text fields may take any of the shapes servers send
    (``llmload.request.shapes``).

    Raises:
        SSEProtocolError: (a ``ValueError``) the value is not a completion
            object, or a field is not understood; the message names the
            field path and its JSON type.
    """
    plain = _plain_chunk(obj)
    return plain if plain is not None else parse_any_chunk(obj)


_PLAIN_DELTA_KEYS = frozenset({"content", "role"})
_PLAIN_USAGE_KEYS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})


def _plain_chunk(obj: Any) -> ChunkDelta | None:
    """``parse_any_chunk(obj)`` for the shapes nearly every chunk has, else None (pure, never raises).

    The shapes: no ``usage``, one choice without ``logprobs``, whose text is a
    string or null: a completions ``text``, or a chat ``delta`` holding only
    ``content`` and ``role``; and the final usage chunk, ``"choices": []``
    with a ``usage`` of integer prompt and completion counts and no details.
    What servers send on every token of the slow path (first, finish and
    unlearned chunks) costs a third of the general read.
    """
    if type(obj) is not dict:
        return None
    usage = obj.get("usage")
    choices = obj.get("choices")
    if usage is not None:
        if type(usage) is not dict or choices != [] or not usage.keys() <= _PLAIN_USAGE_KEYS:
            return None
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(prompt) is not int or type(completion) is not int or prompt < 0 or completion < 0:
            return None
        return ChunkDelta("", False, False, None, prompt, completion)
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("logprobs") is not None:
        return None
    delta = choice.get("delta")
    if delta is None:
        if choice.get("message") is not None:
            return None
        text = choice.get("text")
    elif type(delta) is dict and delta.keys() <= _PLAIN_DELTA_KEYS:
        text = delta.get("content")
    else:
        return None
    if text is not None and type(text) is not str:
        return None
    reason = choice.get("finish_reason")
    token = bool(text)
    return ChunkDelta(text or "", token, token, None if reason is None else str(reason), None, None)


def parse_any_chunk(obj: Any) -> ChunkDelta:
    """``parse_chunk`` for every shape, without its shortcut for the plain one (the reference it must equal).

    Raises:
        SSEProtocolError: as ``parse_chunk``.
    """
    if type(obj) is not dict:
        raise SSEProtocolError(f"the chunk is {describe(obj)}; expected a completion chunk object")
    finish: str | None = None
    logprobs: int | None = None
    into = DeltaText()
    choices = obj.get("choices")
    if choices:
        if type(choices) is not list:
            raise SSEProtocolError(f"choices is {describe(choices)}; expected a list of choices")
        for i, choice in enumerate(choices):
            if type(choice) is not dict:
                raise SSEProtocolError(f"choices[{i}] is {describe(choice)}; expected a choice object")
            delta = choice.get("delta")
            if delta is not None:
                read_delta(delta, f"choices[{i}].delta", into)
            elif choice.get("message") is not None:
                read_delta(choice["message"], f"choices[{i}].message", into)
            else:
                text = choice.get("text")
                if type(text) is str:
                    into.add(text, reasoning=False)
                elif text is not None:
                    read_text(text, f"choices[{i}].text", into)
            reason = choice.get("finish_reason")
            if reason is not None:
                finish = str(reason)
            if choice.get("logprobs") is not None:
                n = _logprob_entries(choice["logprobs"])
                if n is not None:
                    logprobs = n if logprobs is None else logprobs + n
    elif choices is not None and choices != []:
        raise SSEProtocolError(f"choices is {describe(choices)}; expected a list of choices")
    pieces = into.pieces
    text = pieces[0] if len(pieces) == 1 else "".join(pieces)
    has_token = into.content or into.reasoning or into.tool_call or bool(text)
    usage = obj.get("usage")
    if usage is None:
        return ChunkDelta(
            text,
            has_token,
            into.content,
            finish,
            None,
            None,
            into.reasoning,
            into.shaped,
            logprob_tokens=logprobs,
            skipped_part=into.skipped,
        )
    if type(usage) is not dict:
        raise SSEProtocolError(f"usage is {describe(usage)}; expected an object of token counts")
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if completion is None:
        completion = usage.get("output_tokens")
    reasoning, bad_reasoning = first_detail(usage, _REASONING_DETAILS)
    cached, bad_cached = first_detail(usage, _CACHED_DETAILS)
    return ChunkDelta(
        text,
        has_token,
        into.content,
        finish,
        _count(usage.get("input_tokens") if prompt is None else prompt, "usage.prompt_tokens"),
        _count(completion, "usage.completion_tokens"),
        into.reasoning,
        into.shaped,
        reasoning,
        cached,
        logprobs,
        into.skipped,
        completion is None,
        "; ".join(filter(None, (bad_reasoning, bad_cached))) or None,
    )


# where servers put the usage details, first found wins: OpenAI (chat, then Responses-style names),
# then a top-level count (DeepSeek's prompt_cache_hit_tokens, Anthropic-style cache_read_input_tokens)
_REASONING_DETAILS = (
    ("completion_tokens_details", "reasoning_tokens"),
    ("output_tokens_details", "reasoning_tokens"),
    (None, "reasoning_tokens"),
)
_CACHED_DETAILS = (
    ("prompt_tokens_details", "cached_tokens"),
    ("input_tokens_details", "cached_tokens"),
    (None, "prompt_cache_hit_tokens"),
    (None, "cache_read_input_tokens"),
)


def first_detail(usage: dict[str, Any], places: tuple[tuple[str | None, str], ...]) -> tuple[int | None, str | None]:
    """The usage detail at the first of ``places`` (block, key) that holds a value.

    Returns:
        (count, unreadable): the count, or None when no place holds one or the
        first value found is not a token count; ``unreadable`` then names it
        (``usage.completion_tokens_details.reasoning_tokens is a string ("lots")``), else None.
    """
    for block, key in places:
        details = usage if block is None else usage.get(block)
        if type(details) is not dict or details.get(key) is None:
            continue
        value = _detail(details, key)
        if value is not None:
            return value, None
        where = f"usage.{block}.{key}" if block else f"usage.{key}"
        return None, f"{where} is {describe(details[key])}"
    return None, None


def _count(value: Any, path: str) -> int | None:
    """A usage count: a non-negative integer (an integral float is read as one) or None."""
    if value is None or (type(value) is int and value >= 0):
        return value
    if type(value) is float and value.is_integer() and value >= 0:
        return int(value)
    raise SSEProtocolError(
        f"{path} is {describe(value)}; expected a non-negative integer token count "
        "(the server's usage block cannot be read)"
    )


def _detail(details: Any, key: str) -> int | None:
    """A ``*_tokens_details`` count; None (unknown) when the block or the count is missing or not a count."""
    if type(details) is not dict:
        return None
    value = details.get(key)
    if type(value) is int and value >= 0:
        return value
    if type(value) is float and value.is_integer() and value >= 0:
        return int(value)
    return None


def _logprob_entries(logprobs: Any) -> int | None:
    """Tokens listed in one choice's ``logprobs``: ``content`` (+ ``refusal``) for chat, ``tokens`` for completions."""
    if type(logprobs) is not dict:
        return None
    n = None
    for key in ("content", "refusal", "tokens"):
        entries = logprobs.get(key)
        if type(entries) is list:
            n = len(entries) if n is None else n + len(entries)
    return n


def _label(value: Any) -> str | None:
    """A server-chosen error type or code, if it is short and label-safe."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    text = str(value)
    return text if _LABEL.fullmatch(text) else None


@dataclass(frozen=True, slots=True)
class ServerError:
    """An error object sent by the server.

    Attributes:
        category: ``"type/code"``, ``"type"``, ``"code N"`` or ``"server error"``;
            built only from label-safe values, so bounded (safe as a grouping key).
        message: the server's message (untruncated).
        kind: the error ``type`` if label-safe, else None.
    """

    category: str
    message: str
    kind: str | None


def read_server_error(obj: Any, event_type: str | None, *, http_body: bool = False) -> ServerError | None:
    """Read an error object in either OpenAI shape; None if ``obj`` is not one.

    Shapes: ``{"error": {"type", "code", "message"}}`` (OpenAI, vLLM, llama.cpp)
    and ``{"object": "error", "type", "code", "message"}`` (older vLLM). An SSE
    ``event: error`` counts as an error whatever its data; in non-2xx bodies
    FastAPI's ``{"detail": "..."}`` is read too.
    """
    err: Any = None
    if isinstance(obj, dict):
        if obj.get("error") is not None:
            err = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
        elif obj.get("object") == "error":
            err = obj
        elif http_body and obj.get("detail") is not None:
            err = {"message": str(obj["detail"])}
    if err is None:
        if event_type != "error":
            return None
        err = {"message": json.dumps(obj)}
    kind, code = _label(err.get("type")), _label(err.get("code"))
    category = f"{kind}/{code}" if kind and code else kind or (f"code {code}" if code else "server error")
    return ServerError(category, str(err.get("message") or json.dumps(err)), kind)


class ReplyAccumulator:
    """Accumulates the deltas of one reply with their arrival times (seconds after send).

    Attributes:
        token_times_s: arrival of every token-bearing delta.
        pieces: generated text fragments, in order, each non-empty (joined only if
            a tokenizer needs them); always empty when created with ``keep_text=False``.
        first_content_s: arrival of the first non-empty content/text; None if none.
        finish_reason, prompt_tokens, completion_tokens: last values seen; None if never sent.
        reasoning_tokens, cached_tokens: last usage details seen; None if never sent.
        usage_log: every ``usage.completion_tokens`` value sent, in order, each
            with the number of token-bearing events up to and including its
            chunk and whether that chunk carried a token (``UsageValue``), so
            per-chunk usage can be read as cumulative or incremental
            (``llmload.request.tokens.read_usage``).
        reasoning_streamed: some delta carried reasoning text.
        skipped_part: the first typed part without text a delta carried
            (``ChunkDelta.skipped_part``); None if none.
        usage_without_completion: some ``usage`` object had no completion count.
        unreadable_detail: the first usage detail sent that was not a token count
            (``ChunkDelta.unreadable_detail``); None if none. Such a detail
            makes ``reasoning_tokens`` / ``cached_tokens`` None (unknown) until
            a later usage sends a readable one.
        events: number of deltas added.
        unread_events: events received but not read (the one a failure stopped at).
        done: ``[DONE]`` was received (set by the reader).
        response_id: the reply's Responses API id (set by its reader); None otherwise.
    """

    __slots__ = (
        "_keep_text",
        "_logprobs",
        "_usage_per_event",
        "cached_tokens",
        "completion_tokens",
        "done",
        "events",
        "finish_reason",
        "first_content_s",
        "pieces",
        "prompt_tokens",
        "reasoning_streamed",
        "reasoning_tokens",
        "response_id",
        "skipped_part",
        "token_times_s",
        "unread_events",
        "unreadable_detail",
        "usage_log",
        "usage_without_completion",
    )

    def __init__(self, *, keep_text: bool = True) -> None:
        """An empty reply; ``keep_text`` False drops the text (nothing will count or show it)."""
        self._keep_text = keep_text
        self.token_times_s: list[float] = []
        self._usage_per_event: list[int] | None = []  # usage.completion_tokens per token event, while all have it
        self._logprobs: list[int] | None = []  # logprobs entries per token event, while all have them
        self.usage_log: list[UsageValue] = []
        self.pieces: list[str] = []
        self.first_content_s: float | None = None
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.reasoning_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.reasoning_streamed = False
        self.skipped_part: str | None = None
        self.usage_without_completion = False
        self.unreadable_detail: str | None = None
        self.events = 0
        self.unread_events = 0
        self.done = False
        self.response_id: str | None = None

    def add(self, delta: ChunkDelta, t: float) -> None:
        """Account one delta that arrived ``t`` seconds after send."""
        self.events += 1
        completion = delta.completion_tokens
        if delta.has_token:
            self.token_times_s.append(t)
            if delta.text and self._keep_text:
                self.pieces.append(delta.text)
            if delta.has_content and self.first_content_s is None:
                self.first_content_s = t
            if delta.has_reasoning:
                self.reasoning_streamed = True
            if self._usage_per_event is not None:
                if completion is None:
                    self._usage_per_event = None
                else:
                    self._usage_per_event.append(completion)
            if self._logprobs is not None:
                if delta.logprob_tokens is None:
                    self._logprobs = None
                else:
                    self._logprobs.append(delta.logprob_tokens)
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if delta.skipped_part is not None and self.skipped_part is None:
            self.skipped_part = delta.skipped_part
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if completion is not None:
            self.completion_tokens = completion
            self.usage_log.append(UsageValue(completion, len(self.token_times_s), delta.has_token))
        elif delta.usage_without_completion:
            self.usage_without_completion = True
        if delta.reasoning_tokens is not None:
            self.reasoning_tokens = delta.reasoning_tokens
        if delta.cached_tokens is not None:
            self.cached_tokens = delta.cached_tokens
        if delta.unreadable_detail is not None:
            self._unreadable(delta)

    def _unreadable(self, delta: ChunkDelta) -> None:
        """A usage detail of ``delta`` is not a count: the detail it replaces is unknown now, not its older value."""
        self.unreadable_detail = self.unreadable_detail or delta.unreadable_detail
        named = delta.unreadable_detail or ""
        if delta.reasoning_tokens is None and "reasoning_tokens is " in named:
            self.reasoning_tokens = None
        if delta.cached_tokens is None and any(f"{key} is " in named for _, key in _CACHED_DETAILS):
            self.cached_tokens = None

    def add_token(self, text: str, t: float, has_content: bool) -> None:
        """Account a plain token delta (non-empty ``text``, no finish_reason, no usage) at ``t``.

        The same as ``add(ChunkDelta(text, True, has_content, None, None, None), t)``:
        a fast-path template is only learned from a delta without usage or
        logprobs, whose ``add`` already ended both per-event lists.
        """
        self.events += 1
        self.token_times_s.append(t)
        if self._keep_text:
            self.pieces.append(text)
        if has_content and self.first_content_s is None:
            self.first_content_s = t
        self._usage_per_event = None

    def add_tokens(self, texts: list[str], t: float, has_content: bool) -> None:
        """Account plain token deltas (each a non-empty text, no finish_reason, no usage), all at ``t``."""
        count = len(texts)
        self.events += count
        self.token_times_s += [t] * count
        if self._keep_text:
            self.pieces += texts
        if has_content and self.first_content_s is None:
            self.first_content_s = t
        self._usage_per_event = self._logprobs = None

    def usage_per_event(self) -> list[int] | None:
        """``usage.completion_tokens`` of every token event, when every token event carried it."""
        values = self._usage_per_event
        return values if values and len(values) == len(self.token_times_s) else None

    def logprob_counts(self) -> list[int] | None:
        """Tokens listed in ``logprobs`` per token event, when every token event listed at least one."""
        counts = self._logprobs
        if not counts or len(counts) != len(self.token_times_s) or min(counts) < 1:
            return None
        return counts


class UsageValue(NamedTuple):
    """One ``usage.completion_tokens`` value as sent (immutable; a named tuple: one is made per usage chunk).

    Attributes:
        tokens: the value.
        token_events: token-bearing events so far, this chunk's included.
        on_token: this chunk also carried a generated token.
    """

    tokens: int
    token_events: int
    on_token: bool
