"""The failure classifier of ``llmload.request.client``: what each way a request can fail makes of it.

One table, ``FAILURES``, maps (phase, exception) to the record's outcome and
error category; ``classify_status`` does the same for a non-2xx response
(``429``, and ``503`` with ``Retry-After`` or a rate-limit error body, are
``THROTTLED``: the server asks clients to slow down).
``error_of`` gives the exception of the ``llmload.errors`` tree that
stands for a failed record in Locust's ``request`` event.
"""

from __future__ import annotations

import datetime
import email.utils
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from llmload.errors import (
    ConnectionClosedError,
    HTTPStatusError,
    RequestError,
    RequestTimeout,
    ServerStreamError,
    SSEProtocolError,
    StreamError,
    ThrottledError,
    TransportError,
)
from llmload.request.record import Outcome, RequestRecord
from llmload.request.stream import ReplyFailure

__all__ = [
    "FAILURES",
    "RETRY_AFTER_JITTER",
    "THROTTLING_STATUSES",
    "Failure",
    "IncompleteReplyError",
    "Phase",
    "TotalTimeout",
    "classify",
    "classify_status",
    "error_of",
    "grouped_error",
    "is_throttling",
    "parse_retry_after",
    "skip_pause_s",
    "throttle_pause_s",
]

BACKOFF_FIRST_S = 1.0
"""Closed loop, throttled without ``Retry-After``: the first pause; each further throttled reply in a row doubles it."""


class TotalTimeout(RequestTimeout):
    """The total time limit of the request passed (``StreamingClient``'s ``total_timeout_s``)."""


class IncompleteReplyError(StreamError):
    """A body that ended cleanly before ``[DONE]`` or a ``finish_reason``."""


class Phase(Enum):
    """Where in a request a failure happened."""

    SEND = "send"  # connecting and posting, until the status and headers are in
    STREAM = "stream"  # reading an SSE reply
    BODY = "body"  # reading a whole (JSON) reply


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failure makes of a request.

    Attributes:
        outcome: the record's outcome.
        category: the record's bounded error label.
        at_last_read: the reply's bytes decided it: the request ended when the
            last read arrived (``RequestRecord.end_s`` as read), not when the
            failure was noticed.
        status: the HTTP status to record; None if none.
    """

    outcome: Outcome
    category: str
    at_last_read: bool = False
    status: int | None = None


_SEND = Failure(Outcome.TRANSPORT_ERROR, "transport error: connect/send")
_MID_BODY = Failure(Outcome.TRANSPORT_ERROR, "transport error: mid-body")
_TOTAL = Failure(Outcome.TIMEOUT, "timeout: total")
_IDLE = Failure(Outcome.TIMEOUT, "timeout: read idle")

FAILURES: Mapping[tuple[Phase, type[Exception]], Failure] = {
    (Phase.SEND, RequestTimeout): Failure(Outcome.TIMEOUT, "timeout: before headers"),
    (Phase.SEND, TransportError): _SEND,
    (Phase.SEND, OSError): _SEND,
    (Phase.STREAM, TotalTimeout): _TOTAL,
    (Phase.STREAM, RequestTimeout): _IDLE,
    (Phase.STREAM, ConnectionClosedError): Failure(Outcome.STREAM_ERROR, "stream ended before completion"),
    (Phase.STREAM, IncompleteReplyError): Failure(Outcome.STREAM_ERROR, "stream ended before completion", True),
    (Phase.STREAM, TransportError): _MID_BODY,
    (Phase.STREAM, OSError): _MID_BODY,
    (Phase.STREAM, SSEProtocolError): Failure(Outcome.STREAM_ERROR, "unexpected chunk shape", True),
    (Phase.BODY, TotalTimeout): _TOTAL,
    (Phase.BODY, RequestTimeout): _IDLE,
    (Phase.BODY, ConnectionClosedError): Failure(Outcome.STREAM_ERROR, "body ended before completion"),
    (Phase.BODY, TransportError): _MID_BODY,
    (Phase.BODY, OSError): _MID_BODY,
    (Phase.BODY, SSEProtocolError): Failure(Outcome.STREAM_ERROR, "unexpected body shape", True),
    (Phase.BODY, ValueError): Failure(Outcome.STREAM_ERROR, "invalid JSON body", True),
}
"""Every exception a request can end with → its failure, by phase; the first class of the exception's MRO found wins.

A ``ReplyFailure`` (an error object or invalid JSON in the reply) names
its own outcome and category. An exception found nowhere is a bug and
propagates.
"""

THROTTLING_STATUSES = frozenset({429, 503})
"""Statuses by which a server may ask clients to slow down: 429 always, 503 only as ``classify_status`` says."""

_THROTTLING_KINDS = ("ratelimit", "throttl", "overload", "toomanyrequests", "quotaexceeded")
"""Words of an error body's type/code (lower case, without ``_``, ``-`` and spaces) that name throttling."""

RETRY_AFTER_JITTER = 0.1
"""Closed loop, throttled with ``Retry-After``: the pause is the asked delay plus up to this share of it."""

