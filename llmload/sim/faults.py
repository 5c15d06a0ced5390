"""Fault injection of ``llmload sim``: which requests fail, how, and the exact bytes they get.

Every fault is off by default. Decisions are a pure function of ``--seed`` and
the request's sequence number (the same counter that picks reply lengths, see
``llmload.sim.replies``), so a sequential run injects the same faults into the
same requests every time.

Failure kinds (at most one per request; their rates add up to at most 1 and
partition one uniform draw, so each kind's rate is exact, not diluted by the
others):

==================  ===========================================================
kind                what the client gets
==================  ===========================================================
``overload``        ``--overload-status`` (429 or 503) at once, ``Retry-After``
                    header, error body in the ``--fail-shape``
``fail``            ``--fail-status`` (default 500) at once, error body in the
                    ``--fail-shape``
``error_200``       HTTP 200, ``application/json``, body is an error object in
                    the ``--fail-shape`` (vLLM's older servers did this)
``midstream_error`` streams only: some tokens, then ``data: {"error": {...}}``
                    and ``data: [DONE]`` (vLLM's in-band error after HTTP 200);
                    non-streaming requests in this share are answered normally
``drop``            some tokens (streams) or half of the JSON body (whole
                    replies), then the TCP connection is closed
==================  ===========================================================

Reply faults (``abort``, ``degenerate``) have their own draw and apply only
to requests without one of the failure kinds above: the reply ends on the
wire like any other (finish chunk, usage, ``[DONE]``) but is no success:
``abort`` stops after ``midstream_cut`` tokens with ``finish_reason
"abort"``; ``degenerate`` carries empty content, one word repeated or the
same text for every prompt (``--degenerate-shape``). Both count as injected
faults, never as completed. ``short`` stops after ``midstream_cut`` tokens
with ``"stop"`` although ignore_eos/min_tokens asked for more: a success for
the client, so it counts as injected *and* completed.

``stall`` is a latency fault drawn independently of those: the request is
held ``--stall-first-token-s`` seconds before it joins the engine queue.
Streams get their response headers at once and then wait (the client sees
idle time after the headers); whole replies get nothing until the stall ends.
A stalled request that then finishes counts as completed.

Mid-stream faults happen after ``max(1, n // 2)`` of the reply's ``n``
planned tokens have been written, never at the end: the finish chunk is
never sent.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus

from llmload.errors import ConfigError
from llmload.sim.replies import WORD_BYTES, ReplyPlan

__all__ = [
    "IMMEDIATE_FAULTS",
    "NO_FAULT",
    "RETRY_AFTER_S",
    "SAME_TEXT_TOKENS",
    "DegenerateShape",
    "ErrorShape",
    "FaultConfig",
    "FaultKind",
    "FaultPlan",
    "add_fault_arguments",
    "apply_reply_fault",
    "encode_error",
    "error_type",
    "fault_config_from",
    "midstream_cut",
    "plan_faults",
    "plan_reply_fault",
]

RETRY_AFTER_S = 1
"""``Retry-After`` header value of overload answers, seconds."""


class FaultKind(Enum):
    """An injected fault; the value is the ``kind`` label of ``llmload_sim_faults_injected_total``."""

    OVERLOAD = "overload"
    FAIL = "fail"
    ERROR_200 = "error_200"
    MIDSTREAM_ERROR = "midstream_error"
    DROP = "drop"
    STALL = "stall"
    # reply faults: a 200 reply that ends normally on the wire but is no success (see "Reply faults")
    ABORT = "abort"
    DEGENERATE = "degenerate"
    SHORT = "short"  # the only injected kind that completes: a success, shorter than asked


IMMEDIATE_FAULTS = frozenset({FaultKind.OVERLOAD, FaultKind.FAIL, FaultKind.ERROR_200})
"""Answered at once, before the request reaches the engine."""


_FAILURE_RATES = ("overload_rate", "fail_rate", "error_200_rate", "midstream_error_rate", "drop_rate")
"""The exclusive failure kinds' rate fields, in the order they partition the draw."""


class DegenerateShape(Enum):
    """What a ``degenerate`` reply carries instead of the planned words."""

    EMPTY = "empty"  # the planned number of chunks, each with empty content (usage counts them)
    REPEAT = "repeat"  # the first planned word, repeated for the whole reply
    SAME = "same"  # the same SAME_TEXT_TOKENS words for every request, whatever the prompt


