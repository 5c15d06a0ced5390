"""OpenAI reply objects → typed values: completion chunks, error objects, per-reply totals (pure).

The JSON boundary of the data path (parsed here, typed inward): ``client.py`` hands every
decoded event (or non-streamed body) to ``parse_chunk``/``read_server_error``
and only typed values travel on. Shapes follow the OpenAI API as served by
vLLM, SGLang and llama.cpp:

- chat chunks carry ``choices[].delta`` (``content``, ``reasoning_content``
  or vLLM's newer ``reasoning``, ``tool_calls``); non-streamed chat bodies
  carry ``choices[].message``; completions carry ``choices[].text``;
- ``usage`` may come with or without choices (``"choices": []``), once at the
  end or cumulatively on every chunk (vLLM ``continuous_usage_stats``);
- errors come as ``{"error": {...}}`` or, from older vLLM, as a top-level
  ``{"object": "error", ...}`` (runpod-workers/worker-vllm #57).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from llmload.errors import SSEProtocolError

__all__ = ["ChunkDelta", "ReplyAccumulator", "ServerError", "parse_chunk", "read_server_error"]

_LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # a server error type/code usable as a bounded label


@dataclass(slots=True)
class ChunkDelta:
    """What one chunk (or a whole non-streamed reply) contributed.

    Attributes:
        text: generated text of any kind (content, reasoning, tool-call name
            and arguments), joined; "" if none.
        has_token: the chunk carried a generated token of any kind.
        has_content: the chunk carried non-empty ``content``/``text``.
        finish_reason: the last non-null finish_reason of its choices.
        prompt_tokens, completion_tokens: its ``usage`` values; None if absent.
    """

    text: str
    has_token: bool
    has_content: bool
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None


def parse_chunk(obj: Any) -> ChunkDelta:
    """Read a decoded completion chunk or non-streamed completion body.

    Handles chat (``delta`` or ``message``) and completions (``text``)
    choices, any number of choices, and a ``usage`` block with or without
    choices.

    Raises:
        SSEProtocolError: (a ``ValueError``) the value is not a completion object.
    """
    text = ""
    has_token = has_content = False
    finish: str | None = None
    try:
        choices = obj.get("choices")
        if choices:
            for choice in choices:
                delta = choice.get("delta")
                if delta is None:
                    delta = choice.get("message")
                if delta is None:
                    piece = choice.get("text")
                    if piece:
                        text += piece
                        has_token = has_content = True
                else:
                    piece = delta.get("content")
                    if piece:
                        text += piece
                        has_token = has_content = True
                    if "reasoning_content" in delta or "reasoning" in delta or "tool_calls" in delta:
                        piece = delta.get("reasoning_content") or delta.get("reasoning")
                        if piece:
                            text += piece
                            has_token = True
                        calls = delta.get("tool_calls")
                        if calls:
                            has_token = True
                            for call in calls:
                                function = call.get("function") or {}
                                text += (function.get("name") or "") + (function.get("arguments") or "")
                reason = choice.get("finish_reason")
                if reason is not None:
                    finish = str(reason)
        usage = obj.get("usage")
        prompt = completion = None
        if usage:
            prompt = usage.get("prompt_tokens")
            completion = usage.get("completion_tokens")
            if not isinstance(prompt, int | None) or not isinstance(completion, int | None):
                raise SSEProtocolError(f"usage token counts are not integers: {usage!r}")
    except (AttributeError, TypeError) as exc:
        raise SSEProtocolError(f"{exc} in {obj!r:.120}") from exc
    return ChunkDelta(text, has_token, has_content, finish, prompt, completion)


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
        pieces: generated text fragments, in order (joined only if a tokenizer needs
            them); always empty when created with ``keep_text=False``.
        first_content_s: arrival of the first non-empty content/text; None if none.
        finish_reason, prompt_tokens, completion_tokens: last values seen (usage may be
            cumulative, so the last value wins, never a sum); None if never sent.
        events: number of deltas added.
        done: ``[DONE]`` was received (set by the reader).
    """

    __slots__ = (
        "_cumulative",
        "_keep_text",
        "completion_tokens",
        "done",
        "events",
        "finish_reason",
        "first_content_s",
        "pieces",
        "prompt_tokens",
        "token_times_s",
    )

    def __init__(self, *, keep_text: bool = True) -> None:
        """An empty reply; ``keep_text`` False drops the text (nothing will count or show it)."""
        self._keep_text = keep_text
        self.token_times_s: list[float] = []
        self._cumulative: list[int] | None = []  # usage.completion_tokens per token event, while all have it
        self.pieces: list[str] = []
        self.first_content_s: float | None = None
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.events = 0
        self.done = False

    def add(self, delta: ChunkDelta, t: float) -> None:
        """Account one delta that arrived ``t`` seconds after send."""
        self.events += 1
        if delta.has_token:
            self.token_times_s.append(t)
            if delta.text and self._keep_text:
                self.pieces.append(delta.text)
            if delta.has_content and self.first_content_s is None:
                self.first_content_s = t
            if self._cumulative is not None:
                if delta.completion_tokens is None:
                    self._cumulative = None
                else:
                    self._cumulative.append(delta.completion_tokens)
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.completion_tokens is not None:
            self.completion_tokens = delta.completion_tokens

    def add_token(self, text: str, t: float, has_content: bool) -> None:
        """Account a plain token delta (non-empty ``text``, no finish_reason, no usage) at ``t``.

        The same as ``add(ChunkDelta(text, True, has_content, None, None, None), t)``.
        """
        self.events += 1
        self.token_times_s.append(t)
        if self._keep_text:
            self.pieces.append(text)
        if has_content and self.first_content_s is None:
            self.first_content_s = t
        self._cumulative = None

    def add_tokens(self, texts: list[str], t: float, has_content: bool) -> None:
        """Account plain token deltas (each a non-empty text, no finish_reason, no usage), all at ``t``."""
        count = len(texts)
        self.events += count
        self.token_times_s += [t] * count
        if self._keep_text:
            self.pieces += texts
        if has_content and self.first_content_s is None:
            self.first_content_s = t
        self._cumulative = None

    def token_counts(self) -> list[int] | None:
        """Per-event token counts from cumulative usage, when every token event carried it."""
        cum = self._cumulative
        if not cum or len(cum) != len(self.token_times_s):
            return None
        counts = [cum[0], *(b - a for a, b in itertools.pairwise(cum))]
        return counts if min(counts) >= 1 else None
