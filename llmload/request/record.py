"""Value types for one measured request, with derived TTFT, ITL, TPOT and E2E.

Raw timings are seconds on a monotonic clock, relative to the moment the
request was sent (``0.0`` = send). Derived metrics follow the definitions
used by vLLM's ``benchmark_serving`` and guidellm:

- TTFT: send → first event carrying a generated token of any kind (content,
  reasoning or tool-call delta). Role-only and usage-only chunks do not count.
- time to first content token: send → first non-empty ``content``/``text``.
- ITL: gaps between consecutive tokens, never including TTFT. When the
  tokens per event are known, a reply of n tokens gives exactly n − 1
  samples summing to last token − first token, so its mean ITL is its TPOT
  (see ``RequestRecord.itl_samples_s``); otherwise one sample per gap
  between token-bearing events (inter-chunk latency, ``ITLKind.CHUNK``).
- TPOT: (last token − first token) / (streamed tokens − 1), where streamed
  tokens are ``completion_tokens`` minus reasoning tokens that usage counts
  but the stream never carried (``RequestRecord.streamed_tokens``).
- E2E: send → end of the reply (``[DONE]``, or end of body after a finish).

"Send" is when the request is written on a ready connection; connection
set-up before it is ``connect_s``. Arrival times are those of the bytes'
arrival (kernel receive stamps where available, see ``llmload.net.transport``).

``None`` always means *unknown*, never zero.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "ErrorInfo",
    "ITLKind",
    "Outcome",
    "RequestRecord",
    "TokenCount",
    "TokenSource",
    "UsageNote",
]


class Outcome(Enum):
    """How one request ended. Only ``OK`` is a success."""

    # A dict key on the per-request path (counts by outcome, source, ITL kind, note). Enum's own __hash__
    # hashes the member's name in Python, ~1,000 instructions a look-up; members are singletons that
    # compare by identity, so the identity hash (in C) gives the same dicts and sets.
    __hash__ = object.__hash__

    OK = "ok"
    EMPTY = "empty"  # 2xx and well-formed, but no generated token at all (not a success with TTFT 0)
    HTTP_ERROR = "http_error"  # non-2xx status that is not throttling (a 503 without Retry-After included)
    THROTTLED = "throttled"  # 429, or 503 with Retry-After or a rate-limit body: the server asks to slow down
    TRANSPORT_ERROR = "transport_error"  # refused, reset, DNS
    TIMEOUT = "timeout"  # connect, idle-between-bytes or total timeout
    STREAM_ERROR = "stream_error"  # malformed SSE/JSON, stream ended before completion
    # error object in a 2xx body or mid-stream, a finish_reason that is no normal end, degenerate output
    # (HTTP 200 is no success)
    SERVER_ERROR = "server_error"
    CANCELLED = "cancelled"  # still in flight when the run stopped; neither success nor failure
    # the client could not build, send or measure it (its error says why); not finished, yet its
    # --num-requests slot is used
    SKIPPED = "skipped"

    @property
    def is_failure(self) -> bool:
        """True for every outcome except ``OK``, ``CANCELLED`` and ``SKIPPED``."""
        return self not in _NOT_FAILURES


class TokenSource(Enum):
    """Where a token count came from, best first."""

    __hash__ = object.__hash__  # as Outcome's: a dict key on the per-request path

    SERVER = "server"  # the server's `usage` block
    LOGPROBS = "logprobs"  # entries of `logprobs.content` (chat) / `logprobs.tokens` (completions), one per token
    TOKENIZER = "client-tokenized"  # local tokenizer on the joined text, no special tokens
    CHUNKS = "chunk-count"  # number of token-bearing stream events (a lower bound)
    UNKNOWN = "unknown"


class UsageNote(Enum):
    """Why a reply's token count or TPOT is not simply read off the server's final usage.

    Counted per note in the results (``tokens.usage_checks``); rules in ``llmload.request.tokens.read_usage``.
    """

    __hash__ = object.__hash__  # as Outcome's: a dict key on the per-request path

    INCREMENTAL = "usage_incremental"  # usage sent per chunk held per-chunk counts: summed, not the last value
    NOT_GROWING = "usage_not_growing"  # usage sent per chunk stayed the same while tokens streamed
    BELOW_EVENTS = "usage_below_events"  # usage counted fewer tokens than token-bearing events: not used
    HIDDEN_REASONING = "hidden_reasoning"  # usage's reasoning tokens were never streamed: TPOT over the streamed ones
    # usage's reasoning tokens were not streamed, yet usage minus them is fewer than the token events:
    # how many tokens were streamed is unknown, so TPOT is unavailable
    REASONING_UNEXPLAINED = "reasoning_unexplained"
    # usage's reasoning tokens exceed its completion_tokens: the server counts reasoning apart from
    # them; every completion token is an answer token and the reasoning is reported on its own
    REASONING_APART = "reasoning_apart"
    # usage counted more tokens than the streamed text has bytes (a generated token carries at least
    # one, bar one end-of-sequence token): not every token was streamed, so TPOT over them is unavailable
    ABOVE_TEXT = "usage_above_text"
    # usage's cached prompt tokens exceed its prompt tokens (impossible): the cached count is not used
    CACHED_ABOVE_PROMPT = "cached_above_prompt"
    # a usage detail (reasoning or cached prompt tokens) was sent but is not a token count (a string,
    # a negative or fractional number...): that detail is unknown (None), never 0
    DETAIL_UNREADABLE = "usage_detail_unreadable"


_STREAMED_COUNT_UNKNOWN = frozenset({UsageNote.REASONING_UNEXPLAINED, UsageNote.ABOVE_TEXT})
"""Notes that make the number of streamed tokens unknown (``RequestRecord.streamed_tokens``)."""


class ITLKind(Enum):
    """Whether ITL samples are per token or only per chunk."""

    __hash__ = object.__hash__  # as Outcome's: a dict key on the per-request path

    TOKEN = "token"  # per-chunk token counts known (server counts, or one token per chunk confirmed)
    CHUNK = "chunk"  # only chunk arrival times known: samples are inter-chunk gaps


_TOKEN_ITL, _CHUNK_ITL = ITLKind.TOKEN, ITLKind.CHUNK  # as _OK below


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A token count with its provenance; ``value`` is None when unknown."""

    value: int | None
    source: TokenSource

    @classmethod
    def unknown(cls) -> TokenCount:
        """Return the unknown count (one shared value: it is frozen)."""
        return _UNKNOWN_COUNT