class ErrorShape(Enum):
    """JSON shape of an error body."""

    OPENAI = "openai"  # {"error": {"message", "type", "param", "code"}} (OpenAI, vLLM, llama.cpp)
    VLLM = "vllm"  # {"object": "error", "message", "type", "param", "code"} (older vLLM)


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Fault-injection settings; all rates are probabilities per generation request.

    Attributes:
        fail_rate: share answered with ``fail_status`` and an error body.
        fail_status: HTTP status of ``fail`` answers, 400-599.
        fail_shape: shape of every injected error body (``fail``, ``error_200``,
            ``overload``).
        error_200_rate: share answered HTTP 200 with an error body.
        midstream_error_rate: share of streams ended by an in-band error event.
        drop_rate: share whose connection is closed mid-reply.
        stall_rate: share held ``stall_first_token_s`` before generation starts.
        stall_first_token_s: length of a stall, seconds.
        overload_rate: share answered ``overload_status`` with ``Retry-After``.
        overload_status: 429 (rate limited) or 503 (unavailable).
        faults_after_s: faults begin this many seconds after the simulator
            started; requests accepted before then get none (a server that
            breaks mid-run, for soak tests and thresholds).
    """

    fail_rate: float = 0.0
    fail_status: int = 500
    fail_shape: ErrorShape = ErrorShape.OPENAI
    error_200_rate: float = 0.0
    midstream_error_rate: float = 0.0
    drop_rate: float = 0.0
    stall_rate: float = 0.0
    stall_first_token_s: float = 0.0
    overload_rate: float = 0.0
    overload_status: int = 429
    faults_after_s: float = 0.0
    # reply faults (``plan_reply_fault``): drawn apart from the failure kinds above
    abort_rate: float = 0.0
    degenerate_rate: float = 0.0
    short_rate: float = 0.0
    degenerate_shape: DegenerateShape = DegenerateShape.REPEAT

    def __post_init__(self) -> None:
        _check_reply_faults(self)
        for name in (*_FAILURE_RATES, "stall_rate"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ConfigError(f"{_flag(name)} must be a probability within 0..1, got {value}")
        total = sum(getattr(self, name) for name in _FAILURE_RATES)
        if total > 1.0 + 1e-9:
            raise ConfigError(
                f"failure rates add up to {total:g} > 1 ({', '.join(_flag(n) for n in _FAILURE_RATES)}); "
                "each request gets at most one of these faults, so lower them"
            )
        if not 400 <= self.fail_status <= 599 or self.fail_status not in HTTPStatus._value2member_map_:
            raise ConfigError(f"--fail-status must be an HTTP error status 400-599, got {self.fail_status}")
        if self.overload_status not in (429, 503):
            raise ConfigError(f"--overload-status must be 429 or 503, got {self.overload_status}")
        if not (math.isfinite(self.stall_first_token_s) and self.stall_first_token_s >= 0):
            raise ConfigError(f"--stall-first-token-s must be seconds >= 0, got {self.stall_first_token_s}")
        if not (math.isfinite(self.faults_after_s) and self.faults_after_s >= 0):
            raise ConfigError(
                f"--faults-after must be seconds >= 0, got {self.faults_after_s}; e.g. --faults-after 900"
            )
        if (self.stall_rate > 0) != (self.stall_first_token_s > 0):
            raise ConfigError(
                f"--stall-rate ({self.stall_rate}) and --stall-first-token-s ({self.stall_first_token_s}) "
                "go together: set both, e.g. --stall-rate 0.1 --stall-first-token-s 5"
            )

    @property
    def enabled(self) -> bool:
        """True when any fault can be injected."""
        return self.stall_rate > 0 or any(getattr(self, name) > 0 for name in _FAILURE_RATES)

    @property
    def replies_enabled(self) -> bool:
        """True when a reply fault (abort, degenerate) can be injected."""
        return self.abort_rate > 0 or self.degenerate_rate > 0 or self.short_rate > 0


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults decided for one request.

    Attributes:
        failure: the failure kind, or None (answered normally).
        stall_s: seconds to hold the request before generation; 0.0 for none.
    """

    failure: FaultKind | None
    stall_s: float


NO_FAULT = FaultPlan(None, 0.0)
"""The plan of every request when no fault is configured."""


