"""The tests' compact stream notation: OpenAI chunk builders (C, CF, U, T, TF, TU), ``sse`` and ``W``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CF", "ROLE", "TF", "TU", "C", "T", "U", "W", "Write", "sse", "typed"]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def C(delta: Mapping[str, Any]) -> str:  # noqa: N802 - short name for the stream notation
    """A chat chunk carrying ``delta``."""
    return _dumps({**_CHAT, "choices": [{"index": 0, "delta": dict(delta), "finish_reason": None}]})


def CF(reason: str) -> str:  # noqa: N802
    """A chat chunk with an empty delta and ``finish_reason``."""
    return _dumps({**_CHAT, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})


def U(prompt_tokens: int, completion_tokens: int) -> str:  # noqa: N802
    """A usage-only chat chunk (``"choices": []``)."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return _dumps({**_CHAT, "choices": [], "usage": usage})


def T(text: str) -> str:  # noqa: N802
    """A completions chunk carrying ``text``."""
    return _dumps({**_TEXT, "choices": [{"index": 0, "text": text, "finish_reason": None}]})


def TF(reason: str) -> str:  # noqa: N802
    """A completions chunk with empty text and ``finish_reason``."""
    return _dumps({**_TEXT, "choices": [{"index": 0, "text": "", "finish_reason": reason}]})


def TU(text: str, completion_tokens: int, finish_reason: str | None) -> str:  # noqa: N802
    """A completions chunk with cumulative usage (vLLM ``continuous_usage_stats``); prompt_tokens = 8."""
    usage = {
        "prompt_tokens": 8,
        "completion_tokens": completion_tokens,
        "total_tokens": 8 + completion_tokens,
    }
    choice = {"index": 0, "text": text, "finish_reason": finish_reason}
    return _dumps({**_TEXT, "choices": [choice], "usage": usage})


_CHAT = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
_TEXT = {"id": "c1", "object": "text_completion", "created": 0, "model": "m"}
ROLE = C({"role": "assistant", "content": ""})


def sse(*payloads: str) -> bytes:
    """``data: P\\n\\n`` for each payload, UTF-8 encoded, in one byte string."""
    return b"".join(b"data: " + p.encode() + b"\n\n" for p in payloads)


def typed(name: str, obj: Mapping[str, Any] | None = None) -> bytes:
    """One named event (Responses API, Anthropic Messages): ``event: NAME`` + ``data:`` the object with its ``type``."""
    data = {"type": name, **(obj or {})}
    return b"event: " + name.encode() + b"\ndata: " + _dumps(data).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Write:
    """Send ``data`` as one TCP send ``at_ms`` milliseconds after the request arrived."""

    at_ms: float
    data: bytes


def W(at_ms: float, data: str | bytes) -> Write:  # noqa: N802 - short name: "@at_ms W: data"
    """A ``Write``; a str is UTF-8 encoded."""
    return Write(at_ms, data.encode() if isinstance(data, str) else data)
