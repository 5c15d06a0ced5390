"""Mergeable run statistics, per (endpoint, model), built from ``RequestRecord``s.

Workers ``add`` records to an ``LLMStats``, ship it as a delta (``llmload.run.wire``)
and start a fresh one; the master ``merge_in``s every delta. ``merge`` is
associative and commutative with ``LLMStats.empty()`` as identity, so the
master's totals equal what one process adding every record would hold
(property-tested in ``tests/property/test_merge_laws.py``).

Counting rules (definitions follow vLLM ``benchmark_serving`` and guidellm):

- successes (``Outcome.OK``) feed token sums and latency histograms;
- failures (every other outcome except ``CANCELLED``, including ``EMPTY``)
  are counted per outcome and grouped by ``ErrorInfo.category``; their partial
  tokens and timings are excluded (an error after some tokens is no success);
- cancelled requests (in flight at stop) are only counted;
- skipped requests (the client could not build, send or measure them) are
  counted and grouped by category with the failures, nothing else;
- a token count of ``None`` is counted as "unknown", never as 0.

Memory stays bounded in long failing runs (unique error messages): at most
``MAX_ERROR_CATEGORIES`` categories and ``MAX_ERROR_SAMPLES`` sample messages
each. The bound is applied deterministically (keep the lexicographically
smallest categories/messages) so that merging stays lawful.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats_schema import (
    Merge,
    counter,
    counts,
    earliest,
    error_table,
    histogram,
    labels,
    latest,
    schema_of,
)
from llmload.request.degenerate import DEGENERATE_REPEATED, DEGENERATE_SAME_TEXT
from llmload.request.finish import finish_label
from llmload.request.record import ITLKind, Outcome, RequestRecord, TokenSource, UsageNote

__all__ = [
    "CLIENT_HISTOGRAM_NAMES",
    "HISTOGRAM_NAMES",
    "LATENCY_HISTOGRAM_NAMES",
    "MAX_ERROR_CATEGORIES",
    "MAX_ERROR_SAMPLES",
    "MAX_LABELS",
    "NO_OUTPUT_ENDPOINTS",
    "OVERFLOW_CATEGORY",
    "REQUEST_LAG_LIMIT_S",
    "STATS_SCHEMA",
    "EndpointStats",
    "ErrorGroup",
    "LLMStats",
    "StatsKey",
    "bound_labels",
]

MAX_ERROR_CATEGORIES = 50
REQUEST_LAG_LIMIT_S = 0.010
"""Largest read lag (s) a request may have before its latencies (TTFT included) may be off (``lagged_requests``)."""
MAX_ERROR_SAMPLES = 3
_USAGE_NOTE_FIELDS = {
    UsageNote.INCREMENTAL: "usage_incremental_requests",
    UsageNote.NOT_GROWING: "usage_not_growing_requests",
    UsageNote.BELOW_EVENTS: "usage_below_events_requests",
    UsageNote.HIDDEN_REASONING: "hidden_reasoning_requests",
    UsageNote.REASONING_UNEXPLAINED: "reasoning_unexplained_requests",
    UsageNote.REASONING_APART: "reasoning_apart_requests",
    UsageNote.ABOVE_TEXT: "usage_above_text_requests",
    UsageNote.CACHED_ABOVE_PROMPT: "cached_above_prompt_requests",
    UsageNote.DETAIL_UNREADABLE: "usage_detail_unreadable_requests",
}
OVERFLOW_CATEGORY = "other"
_EXACT_SOURCES = (TokenSource.SERVER, TokenSource.LOGPROBS, TokenSource.TOKENIZER)
"""Token count sources that count every token (a chunk count is only a lower bound)."""
# Enum members read as module globals on the per-request path (``llmload.request.record`` says why)
_OK, _CANCELLED, _SKIPPED = Outcome.OK, Outcome.CANCELLED, Outcome.SKIPPED
_SERVER, _UNKNOWN_SOURCE = TokenSource.SERVER, TokenSource.UNKNOWN
MAX_LABELS = 32
"""Most distinct labels of a ``labels()`` field (finish reasons); the rest are counted as ``OVERFLOW_CATEGORY``."""

NO_OUTPUT_ENDPOINTS = frozenset({"embeddings"})
"""APIs whose replies generate nothing: no stream, no TTFT, no output tokens (their E2E is one call's)."""

StatsKey = tuple[str, str]
"""``(endpoint, model)``."""

_K = TypeVar("_K")


def _min_status(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


@dataclass(slots=True)
class ErrorGroup:
    """Failures sharing one ``ErrorInfo.category``.

    Attributes:
        count: number of failed requests in the group.
        status: the smallest HTTP status seen in the group; None if none had one.
        samples: up to ``MAX_ERROR_SAMPLES`` distinct messages, the
            lexicographically smallest ones (deterministic, so merging is
            commutative), sorted.
    """

    count: int = 0
    status: int | None = None
    samples: list[str] = field(default_factory=list)

    def add_sample(self, message: str) -> None:
        """Keep ``message`` if it is among the smallest distinct messages seen."""
        samples = self.samples
        if message in samples:
            return
        if len(samples) < MAX_ERROR_SAMPLES:
            samples.append(message)
            samples.sort()
        elif message < samples[-1]:
            samples[-1] = message
            samples.sort()

    def merge_in(self, other: ErrorGroup) -> None:
        """Fold ``other`` into this group, in place."""
        self.count += other.count
        self.status = _min_status(self.status, other.status)
        for message in other.samples:
            self.add_sample(message)

    def copy(self) -> ErrorGroup:
        """Return an independent copy."""
        return ErrorGroup(self.count, self.status, list(self.samples))

    def as_dict(self, category: str) -> dict[str, Any]:
        """The group as plain values (results ``errors[]`` and the wire form): category, status, count, samples."""
        return {"category": category, "status": self.status, "count": self.count, "samples": list(self.samples)}


def _add_count(counts: dict[_K, int], key: _K, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


def _merge_counts(into: dict[_K, int], other: dict[_K, int]) -> None:
    for key, n in other.items():
        into[key] = into.get(key, 0) + n


def _add_label(counts: dict[str, int], label: str, n: int) -> None:
    if label in counts:
        counts[label] += n
    else:
        counts[label] = n
        bound_labels(counts)


def bound_labels(counts: dict[str, int]) -> None:
    """Fold labels beyond ``MAX_LABELS`` into ``OVERFLOW_CATEGORY``, in place.

    The rule of ``EndpointStats.bound_errors``: past the bound the
    ``MAX_LABELS - 1`` lexicographically smallest labels are kept, so the result
    depends only on what was counted, never on the order (merging stays lawful).
    """
    if len(counts) <= MAX_LABELS:
        return
    named = sorted(label for label in counts if label != OVERFLOW_CATEGORY)
    overflow = counts.pop(OVERFLOW_CATEGORY, 0)
    for label in named[MAX_LABELS - 1 :]:
        overflow += counts.pop(label)
    counts[OVERFLOW_CATEGORY] = overflow


@dataclass(slots=True)
class EndpointStats:
    """Counters and histograms for one (endpoint, model).

    Count dictionaries never hold zero entries, so equal statistics compare
    equal. Times are seconds; ``*_unix`` are wall-clock stamps.

    Attributes:
        requests_by_outcome: requests per outcome, ``CANCELLED`` included.
        prompt_tokens_sum: prompt tokens of successes whose count is known.
        completion_tokens_sum: completion tokens of successes whose count is known.
        prompt_source_requests: successes per prompt-count source (``UNKNOWN``
            when the count is None).
        completion_source_requests: successes per completion-count source.
        completion_tokens_by_source: completion tokens of successes per source.
        requested_prompt_tokens_sum: the workload's prompt-length estimates
            ("requested ISL", before the chat template) over successes that had one.
        requested_prompt_tokens_count: successes that had such an estimate.
        ttft_s, ttfc_s, itl_s, tpot_s, e2e_s: histograms over successes
            (definitions in ``llmload.request.record``); ITL has every sample of
            ``RequestRecord.itl_samples_s``.
        dispatch_delay_s, ttft_from_schedule_s, e2e_from_schedule_s: open-loop
            successes only: the wait between the intended and the actual send,
            and TTFT/E2E measured from the intended send (coordinated
            omission made visible; guidellm's ``targeted_start``).
        ttft_with_connect_s: successes with a measured connection set-up:
            ``connect_s`` + TTFT, the convention of vLLM ``bench serve``,
            SGLang ``bench_serving`` and Locust (the timer starts before
            connecting); ``ttft_s`` starts at the send.
        read_lag_s: over every body read of finished requests that had a kernel
            receive stamp: how long before the stamp its oldest bytes may have
            arrived (events that piled up behind a late read share the newest
            segment's stamp), a bound of how far the times it gave are off;
            0 for a read of one event and nothing past it (its own stamp).
            How long bytes then waited for the client is no error and does
            not count (``llmload.net.transport``).
        request_lag_s: over finished requests with a kernel-stamped read or a
            timed send: the larger of the request's largest read lag and its
            send lag (``RequestRecord.send_lag_s``), which bounds how far any
            of its times (TTFT, ITL, E2E) can be off.
        lagged_requests: finished requests whose request lag exceeds
            ``REQUEST_LAG_LIMIT_S``.
        connect_s: over finished requests: time to have a connection ready
            before the send (connection set-up plus client delay; outside
            TTFT and E2E).
        unstamped_reads: body reads of finished requests timed by the
            monotonic clock alone (no kernel stamp).
        itl_kind_requests: successes with at least one ITL sample, per ITL kind.
        slo_met_requests: successes that met every ``--slo`` objective (goodput);
            failures never do.
        tokenizer_compared_requests: successes with both a server completion
            count and a local tokenizer count (a diagnostic of how they disagree).
        tokenizer_disagreed_requests: those of them where the two differ.
        tokenizer_abs_diff_tokens: sum of |server - tokenizer| over them.
        requested_compared_requests: successes with both a server prompt count
            and a requested prompt length (the server adds the chat template).
        requested_compared_tokens: sum of the requested lengths over them.
        requested_abs_diff_tokens: sum of |server - requested| over them.
        reasoning_tokens_sum: ``usage``'s reasoning tokens (part of the
            completion tokens) over successes whose server said; with
            ``reasoning_known_requests`` of them.
        hidden_reasoning_tokens_sum: reasoning tokens counted in usage but
            never streamed (``RequestRecord.hidden_reasoning_tokens``).
        reasoning_apart_tokens_sum: the part of ``reasoning_tokens_sum``
            that servers counted apart from the completion tokens (their
            reasoning exceeded their completion count, ``UsageNote.REASONING_APART``);
            answer tokens are ``answer_tokens``.
        cached_prompt_tokens_sum: prompt tokens served from the server's
            prefix cache over successes whose server said; with ``cached_prompt_tokens_known_requests``.
        usage_incremental_requests, usage_not_growing_requests,
        usage_below_events_requests, hidden_reasoning_requests,
        reasoning_unexplained_requests, reasoning_apart_requests,
        usage_above_text_requests, cached_above_prompt_requests,
        usage_detail_unreadable_requests: successes per ``UsageNote``.
        errors: failures and skipped requests grouped by category (at most
            ``MAX_ERROR_CATEGORIES``).
        first_send_unix: earliest send of a finished request; None if none.
        last_end_unix: latest end of a finished request; None if none.
        last_send_unix: latest send of a finished request; None if none (the
            send span gives the achieved send rate of open-loop runs).
        finish_reasons: finished requests per finish reason (``finish_label``;
            at most ``MAX_LABELS`` labels), failures included; none: not counted.
        short_checked_requests: successes that asked for an exact length
            (``RequestRecord.requested_output_tokens``) and whose completion
            count came from the server, logprobs or a tokenizer (a chunk count is only a lower bound).
        short_requests: those of them that ended with fewer tokens than asked.
        short_got_tokens, short_asked_tokens: completion tokens got and asked, summed over the short ones.
        no_finish_reason_requests: successful generation replies that named no
            finish reason (ended by ``[DONE]``, the end of the body or the
            API's own end event alone; ``""`` and null count as none).
        degenerate_repeated_requests, degenerate_same_text_requests: failures
            for degenerate output (``llmload.request.degenerate``), per kind.
        inputs_sum: embeddings: inputs of successful batches (one vector each).
        no_output_requests: successes that generate nothing (embeddings): their
            completion tokens are not applicable, neither known nor unknown.
    """

    requests_by_outcome: dict[Outcome, int] = counts(Outcome, wire="outcomes")
    prompt_tokens_sum: int = counter(top=True)
    completion_tokens_sum: int = counter(top=True)
    prompt_source_requests: dict[TokenSource, int] = counts(TokenSource, wire="prompt_sources")
    completion_source_requests: dict[TokenSource, int] = counts(TokenSource, wire="completion_sources")
    completion_tokens_by_source: dict[TokenSource, int] = counts(TokenSource, wire="completion_tokens_by_source")
    requested_prompt_tokens_sum: int = counter(top=True)
    requested_prompt_tokens_count: int = counter(top=True)
    ttft_s: LatencyHistogram = histogram("latency")
    ttfc_s: LatencyHistogram = histogram("latency")
    itl_s: LatencyHistogram = histogram("latency")
    tpot_s: LatencyHistogram = histogram("latency")
    e2e_s: LatencyHistogram = histogram("latency")
    dispatch_delay_s: LatencyHistogram = histogram("latency")
    ttft_from_schedule_s: LatencyHistogram = histogram("latency")
    e2e_from_schedule_s: LatencyHistogram = histogram("latency")
    ttft_with_connect_s: LatencyHistogram = histogram("latency")
    read_lag_s: LatencyHistogram = histogram("client")
    connect_s: LatencyHistogram = histogram("client")
    request_lag_s: LatencyHistogram = histogram("client")
    lagged_requests: int = counter()
    unstamped_reads: int = counter()
    itl_kind_requests: dict[ITLKind, int] = counts(ITLKind, wire="itl_kinds")
    slo_met_requests: int = counter()
    tokenizer_compared_requests: int = counter()
    tokenizer_disagreed_requests: int = counter()
    tokenizer_abs_diff_tokens: int = counter()
    requested_compared_requests: int = counter()
    requested_compared_tokens: int = counter()
    requested_abs_diff_tokens: int = counter()
    reasoning_tokens_sum: int = counter()
    reasoning_known_requests: int = counter()
    hidden_reasoning_tokens_sum: int = counter()
    cached_prompt_tokens_sum: int = counter()
    cached_prompt_tokens_known_requests: int = counter()
    usage_incremental_requests: int = counter()
    usage_not_growing_requests: int = counter()
    usage_below_events_requests: int = counter()
    hidden_reasoning_requests: int = counter()
    reasoning_unexplained_requests: int = counter()
    reasoning_apart_requests: int = counter()
    reasoning_apart_tokens_sum: int = counter()
    usage_above_text_requests: int = counter()
    cached_above_prompt_requests: int = counter()
    usage_detail_unreadable_requests: int = counter()
    errors: dict[str, ErrorGroup] = error_table()
    first_send_unix: float | None = earliest()
    last_end_unix: float | None = latest()
    last_send_unix: float | None = latest()
    # ── replies: finish reasons, replies short of an exact length, degenerate output ──
    finish_reasons: dict[str, int] = labels()
    short_checked_requests: int = counter()
    short_requests: int = counter()
    short_got_tokens: int = counter()
    short_asked_tokens: int = counter()
    degenerate_repeated_requests: int = counter()
    no_finish_reason_requests: int = counter()
    degenerate_same_text_requests: int = counter()
    inputs_sum: int = counter()
    no_output_requests: int = counter()
    # ── multi-turn sessions: per turn (label = turn number) and per finished session ──
    turn_requests: dict[str, int] = labels()
    turn_ttft_us_sum: dict[str, int] = labels()
    turn_ttft_known: dict[str, int] = labels()
    turn_prompt_tokens_sum: dict[str, int] = labels()
    turn_prompt_known: dict[str, int] = labels()
    sessions_completed: int = counter()
    sessions_failed: int = counter()
    session_turns_sum: int = counter()
    session_duration_s: LatencyHistogram = histogram("latency")

    # ── derived counts ──────────────────────────────────────────────────
    @property
    def succeeded(self) -> int:
        """Requests with outcome ``OK``."""
        return self.requests_by_outcome.get(Outcome.OK, 0)

    @property
    def failed(self) -> int:
        """Requests with a failure outcome (``EMPTY`` included)."""
        return sum(n for outcome, n in self.requests_by_outcome.items() if outcome.is_failure)

    @property
    def cancelled(self) -> int:
        """Requests still in flight when the run stopped (neither success nor failure)."""
        return self.requests_by_outcome.get(Outcome.CANCELLED, 0)

    @property
    def skipped(self) -> int:
        """Requests the client could not build, send or measure (neither success nor failure)."""
        return self.requests_by_outcome.get(Outcome.SKIPPED, 0)

    @property
    def finished(self) -> int:
        """Successes plus failures; cancelled requests are not finished."""
        return self.succeeded + self.failed

    @property
    def prompt_tokens_known_requests(self) -> int:
        """Successes whose prompt token count is known."""
        return self.succeeded - self.prompt_source_requests.get(TokenSource.UNKNOWN, 0)

    @property
    def completion_tokens_known_requests(self) -> int:
        """Successes whose completion token count is known."""
        return self.succeeded - self.completion_source_requests.get(TokenSource.UNKNOWN, 0) - self.no_output_requests

    @property
    def answer_tokens(self) -> int | None:
        """Completion tokens that are not reasoning (``RequestRecord.answer_tokens`` summed); never negative.

        Completion − the reasoning counted inside it: reasoning a server
        counted apart (more than its completion count) takes nothing off.
        None unless every success with a completion count also had a
        reasoning count. The one rule for results, summary, time series and Prometheus.
        """
        known = self.completion_tokens_known_requests
        if not known or self.reasoning_known_requests != known:
            return None
        return self.completion_tokens_sum - (self.reasoning_tokens_sum - self.reasoning_apart_tokens_sum)

    def histograms(self) -> dict[str, LatencyHistogram]:
        """Return the latency histograms by attribute name (not copies)."""
        return {name: getattr(self, name) for name in HISTOGRAM_NAMES}

    def is_empty(self) -> bool:
        """True when nothing was counted."""
        return not self.requests_by_outcome

    # ── recording ───────────────────────────────────────────────────────
    def add(self, record: RequestRecord, finished_at_unix: float | None = None, *, met_slo: bool = False) -> None:
        """Count one request; see ``LLMStats.add``."""
        outcome = record.outcome
        counts = self.requests_by_outcome
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome is _CANCELLED:
            return
        if outcome is _SKIPPED:
            error = record.error
            self.add_failure(error.category if error else outcome.value, None, error.message if error else "", 1)
            return
        self._extend_span(record, finished_at_unix)
        if record.turn is not None or record.session_turns is not None:
            self._add_session(record)
        if record.finish_reason and not record.finish_reason.isspace():  # "" names no reason
            self._add_finish_reason(record.finish_reason)
        elif outcome is _OK and record.endpoint != "embeddings":  # embeddings have no finish reason
            self.no_finish_reason_requests += 1
        lags = record.read_lags_s
        send_lag_s = record.send_lag_s
        if lags or send_lag_s is not None:
            if lags:
                self.read_lag_s.add_many(lags)
            worst = max(max(lags, default=0.0), send_lag_s or 0.0)
            self.request_lag_s.add(worst)
            if worst > REQUEST_LAG_LIMIT_S:
                self.lagged_requests += 1
        self.unstamped_reads += record.unstamped_reads
        if record.connect_s is not None:
            self.connect_s.add(record.connect_s)
        if outcome is _OK:
            self._add_success(record)
            if met_slo:
                self.slo_met_requests += 1
            return
        error = record.error
        if error is None:
            self.add_failure(outcome.value, None, "", 1)
        else:
            self.add_failure(error.category, error.status, error.message, 1)
            if error.category == DEGENERATE_REPEATED:
                self.degenerate_repeated_requests += 1
            elif error.category == DEGENERATE_SAME_TEXT:
                self.degenerate_same_text_requests += 1

    def _add_session(self, record: RequestRecord) -> None:
        """Count a request's turn (TTFT and prompt tokens of successes) and the session it ended, if any."""
        if record.turn is not None:
            turn = str(record.turn)
            _add_label(self.turn_requests, turn, 1)
            ttft = record.ttft_s if record.ok else None
            if ttft is not None:
                _add_label(self.turn_ttft_us_sum, turn, round(ttft * 1e6))
                _add_label(self.turn_ttft_known, turn, 1)
            prompt = record.prompt_tokens.value if record.ok else None
            if prompt is not None:
                _add_label(self.turn_prompt_tokens_sum, turn, prompt)
                _add_label(self.turn_prompt_known, turn, 1)
        if record.session_turns is not None:
            if record.session_failed:
                self.sessions_failed += 1
            else:
                self.sessions_completed += 1
            self.session_turns_sum += record.session_turns
            if record.session_duration_s is not None:
                self.session_duration_s.add(record.session_duration_s)

    def _add_finish_reason(self, reason: str) -> None:
        label = finish_label(reason)
        reasons = self.finish_reasons
        n = reasons.get(label)
        if n is None:
            reasons[label] = 1
            bound_labels(reasons)
        else:
            reasons[label] = n + 1

    def _add_short(self, record: RequestRecord) -> None:
        """Count a success that asked for an exact length: did it get it? (server or tokenizer counts only)."""
        asked = record.requested_output_tokens
        got = record.completion_tokens
        if asked is None or got.value is None or got.source not in _EXACT_SOURCES:
            return
        self.short_checked_requests += 1
        if got.value < asked:
            self.short_requests += 1
            self.short_got_tokens += got.value
            self.short_asked_tokens += asked

    def _extend_span(self, record: RequestRecord, finished_at_unix: float | None) -> None:
        started = record.started_at_unix
        if record.end_s is not None:
            end = started + record.end_s
        elif finished_at_unix is not None:
            end = finished_at_unix
        else:
            end = started + (record.last_token_s or record.headers_s or 0.0)
        if self.first_send_unix is None or started < self.first_send_unix:
            self.first_send_unix = started
        if self.last_end_unix is None or end > self.last_end_unix:
            self.last_end_unix = end
        if self.last_send_unix is None or started > self.last_send_unix:
            self.last_send_unix = started

    def _add_success(self, record: RequestRecord) -> None:
        prompt = record.prompt_tokens
        if prompt.value is None:
            _add_count(self.prompt_source_requests, _UNKNOWN_SOURCE, 1)
        else:
            _add_count(self.prompt_source_requests, prompt.source, 1)
            self.prompt_tokens_sum += prompt.value
        completion = record.completion_tokens
        if record.inputs is not None:  # embeddings: no output tokens (not applicable, not unknown)
            self.no_output_requests += 1
        elif completion.value is None:
            _add_count(self.completion_source_requests, _UNKNOWN_SOURCE, 1)
        else:
            _add_count(self.completion_source_requests, completion.source, 1)
            self.completion_tokens_sum += completion.value
            if completion.value:
                _add_count(self.completion_tokens_by_source, completion.source, completion.value)
        requested = record.requested_prompt_tokens
        if requested is not None:
            self.requested_prompt_tokens_sum += requested
            self.requested_prompt_tokens_count += 1
            if prompt.value is not None and prompt.source is _SERVER:
                self.requested_compared_requests += 1
                self.requested_compared_tokens += requested
                self.requested_abs_diff_tokens += abs(prompt.value - requested)
        client_count = record.client_completion_tokens
        if client_count is not None and completion.value is not None and completion.source is _SERVER:
            self.tokenizer_compared_requests += 1
            if client_count != completion.value:
                self.tokenizer_disagreed_requests += 1
                self.tokenizer_abs_diff_tokens += abs(client_count - completion.value)
        if record.reasoning_tokens is not None or record.cached_prompt_tokens is not None or record.usage_notes:
            self._add_usage_details(record)

        ttft = record.ttft_s
        if ttft is not None:
            self.ttft_s.add(ttft)
            if record.connect_s is not None:
                self.ttft_with_connect_s.add(record.connect_s + ttft)
        if record.ttfc_s is not None:
            self.ttfc_s.add(record.ttfc_s)
        tpot = record.tpot_s
        if tpot is not None:
            self.tpot_s.add(tpot)
        if record.end_s is not None:
            self.e2e_s.add(record.end_s)
        delay = record.dispatch_delay_s
        if delay is not None:
            self.dispatch_delay_s.add(delay)
            delay += record.connect_s or 0.0  # TTFT and E2E start after the connection is ready
            if ttft is not None:
                self.ttft_from_schedule_s.add(delay + ttft)
            if record.end_s is not None:
                self.e2e_from_schedule_s.add(delay + record.end_s)
        itl = record.itl_samples_s()
        if itl:
            self.itl_s.add_many(itl)
            _add_count(self.itl_kind_requests, record.itl_kind, 1)
        if record.requested_output_tokens is not None:
            self._add_short(record)
        if record.inputs is not None:
            self.inputs_sum += record.inputs

    def _add_usage_details(self, record: RequestRecord) -> None:
        """Count a success's reasoning and cached prompt tokens and its usage notes."""
        if record.reasoning_tokens is not None:
            self.reasoning_tokens_sum += record.reasoning_tokens
            self.reasoning_known_requests += 1
            if UsageNote.REASONING_APART in record.usage_notes:
                self.reasoning_apart_tokens_sum += record.reasoning_tokens
        self.hidden_reasoning_tokens_sum += record.hidden_reasoning_tokens
        if record.cached_prompt_tokens is not None:
            self.cached_prompt_tokens_sum += record.cached_prompt_tokens
            self.cached_prompt_tokens_known_requests += 1
        for note in record.usage_notes:
            name = _USAGE_NOTE_FIELDS[note]
            setattr(self, name, getattr(self, name) + 1)

    def add_failure(self, category: str, status: int | None, message: str, count: int) -> None:
        """Add ``count`` failures to ``category`` (folded into ``OVERFLOW_CATEGORY`` past the bound).

        Only the error table changes; ``requests_by_outcome`` is the caller's.
        """
        errors = self.errors
        group = errors.get(category)
        if group is None:
            group = errors[category] = ErrorGroup()
            needs_bound = len(errors) > MAX_ERROR_CATEGORIES
        else:
            needs_bound = False
        group.count += count
        group.status = _min_status(group.status, status)
        if message:
            group.add_sample(message)
        if needs_bound:
            self.bound_errors()

    def bound_errors(self) -> None:
        """Fold categories beyond ``MAX_ERROR_CATEGORIES`` into ``OVERFLOW_CATEGORY``.

        When there are more than ``MAX_ERROR_CATEGORIES`` categories, the
        ``MAX_ERROR_CATEGORIES - 1`` lexicographically smallest ones (other than
        ``OVERFLOW_CATEGORY``) are kept and all others are merged into
        ``OVERFLOW_CATEGORY``. A category kept for a union of failures is kept
        for every part of it, which makes this rule compatible with merging
        (the result depends only on the multiset of failures).
        """
        errors = self.errors
        if len(errors) <= MAX_ERROR_CATEGORIES:
            return
        named = sorted(c for c in errors if c != OVERFLOW_CATEGORY)
        overflow = errors.pop(OVERFLOW_CATEGORY, None) or ErrorGroup()
        for category in named[MAX_ERROR_CATEGORIES - 1 :]:
            overflow.merge_in(errors.pop(category))
        errors[OVERFLOW_CATEGORY] = overflow

    # ── merging ─────────────────────────────────────────────────────────
    def merge_in(self, other: EndpointStats) -> None:
        """Add everything counted in ``other`` to this object, in place (each field by its ``STATS_SCHEMA`` rule).

        The rules are grouped by kind once (``_MERGE_PLAN``), so the master's hot
        path does one tight loop per kind instead of testing every field's rule.
        """
        plan = _MERGE_PLAN
        for name in plan.sums:
            theirs = getattr(other, name)
            if theirs:
                setattr(self, name, getattr(self, name) + theirs)
        for name in plan.counts:
            theirs = getattr(other, name)
            if theirs:
                _merge_counts(getattr(self, name), theirs)
        for name in plan.histograms:
            theirs = getattr(other, name)
            if theirs.count:
                getattr(self, name).merge_in(theirs)
        for name in plan.labels:
            theirs = getattr(other, name)
            if theirs:
                mine_labels = getattr(self, name)
                _merge_counts(mine_labels, theirs)
                bound_labels(mine_labels)
        for name in plan.earliest:
            theirs = getattr(other, name)
            if theirs is not None:
                mine = getattr(self, name)
                if mine is None or theirs < mine:
                    setattr(self, name, theirs)
        for name in plan.latest:
            theirs = getattr(other, name)
            if theirs is not None:
                mine = getattr(self, name)
                if mine is None or theirs > mine:
                    setattr(self, name, theirs)
        for name in plan.errors:
            theirs = getattr(other, name)
            if theirs:
                self._merge_errors(theirs)

    def _merge_errors(self, other: dict[str, ErrorGroup]) -> None:
        errors = self.errors
        for category, group in other.items():
            mine = errors.get(category)
            if mine is None:
                errors[category] = group.copy()
            else:
                mine.merge_in(group)
        self.bound_errors()

    def merge(self, other: EndpointStats) -> EndpointStats:
        """Return the combination of both; neither input changes."""
        merged = self.copy()
        merged.merge_in(other)
        return merged

    def copy(self) -> EndpointStats:
        """Return an independent deep copy."""
        merged = EndpointStats()
        merged.merge_in(self)
        return merged


STATS_SCHEMA = schema_of(EndpointStats)
"""The merge rule and wire placement of every ``EndpointStats`` field, in declaration order."""


@dataclass(frozen=True, slots=True)
class _MergePlan:
    """``STATS_SCHEMA``'s field names grouped by merge kind (read by ``EndpointStats.merge_in``)."""

    sums: tuple[str, ...]
    counts: tuple[str, ...]
    histograms: tuple[str, ...]
    labels: tuple[str, ...]
    earliest: tuple[str, ...]
    latest: tuple[str, ...]
    errors: tuple[str, ...]


def _names(merge: Merge) -> tuple[str, ...]:
    return tuple(r.name for r in STATS_SCHEMA if r.merge is merge)


_MERGE_PLAN = _MergePlan(
    sums=_names(Merge.SUM),
    counts=_names(Merge.COUNTS),
    histograms=_names(Merge.HISTOGRAM),
    labels=_names(Merge.LABELS),
    earliest=_names(Merge.EARLIEST),
    latest=_names(Merge.LATEST),
    errors=_names(Merge.ERRORS),
)

LATENCY_HISTOGRAM_NAMES = tuple(r.name for r in STATS_SCHEMA if r.group == "latency")
"""Attribute names of the latency histograms of ``EndpointStats`` (the results' ``latency``)."""

CLIENT_HISTOGRAM_NAMES = tuple(r.name for r in STATS_SCHEMA if r.group == "client")
"""Histograms of the client's own delays (the results' ``client``), over every finished request."""

HISTOGRAM_NAMES = LATENCY_HISTOGRAM_NAMES + CLIENT_HISTOGRAM_NAMES
"""Attribute names of every histogram of ``EndpointStats``."""


class LLMStats:
    """Per-(endpoint, model) statistics of a run or of one worker's delta.

    Mutable through ``add``/``add_cancelled``/``merge_in``; ``merge`` is pure.
    Keys exist only once something was counted for them.
    """

    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        """Create empty statistics; prefer ``LLMStats.empty()``."""
        self._by_key: dict[StatsKey, EndpointStats] = {}

    @classmethod
    def empty(cls) -> LLMStats:
        """Return statistics with nothing counted (the identity of ``merge``)."""
        return cls()

    @classmethod
    def from_endpoints(cls, items: Iterable[tuple[StatsKey, EndpointStats]], *, adopt: bool = False) -> LLMStats:
        """Build statistics from ``((endpoint, model), EndpointStats)`` pairs.

        Pairs with the same key are merged; empty ``EndpointStats`` are dropped.
        The ``EndpointStats`` are copied, unless ``adopt``: then the first of
        each key is kept as it is (the caller hands it over and must not use it
        again; the wire decoder does, to save a copy per report).
        """
        stats = cls()
        by_key = stats._by_key
        for key, endpoint_stats in items:
            if endpoint_stats.is_empty():
                continue
            if adopt and key not in by_key:
                by_key[key] = endpoint_stats
            else:
                stats._slot(key).merge_in(endpoint_stats)
        return stats

    def _slot(self, key: StatsKey) -> EndpointStats:
        slot = self._by_key.get(key)
        if slot is None:
            slot = self._by_key[key] = EndpointStats()
        return slot

    def add(self, record: RequestRecord, finished_at_unix: float | None = None, *, met_slo: bool = False) -> None:
        """Count one finished (or cancelled) request.

        Args:
            record: the request; its outcome decides what is counted (see the
                module docstring).
            finished_at_unix: wall-clock time the request ended, used for the
                run span when the record has no ``end_s`` (failures that never
                completed). Default: send time plus the last known timing.
            met_slo: the request met every ``--slo`` objective
                (``llmload.settings.goodput.SLO.met_by``); counted for successes only.

        Raises:
            ValueError: a timing in the record is negative or not finite.
        """
        key = (record.endpoint, record.model)
        slot = self._by_key.get(key)
        if slot is None:
            slot = self._by_key[key] = EndpointStats()
        slot.add(record, finished_at_unix, met_slo=met_slo)

    def add_cancelled(self, endpoint: str, model: str, n: int = 1) -> None:
        """Count ``n`` requests still in flight when the run stopped (neither success nor failure).

        Raises:
            ValueError: ``n`` is negative.
        """
        if n < 0:
            raise ValueError(f"cancelled request count must be >= 0, got {n}")
        if n:
            _add_count(self._slot((endpoint, model)).requests_by_outcome, Outcome.CANCELLED, n)

    def merge_in(self, other: LLMStats) -> None:
        """Add everything counted in ``other`` to this object, in place (the master's hot path)."""
        for key, endpoint_stats in other._by_key.items():
            self._slot(key).merge_in(endpoint_stats)

    def merge_outcomes_and_histograms_in(self, other: LLMStats, histograms: Iterable[str]) -> None:
        """Add ``other``'s requests by outcome and its histograms named ``histograms`` (attribute names), in place.

        Nothing else of ``other`` is added: for a view that reads only these
        (the exporter's live window), at a fraction of ``merge_in``'s cost.
        """
        for key, theirs in other._by_key.items():
            mine = self._slot(key)
            _merge_counts(mine.requests_by_outcome, theirs.requests_by_outcome)
            for name in histograms:
                hist = getattr(theirs, name)
                if hist.count:
                    getattr(mine, name).merge_in(hist)

    def merge(self, other: LLMStats) -> LLMStats:
        """Return the combination of both; neither input changes."""
        merged = LLMStats()
        merged.merge_in(self)
        merged.merge_in(other)
        return merged

    def is_empty(self) -> bool:
        """True when nothing was counted."""
        return not self._by_key

    def keys(self) -> list[StatsKey]:
        """Return the ``(endpoint, model)`` keys, sorted."""
        return sorted(self._by_key)

    def items(self) -> Iterator[tuple[StatsKey, EndpointStats]]:
        """Iterate over ``(key, EndpointStats)`` sorted by key (not copies)."""
        for key in sorted(self._by_key):
            yield key, self._by_key[key]

    def get(self, endpoint: str, model: str) -> EndpointStats:
        """Return a copy of the statistics for one key (empty if never counted)."""
        slot = self._by_key.get((endpoint, model))
        return slot.copy() if slot is not None else EndpointStats()

    def total(self) -> EndpointStats:
        """Return all keys merged into one new ``EndpointStats``."""
        merged = EndpointStats()
        for endpoint_stats in self._by_key.values():
            merged.merge_in(endpoint_stats)
        return merged

    def latency_keys(self, *, generation_only: bool = False) -> list[StatsKey]:
        """The keys the run-level latency covers, sorted: the generation keys, or every key when there are none.

        An embeddings call's E2E is one round trip with nothing generated; pooled
        with chat replies' E2E it would make the run's E2E quantiles describe
        neither. A run that mixes them (``locustfiles/mixed.py``) therefore
        reports run-level latency over its generation requests, and the
        embeddings' latency per key; a run of embeddings alone, over them.
        ``generation_only``: the run is known to generate (an interval of a
        mixed run in which only embeddings finished): the generation keys, maybe none.
        """
        keys = self.keys()
        generating = [key for key in keys if key[0] not in NO_OUTPUT_ENDPOINTS]
        return generating if generating or generation_only else keys

    def latency_total(self, *, generation_only: bool = False) -> EndpointStats:
        """The keys of ``latency_keys`` merged into one new ``EndpointStats`` (read its latency histograms)."""
        merged = EndpointStats()
        for key in self.latency_keys(generation_only=generation_only):
            merged.merge_in(self._by_key[key])
        return merged

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LLMStats):
            return NotImplemented
        return self._by_key == other._by_key

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = ", ".join(f"{e}/{m}: {s.finished} finished" for (e, m), s in self.items())
        return f"LLMStats({parts})"