def plan_faults(config: FaultConfig, seed: int, sequence_number: int, stream: bool) -> FaultPlan:
    """Decide the faults of the ``sequence_number``-th accepted request (1-based).

    A ``midstream_error`` drawn for a non-streaming request becomes no failure.
    Immediate failures (overload, fail, error_200) are never stalled.
    """
    if not config.enabled:
        return NO_FAULT
    rng = random.Random(f"llmload-sim-faults/{seed}/{sequence_number}")
    draw, stall_draw = rng.random(), rng.random()
    failure: FaultKind | None = None
    edge = 0.0
    for kind, rate in (
        (FaultKind.OVERLOAD, config.overload_rate),
        (FaultKind.FAIL, config.fail_rate),
        (FaultKind.ERROR_200, config.error_200_rate),
        (FaultKind.MIDSTREAM_ERROR, config.midstream_error_rate),
        (FaultKind.DROP, config.drop_rate),
    ):
        edge += rate
        if draw < edge:
            failure = kind
            break
    if failure is FaultKind.MIDSTREAM_ERROR and not stream:
        failure = None
    if failure in IMMEDIATE_FAULTS:
        return FaultPlan(failure, 0.0)
    stall_s = config.stall_first_token_s if stall_draw < config.stall_rate else 0.0
    return FaultPlan(failure, stall_s)