_UNKNOWN_COUNT = TokenCount(None, TokenSource.UNKNOWN)

# Enum members read as module globals on the per-request path: reading one off its class goes through
# EnumType.__getattr__'s hook (Python 3.11), about 1,000 instructions each time.
_OK = Outcome.OK
_NOT_FAILURES = (Outcome.OK, Outcome.CANCELLED, Outcome.SKIPPED)
_SERVER = TokenSource.SERVER


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why a request failed.

    ``category`` is a short, bounded label such as ``"HTTP 404 NotFoundError"``
    or ``"timeout: read idle"``; it never contains server-chosen free text
    beyond the error ``type``/``code`` fields, so it is safe as a grouping key.
    ``message`` is the human-readable detail (truncated to 500 characters).
    """

    category: str
    message: str
    status: int | None = None


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request.

    Times are seconds relative to send on a monotonic clock.

    Attributes:
        endpoint: ``"chat"`` or ``"completions"``.
        model: the model name sent in the request.
        started_at_unix: wall-clock stamp of the send (for labels and run spans only).
        outcome: how it ended.
        error: set for every failure outcome.
        headers_s: response headers received.
        token_times_s: arrival time of every event that carried a generated token.
        token_counts: tokens per entry of ``token_times_s`` as reported by the
            server (cumulative usage differences); None when not reported.
        first_content_s: first non-empty content/text delta; None if none arrived.
        end_s: end of the reply (E2E); None if the request never completed.
        prompt_tokens, completion_tokens: counts with their sources.
        finish_reason: the last finish_reason seen, or None.
        requested_prompt_tokens: the workload's own estimate of the prompt length, if any.
        streamed: False for a whole (non-streamed) reply: its one arrival time is the
            E2E, and TTFT, time to first content, ITL and TPOT are unknown (None).
        dispatch_delay_s: open loop only: actual send − intended (scheduled) send, ≥ 0;
            the time the request waited for a free user or concurrency slot (else hidden from latency).
            None in closed-loop runs.
        turn: multi-turn runs: the request's turn in its session (1 = first); None otherwise.
        session_turns: set on the request that ended its session: the turns it completed
            (a failed turn ends it and is not completed); None otherwise.
        session_duration_s: with ``session_turns``: first send to the end of this request (think times included).
        session_failed: with ``session_turns``: the session ended on a failed turn.
        client_completion_tokens: the local tokenizer's count of the output
            when the server also sent usage (a diagnostic of how the two
            disagree); None otherwise.
        output_text: the generated text, only when the client was asked to
            keep it (multi-turn conversations); None otherwise.
        connect_s: time to have a connection ready before the send (0 on a
            kept-alive one; client delay included); None if never measured.
        read_lags_s: for every body read with a kernel receive stamp, how long
            its bytes had waited before the client read them (seconds).
        send_lag_s: how long the request's hand-over to the kernel took (its
            first ``send(2)``; seconds): the request went on the wire within
            it, so its clock may have started up to that much early. About
            20 µs; more when the kernel preempted the client inside the call.
            None when not timed (TLS, other transports).
        unstamped_reads: body reads timed by the monotonic clock alone (no
            kernel stamp: TLS, non-Linux, bytes that came with the headers).
        retry_after_s: throttled replies only: the server's ``Retry-After``
            in seconds; None if it sent none (or an unreadable one).
        reasoning_tokens: ``usage.completion_tokens_details.reasoning_tokens``
            (part of ``completion_tokens``); None if the server did not say.
        cached_prompt_tokens: ``usage.prompt_tokens_details.cached_tokens``
            (prompt tokens served from the server's prefix cache); None if the server did not say.
        hidden_reasoning_tokens: reasoning tokens counted in
            ``completion_tokens`` that were never streamed (the stream carried
            no reasoning text); 0 when none were judged hidden.
        usage_notes: why the token count or TPOT is not the plain final usage (see ``UsageNote``).
        requested_output_tokens: the reply length asked for as a minimum
            (``max_tokens`` with ``ignore_eos``, or a ``min_tokens`` body field);
            None when the server may end the reply when it likes.
        skipped_part: the first typed part of the reply that holds no text
            llmload reads (e.g. ``choices[0].delta.content[0] has type 'audio'``);
            an empty reply's message names it. None if none.
        usage_without_completion: the reply's ``usage`` had no completion
            count (``total_tokens`` alone, say), so its count came from elsewhere.
        inputs: embeddings: the inputs of the batch, each answered with a
            vector; None for generation APIs. An embeddings record's
            ``completion_tokens`` stays unknown: nothing is generated.
        response_id: the Responses API's id of the reply (``response.created`` /
            ``response.completed``, or the whole body's ``id``), which the next
            turn can continue (``previous_response_id``); None otherwise.
    """

    endpoint: str
    model: str
    started_at_unix: float
    outcome: Outcome = Outcome.OK
    error: ErrorInfo | None = None
    headers_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    token_counts: list[int] | None = None
    first_content_s: float | None = None
    end_s: float | None = None
    prompt_tokens: TokenCount = _UNKNOWN_COUNT  # frozen: one shared value, no factory call per record
    completion_tokens: TokenCount = _UNKNOWN_COUNT
    finish_reason: str | None = None
    requested_prompt_tokens: int | None = None
    dispatch_delay_s: float | None = None
    turn: int | None = None
    session_turns: int | None = None
    session_duration_s: float | None = None
    session_failed: bool = False
    streamed: bool = True
    client_completion_tokens: int | None = None
    output_text: str | None = None
    connect_s: float | None = None
    read_lags_s: list[float] = field(default_factory=list)
    send_lag_s: float | None = None
    unstamped_reads: int = 0
    retry_after_s: float | None = None
    reasoning_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    hidden_reasoning_tokens: int = 0
    usage_notes: tuple[UsageNote, ...] = ()
    requested_output_tokens: int | None = None
    skipped_part: str | None = None
    usage_without_completion: bool = False
    inputs: int | None = None
    response_id: str | None = None

    # ── derived metrics ──────────────────────────────────────────────────
    @property
    def ok(self) -> bool:
        """True when the request succeeded."""
        return self.outcome is _OK

    @property
    def ttft_s(self) -> float | None:
        """Seconds from send to the first generated token of any kind; None if none arrived or not streamed."""
        return self.token_times_s[0] if self.token_times_s and self.streamed else None

    @property
    def ttfc_s(self) -> float | None:
        """Seconds from send to the first non-empty content token; None if none arrived or not streamed."""
        return self.first_content_s if self.streamed else None

    @property
    def e2e_s(self) -> float | None:
        """Seconds from send to the end of the reply; None if it never completed."""
        return self.end_s

    @property
    def last_token_s(self) -> float | None:
        """Arrival of the last token-bearing event; None if none arrived."""
        return self.token_times_s[-1] if self.token_times_s else None

    @property
    def streamed_tokens(self) -> int | None:
        """Completion tokens that were streamed: ``completion_tokens`` minus hidden reasoning tokens.

        None when the count is unknown, or when usage makes the streamed count
        unknowable (``UsageNote.REASONING_UNEXPLAINED``, ``UsageNote.ABOVE_TEXT``).
        """
        n = self.completion_tokens.value
        if n is None or not _STREAMED_COUNT_UNKNOWN.isdisjoint(self.usage_notes):
            return None
        return n - self.hidden_reasoning_tokens

    @property
    def answer_tokens(self) -> int | None:
        """Completion tokens that are not reasoning; None when the count or the reasoning count is unknown.

        ``reasoning_tokens`` are part of ``completion_tokens`` unless they
        exceed them (``UsageNote.REASONING_APART``: the server counts them
        apart, and every completion token is an answer token). Never negative.
        """
        n, r = self.completion_tokens.value, self.reasoning_tokens
        if n is None or r is None:
            return None
        return n if r > n else n - r

    @property
    def tpot_s(self) -> float | None:
        """(last token − first token) / (streamed tokens − 1).

        Over the tokens that were streamed (``streamed_tokens``): reasoning
        tokens that usage counts but the stream never carried took no part in
        the time between the first and the last streamed token (e.g. 104
        completion tokens of which 100 hidden reasoning, 4 streamed over 60 ms
        give 20 ms, not 0.58 ms). None when fewer than two tokens were
        streamed or the count is unknown (``usage_notes`` says why), and
        when the tokens did not spread over time: a reply whose tokens all
        came in one token-bearing event (or in events that arrived at the
        same instant) has no time between its first and last token to
        divide, so its TPOT is unknown, never 0.
        """
        n = self.streamed_tokens
        times = self.token_times_s
        if n is None or n < 2 or len(times) < 2 or not self.streamed:
            return None
        span = times[-1] - times[0]
        return span / (n - 1) if span > 0 else None

    @property
    def itl_kind(self) -> ITLKind:
        """``TOKEN`` when per-chunk token counts are known, else ``CHUNK``."""
        if self.token_counts is not None:
            return _TOKEN_ITL
        n = self.streamed_tokens
        if n is not None and self.completion_tokens.source is _SERVER and n == len(self.token_times_s):
            return _TOKEN_ITL  # one token per event, confirmed by the server's total
        return _CHUNK_ITL

    def itl_samples_s(self) -> list[float]:
        """Inter-token latency samples in seconds; the TTFT is never one of them.

        With per-event token counts (``itl_kind`` is ``TOKEN``), the reply's
        n tokens give exactly n − 1 samples whose sum is last token − first
        token, whatever the chunking: tokens that came in the same event as
        the first token are samples of 0, and the gap before an event of k
        tokens is k samples of gap / k. A request's mean ITL then equals its
        TPOT. Without per-event counts each gap between token-bearing events
        is one sample (inter-chunk latency). A reply whose tokens did not
        spread over time (one token-bearing event, or all at one instant)
        gives no sample: its gaps are unknown, not 0 (as its TPOT).
        """
        times = self.token_times_s
        if len(times) < 2 or not self.streamed or times[-1] <= times[0]:
            return []
        counts = self.token_counts
        if counts is None:
            return list(map(operator.sub, times[1:], times[:-1]))  # b - a for each pair, in C
        out: list[float] = [0.0] * (counts[0] - 1) if counts and counts[0] > 1 else []
        for i in range(1, len(times)):
            k = counts[i] if i < len(counts) else 1
            gap = times[i] - times[i - 1]
            if k <= 1:
                out.append(gap)
            else:
                out.extend([gap / k] * k)
        return out
