"""Finish reasons: which ones end a reply normally, and the bounded label every reason is counted under (pure).

A server names why a reply ended in ``finish_reason``. Only a *normal* end
makes a reply a success: the model finished (``stop`` and its spellings
``eos``, ``eos_token``, ``end_turn``, ``stop_sequence``), reached the
requested length (``length``, ``max_tokens``), called a tool
(``tool_calls``, ``function_call``, ``tool_use``), or the server's content
filter ended it (``content_filter``: a policy decision by a healthy server,
whose streamed tokens were generated at the measured speed; a filtered reply
without any token is ``EMPTY`` anyway). Any other reason (``abort``,
``error``, ``cancelled``, ``timeout``, anything unknown) says the engine did
not finish the request (vllm #57082, sglang PR #2956): the reply is a failure
in its own category, ``finish_reason <reason>``, even with HTTP 200 and
``[DONE]``. Reasons are compared in lower case.

Labels are bounded: a reason that is not a short, label-safe word is
counted as ``OTHER_REASON``. An empty reason is no reason (not counted).
"""

from __future__ import annotations

import re

__all__ = ["NORMAL_FINISH_REASONS", "OTHER_REASON", "abnormal_finish_category", "finish_label", "is_normal_finish"]

NORMAL_FINISH_REASONS = frozenset(
    {
        "stop", "eos", "eos_token", "end_turn", "stop_sequence",  # the model ended the reply
        "length", "max_tokens",  # the requested length was reached
        "tool_calls", "function_call", "tool_use",  # the model called a tool
        "content_filter",  # the server's filter ended it (a policy decision, not an engine fault)
    }
)  # fmt: skip
"""Finish reasons of a reply that ended normally (OpenAI, vLLM, SGLang, TGI, llama.cpp and Anthropic spellings)."""

OTHER_REASON = "other"
"""The label of a finish reason that is not label-safe, and of reasons past the bound of distinct labels."""

_LABEL = re.compile(r"[a-z0-9_.:-]{1,32}")


def finish_label(reason: str) -> str:
    """The bounded label ``reason`` is counted under: lower-cased if short and label-safe, else ``OTHER_REASON``."""
    if reason in NORMAL_FINISH_REASONS:
        return reason  # already lower-case and label-safe (the usual reply: one set look-up)
    label = reason.strip().lower()
    return label if _LABEL.fullmatch(label) else OTHER_REASON


def is_normal_finish(reason: str | None) -> bool:
    """True for a normal end (``NORMAL_FINISH_REASONS``) and for no finish reason at all.

    None and an empty string (some gateways write ``""`` for "not finished")
    name no reason, so they are no verdict: the reply is judged by its content.
    """
    if reason is None or reason in NORMAL_FINISH_REASONS:
        return True
    label = reason.strip().lower()
    return not label or label in NORMAL_FINISH_REASONS


def abnormal_finish_category(reason: str | None) -> str | None:
    """The failure category of a reply that ended with ``reason``: ``finish_reason <label>``; None for a normal end."""
    if is_normal_finish(reason):
        return None
    assert reason is not None  # is_normal_finish(None) is True
    return f"finish_reason {finish_label(reason)}"