def midstream_cut(planned_tokens: int) -> int:
    """Return after how many tokens a mid-stream fault strikes: ``max(1, n // 2)``, at most ``n``."""
    return min(max(1, planned_tokens // 2), planned_tokens)


def error_type(status: int) -> str:
    """Return the error ``type`` for ``status``: ``RateLimitError`` for 429, else from the reason phrase.

    E.g. 500 → ``InternalServerError``, 503 → ``ServiceUnavailableError``,
    400 → ``BadRequestError`` (the names vLLM's and OpenAI's servers use).
    """
    if status == 429:
        return "RateLimitError"
    name = "".join(HTTPStatus(status).phrase.title().replace("-", " ").split())
    return name if name.endswith("Error") else name + "Error"


def encode_error(shape: ErrorShape, status: int, message: str) -> bytes:
    """Return the JSON error body for ``status`` in ``shape``, compact, type from ``error_type``."""
    fields = {"message": message, "type": error_type(status), "param": None, "code": status}
    body: dict[str, object] = {"error": fields} if shape is ErrorShape.OPENAI else {"object": "error", **fields}
    return json.dumps(body, separators=(",", ":")).encode()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the fault-injection flags (defaults from ``FaultConfig``) to ``parser``."""
    d = FaultConfig()
    g = parser.add_argument_group("fault injection (all off by default; seeded by --seed)")
    g.add_argument("--fail-rate", type=float, default=d.fail_rate, help="share answered --fail-status")
    g.add_argument("--fail-status", type=int, default=d.fail_status, help="status of --fail-rate answers")
    g.add_argument(
        "--fail-shape",
        choices=[s.value for s in ErrorShape],
        default=d.fail_shape.value,
        help='injected error bodies: openai {"error": {...}} or vllm {"object": "error", ...}',
    )
    g.add_argument("--error-200-rate", type=float, default=d.error_200_rate, help="share answered 200 + error body")
    g.add_argument(
        "--midstream-error-rate",
        type=float,
        default=d.midstream_error_rate,
        help="share of streams ended by an error event after some tokens",
    )
    g.add_argument("--drop-rate", type=float, default=d.drop_rate, help="share whose connection is closed mid-reply")
    g.add_argument("--stall-rate", type=float, default=d.stall_rate, help="share held --stall-first-token-s first")
    g.add_argument(
        "--stall-first-token-s",
        type=float,
        default=d.stall_first_token_s,
        help="seconds a stalled request waits before its first token",
    )
    g.add_argument("--overload-rate", type=float, default=d.overload_rate, help="share answered --overload-status")
    g.add_argument(
        "--overload-status",
        type=int,
        default=d.overload_status,
        help=f"429 or 503, sent with Retry-After: {RETRY_AFTER_S}",
    )
    g.add_argument(
        "--faults-after",
        type=float,
        default=d.faults_after_s,
        metavar="S",
        dest="faults_after_s",
        help="faults begin S seconds after the simulator starts (a server that breaks mid-run); 0 = from the start",
    )
    _add_reply_fault_arguments(g, d)


def fault_config_from(values: dict[str, object]) -> FaultConfig:
    """Pop the fault flags out of parsed ``values`` (``vars(namespace)``) and build a ``FaultConfig``.

    Raises:
        ConfigError: a value is out of range (see ``FaultConfig``).
    """
    picked = {f.name: values.pop(f.name) for f in dataclasses.fields(FaultConfig)}
    picked["fail_shape"] = ErrorShape(picked["fail_shape"])
    picked["degenerate_shape"] = DegenerateShape(picked["degenerate_shape"])
    return FaultConfig(**picked)  # type: ignore[arg-type]


# ── reply faults: aborted and degenerate replies ─────────────────────────────
# A 200 stream that ends with finish_reason, usage and [DONE] like any other, but is
# no success: an engine-side abort (finish_reason "abort" after some tokens, as vLLM
# and SGLang send), or degenerate output (empty, one word repeated, the same text for
# every prompt), or a reply that stops early although ignore_eos/min_tokens asked for
# more ("short": the one kind that completes). Drawn with their own seeded draw, only for
# requests without a failure kind; counted in llmload_sim_faults_injected_total, and
# (but "short") never as completed.

SAME_TEXT_TOKENS = 16
"""Length of the one reply every ``--degenerate-shape same`` request gets (fewer if max_tokens is smaller)."""


def _check_reply_faults(config: FaultConfig) -> None:
    names = ("abort_rate", "degenerate_rate", "short_rate")
    for name in names:
        value = getattr(config, name)
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ConfigError(f"{_flag(name)} must be a probability within 0..1, got {value}")
    if sum(getattr(config, name) for name in names) > 1.0 + 1e-9:
        given = ", ".join(f"{_flag(name)} ({getattr(config, name):g})" for name in names)
        raise ConfigError(f"{given} add up to more than 1; each reply gets at most one of them, so lower them")


def _add_reply_fault_arguments(g: argparse._ArgumentGroup, d: FaultConfig) -> None:
    g.add_argument(
        "--abort-rate",
        type=float,
        default=d.abort_rate,
        help='share of replies ended with finish_reason "abort" after some tokens (usage and [DONE] follow)',
    )
    g.add_argument(
        "--degenerate-rate",
        type=float,
        default=d.degenerate_rate,
        help="share of replies with degenerate output (--degenerate-shape)",
    )
    g.add_argument(
        "--degenerate-shape",
        choices=[s.value for s in DegenerateShape],
        default=d.degenerate_shape.value,
        help="empty: chunks with empty content; repeat: one word repeated; same: one text for every prompt",
    )
    g.add_argument(
        "--short-rate",
        type=float,
        default=d.short_rate,
        help='share of replies ended with "stop" after half their tokens although ignore_eos/min_tokens asked for more',
    )


def plan_reply_fault(config: FaultConfig, seed: int, sequence_number: int) -> FaultKind | None:
    """The reply fault of the ``sequence_number``-th accepted request: ``ABORT``, ``DEGENERATE``, ``SHORT`` or None."""
    if not config.replies_enabled:
        return None
    draw = random.Random(f"llmload-sim-reply-faults/{seed}/{sequence_number}").random()
    if draw < config.abort_rate:
        return FaultKind.ABORT
    if draw < config.abort_rate + config.degenerate_rate:
        return FaultKind.DEGENERATE
    if draw < config.abort_rate + config.degenerate_rate + config.short_rate:
        return FaultKind.SHORT
    return None


def apply_reply_fault(
    plan: ReplyPlan, kind: FaultKind | None, config: FaultConfig, seed: int, max_tokens: int
) -> ReplyPlan:
    """The reply ``plan`` becomes under reply fault ``kind`` (unchanged for None).

    ``ABORT``: the first ``midstream_cut(n)`` words, finish_reason ``"abort"``;
    ``SHORT``: the same words with ``"stop"`` (a server that ignores ignore_eos).
    ``DEGENERATE``: as ``config.degenerate_shape`` says; ``same`` is a pure
    function of ``seed`` (and ``max_tokens``), the same for every request.
    """
    words = plan.words
    if kind is FaultKind.ABORT:
        return ReplyPlan(words=words[: midstream_cut(len(words))], finish_reason="abort")
    if kind is FaultKind.SHORT:
        return ReplyPlan(words=words[: midstream_cut(len(words))], finish_reason="stop")
    if kind is not FaultKind.DEGENERATE:
        return plan
    shape = config.degenerate_shape
    if shape is DegenerateShape.EMPTY:
        return ReplyPlan(words=[b""] * len(words), finish_reason=plan.finish_reason)
    if shape is DegenerateShape.REPEAT:
        return ReplyPlan(words=[words[0]] * len(words), finish_reason=plan.finish_reason)
    length = min(SAME_TEXT_TOKENS, max_tokens)
    same = random.Random(f"llmload-sim-same-text/{seed}").choices(WORD_BYTES, k=length)
    return ReplyPlan(words=same, finish_reason="length" if length == max_tokens else "stop")
