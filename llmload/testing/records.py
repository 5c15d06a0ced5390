"""Builders of the ``RequestRecord`` and ``LLMStats`` values that statistics, exporter and report tests feed in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmload.aggregate.stats import LLMStats
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource

__all__ = ["T0_UNIX", "failed_record", "ok_record", "spaced_s", "stats_of"]

T0_UNIX = 1_700_000_000.0
"""Default send time (Unix seconds) of built records."""


def _server_count(count: int | TokenCount) -> TokenCount:
    return count if isinstance(count, TokenCount) else TokenCount(count, TokenSource.SERVER)


def spaced_s(first_s: float, gap_s: float, count: int) -> list[float]:
    """``count`` token arrival times (seconds after the send): ``first_s``, then one every ``gap_s``."""
    return [first_s + i * gap_s for i in range(count)]


def ok_record(
    times_s: Sequence[float] = (0.1, 0.12, 0.14),
    *,
    end_s: float | None = None,
    start_unix: float = T0_UNIX,
    first_content_s: float | None = None,
    prompt_tokens: int | TokenCount = 10,
    completion_tokens: int | TokenCount | None = None,
    endpoint: str = "chat",
    model: str = "m",
    finish_reason: str | None = "stop",
    **fields: Any,
) -> RequestRecord:
    """A successful streamed request with tokens at ``times_s`` (seconds after the send), ended by ``finish_reason``.

    Args:
        end_s: end of the reply; None: 0.01 s after the last token (at 0.01 s with no tokens).
        first_content_s: first content token; None: the first token.
        prompt_tokens: an int is a server-reported count.
        completion_tokens: an int is a server-reported count; None: one per token time.
        fields: any other ``RequestRecord`` field (``requested_prompt_tokens``, ``read_lags_s`` …).
    """
    times = list(times_s)
    return RequestRecord(
        endpoint=endpoint,
        model=model,
        started_at_unix=start_unix,
        token_times_s=times,
        first_content_s=first_content_s if first_content_s is not None or not times else times[0],
        end_s=end_s if end_s is not None else (times[-1] if times else 0.0) + 0.01,
        prompt_tokens=_server_count(prompt_tokens),
        completion_tokens=_server_count(len(times) if completion_tokens is None else completion_tokens),
        finish_reason=finish_reason,
        **fields,
    )


def failed_record(
    category: str = "HTTP 500 InternalServerError",
    message: str = "boom",
    status: int | None = 500,
    *,
    outcome: Outcome = Outcome.HTTP_ERROR,
    start_unix: float = T0_UNIX,
    end_s: float | None = 0.05,
    endpoint: str = "chat",
    model: str = "m",
    **fields: Any,
) -> RequestRecord:
    """A failed request whose error groups under ``category`` with ``message`` and HTTP ``status``.

    Args:
        status: the HTTP status; None for failures without one (timeouts, resets).
        end_s: when the failure was seen (seconds after the send); None: never.
        fields: any other ``RequestRecord`` field (``token_times_s``, ``completion_tokens`` …).
    """
    return RequestRecord(
        endpoint=endpoint,
        model=model,
        started_at_unix=start_unix,
        outcome=outcome,
        error=ErrorInfo(category, message, status),
        end_s=end_s,
        **fields,
    )


def stats_of(*records: RequestRecord, cancelled: int = 0) -> LLMStats:
    """``LLMStats`` that counted ``records`` in order plus ``cancelled`` cancelled chat requests to model "m"."""
    stats = LLMStats.empty()
    for record in records:
        stats.add(record)
    if cancelled:
        stats.add_cancelled("chat", "m", cancelled)
    return stats