_OUTCOME_ERRORS: Mapping[Outcome, type[RequestError]] = {
    Outcome.HTTP_ERROR: HTTPStatusError,
    Outcome.THROTTLED: ThrottledError,
    Outcome.TRANSPORT_ERROR: TransportError,
    Outcome.TIMEOUT: RequestTimeout,
    Outcome.STREAM_ERROR: StreamError,
    Outcome.SERVER_ERROR: ServerStreamError,
    Outcome.EMPTY: StreamError,
}


def classify(phase: Phase, exc: Exception) -> Failure | None:
    """The failure ``exc`` makes of a request in ``phase``; None if it is not a per-request failure (a bug)."""
    if isinstance(exc, ReplyFailure):
        return Failure(exc.outcome, exc.category, at_last_read=True, status=exc.status)
    for cls in type(exc).__mro__:
        failure = FAILURES.get((phase, cls))
        if failure is not None:
            return failure
    return None


def is_throttling(status: int, kind: str | None, retry_after: str | None) -> bool:
    """True when a non-2xx reply asks the client to slow down rather than reporting a fault.

    429 always. 503 only with a ``Retry-After`` header or an error body whose
    type/code names rate limiting or overload (``rate_limit_exceeded``,
    ``RateLimitError``, ``overloaded``, ``throttled`` …): a bare 503 from a
    server or proxy whose backend is down is a failure (``HTTP_ERROR``), not throttling.
    """
    if status == 429:
        return True
    if status != 503:
        return False
    if retry_after is not None:
        return True
    squashed = (kind or "").lower().replace("_", "").replace("-", "").replace(" ", "")
    return any(word in squashed for word in _THROTTLING_KINDS)


def classify_status(status: int, kind: str | None, retry_after: str | None = None) -> Failure:
    """The failure a non-2xx ``status`` makes of a request (``THROTTLED`` as ``is_throttling`` says).

    ``kind``: the error type/code the body named, if any; ``retry_after``: the
    ``Retry-After`` header's value, None if absent.
    """
    outcome = Outcome.THROTTLED if is_throttling(status, kind, retry_after) else Outcome.HTTP_ERROR
    return Failure(outcome, f"HTTP {status} {kind}" if kind else f"HTTP {status}", status=status)


def error_of(record: RequestRecord) -> RequestError | None:
    """The exception that stands for a failed ``record`` (Locust's ``request`` event); None if it did not fail.

    The message is ``"category: message"``; the class follows the outcome
    (``HTTPStatusError``, ``ThrottledError``, ``TransportError``,
    ``RequestTimeout``, ``StreamError``, ``ServerStreamError``).
    """
    if not record.outcome.is_failure:
        return None
    error = record.error
    detail = f"{error.category}: {error.message}" if error else record.outcome.value
    return _OUTCOME_ERRORS.get(record.outcome, RequestError)(detail)


def parse_retry_after(value: str | None, now_unix: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value; None if absent or unreadable.

    RFC 9110: delay-seconds or an HTTP date (``now_unix`` is the wall clock
    it is compared with); a date in the past gives 0.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now_unix)


SKIP_PAUSE_FIRST_S = 0.05
SKIP_PAUSE_MAX_S = 1.0


def skip_pause_s(streak: int) -> float:
    """Seconds a closed-loop user without a request limit pauses after its ``streak``-th skipped request in a row.

    ``SKIP_PAUSE_FIRST_S`` × 2^(streak − 1), at most ``SKIP_PAUSE_MAX_S``: a
    client fault that repeats on every request (a bad option, a broken
    tokenizer) costs at most one skipped request per user per second instead
    of a busy loop. ``streak`` >= 1.
    """
    return min(SKIP_PAUSE_MAX_S, SKIP_PAUSE_FIRST_S * 2.0 ** min(streak - 1, 30))


def throttle_pause_s(retry_after_s: float | None, streak: int, cap_s: float, jitter: float) -> float:
    """Seconds a closed-loop user pauses after the ``streak``-th throttled reply in a row (``streak`` >= 1).

    The server's ``Retry-After`` when it sent one, plus jitter of up to
    ``RETRY_AFTER_JITTER`` of it (users told the same delay must not retry in
    lockstep): ``retry_after_s`` × (1 + 0.1 × jitter); else exponential
    back-off with jitter: ``BACKOFF_FIRST_S`` × 2^(streak − 1) × (0.5 + jitter / 2),
    i.e. 0.5-1 s, 1-2 s, 2-4 s, …; never more than ``cap_s``
    (``--max-retry-after``). ``jitter`` is uniform in [0, 1).
    """
    if retry_after_s is not None:
        return min(retry_after_s * (1.0 + RETRY_AFTER_JITTER * jitter), cap_s)
    return min(cap_s, BACKOFF_FIRST_S * 2.0 ** min(streak - 1, 30)) * (0.5 + jitter / 2)


def grouped_error(record: RequestRecord, samples: dict[str, str]) -> RequestError | None:
    """``error_of(record)`` as Locust's Failures tab should group it: one row per error category.

    Locust groups failures by the exception's text, so a request id or a
    timestamp in a server's message would make one row per request. The text
    is ``"category (e.g. first message)"``; ``samples`` keeps the first
    message of each category (this process's, updated here).
    """
    error = error_of(record)
    if error is None or record.error is None:
        return error
    sample = samples.setdefault(record.error.category, record.error.message)
    return type(error)(f"{record.error.category} (e.g. {sample})")
