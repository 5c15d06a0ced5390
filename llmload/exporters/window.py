"""The live view every live output reads (``RunView``), and its sliding window over recent deltas.

``RunView`` is what the master (or the single process) knows at one instant:
merged statistics, the live window and the runner's gauges. Live outputs
(today the Prometheus collector) read it and nothing else.

The master (or the single process) gets its statistics as deltas: each
worker ships what it measured since its previous shipment (``llmload.run.wire``),
and a standalone runner hands over its recent records every half second. The
window merges each delta, as it arrives, into the statistics of its arrival
slot (half a second), so a scrape merges at most ``length_s / SLOT_S + 1``
slots whatever the number of workers, and live quantiles come from the same
mergeable histograms (and the same quantile rule) as the end-of-run report.

Rates are not divided by ``length_s``: a delta arriving at ``t`` covers the
time since its source's previous delta, so the deltas of one source that are
in the window cover ``(covered_from, last arrival]``, where ``covered_from``
is the arrival of the newest delta that already left the window (or the run
start). Each source's rate is its tokens (or successes) over its own covered
span; the window's rate is the sum over sources. This keeps the rate steady
whatever the shipping cadence (Locust's own 3 s reports or llmload's 0.5 s
live reports), instead of jumping by a third whenever a report enters or
leaves a fixed 10 s window.

Definitions follow the results (``llmload.exporters.results``): output tokens
are completion tokens of successful requests with a known count; requests are
successful requests.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import LLMStats, StatsKey

__all__ = [
    "DEFAULT_WINDOW_S",
    "SLOT_S",
    "WINDOW_HISTOGRAM_NAMES",
    "RunView",
    "SlidingWindow",
    "WindowView",
    "live_send_delay_s",
    "live_send_offset_s",
    "saturation_read_lag",
    "window_part",
]

DEFAULT_WINDOW_S = 10.0
"""Length of the live window in seconds (documented in the README)."""


@dataclass(frozen=True, slots=True)
class WindowView:
    """What the window holds at one moment.

    Attributes:
        length_s: configured window length in seconds.
        stats: every delta that arrived within the window, merged: its
            requests by outcome and its ``WINDOW_HISTOGRAM_NAMES`` histograms
            (what the live gauges read; nothing else is kept).
        output_tokens_per_s: per ``(endpoint, model)``, completion tokens of
            successes per second over the time the deltas cover; keys without
            a measurable span are absent.
        requests_per_s: per ``(endpoint, model)``, successful requests per
            second, same span rule.
    """

    length_s: float
    stats: LLMStats
    output_tokens_per_s: Mapping[StatsKey, float]
    requests_per_s: Mapping[StatsKey, float]


_GOLDEN_FRACTION = (math.sqrt(5.0) - 1.0) / 2.0  # the golden ratio's fraction: the most even spread of 0, 1, 2, ...


def live_send_offset_s(worker_index: int, interval_s: float) -> float:
    """Where in each ``interval_s`` of the wall clock the worker of index ``worker_index`` sends its live delta.

    Workers spread over the interval (the golden-ratio sequence: the first N
    indexes lie nearly evenly whatever N), so a master's workers never all send at
    once: a burst of N reports holds the master's loop for N merges, and every
    heartbeat behind them waits. Each worker keeps its offset, so its counters
    reach the master with a constant lag, which ``rate()`` cancels out.

    Returns:
        Seconds in ``[0, interval_s)``.
    """
    return (worker_index * _GOLDEN_FRACTION) % 1.0 * interval_s


def live_send_delay_s(now_unix: float, worker_index: int, interval_s: float) -> float:
    """Seconds from ``now_unix`` to the worker's next live send (``live_send_offset_s``), in ``(0, interval_s]``."""
    offset_s = live_send_offset_s(worker_index, interval_s)
    return interval_s - (now_unix - offset_s) % interval_s


SLOT_S = 0.5
"""Granularity of the window in seconds: deltas are merged per slot of arrival time as they arrive."""

WINDOW_HISTOGRAM_NAMES = ("ttft_s", "itl_s", "tpot_s", "e2e_s", "read_lag_s", "request_lag_s")
"""The histograms the window keeps (``EndpointStats`` attributes): what the live gauges read."""

_Entry = tuple[Any, ...]  # (arrived_s, slot, source, then key id, tokens, successes for each key counted)


def _bump(into: dict[int, int], key_id: int, n: int) -> None:
    left = into.get(key_id, 0) + n
    if left:
        into[key_id] = left
    else:
        into.pop(key_id, None)


def _add_counts(state: list[Any], entry: _Entry, sign: int) -> None:
    """Add (``sign`` 1) or take out (-1) one delta's counts from its source's sums."""
    sum_tokens, sum_successes = state[2], state[3]
    for i in range(3, len(entry), 3):
        key_id, tokens, successes = entry[i], entry[i + 1], entry[i + 2]
        if tokens:
            _bump(sum_tokens, key_id, sign * tokens)
        if successes:
            _bump(sum_successes, key_id, sign * successes)


def window_part(stats: LLMStats) -> LLMStats:
    """What the window keeps of ``stats``: its requests by outcome and ``WINDOW_HISTOGRAM_NAMES`` (a new object)."""
    part = LLMStats.empty()
    part.merge_outcomes_and_histograms_in(stats, WINDOW_HISTOGRAM_NAMES)
    return part


class SlidingWindow:
    """Deltas of the last ``length_s`` seconds, per source (worker id or ``"local"``), kept incrementally.

    Each delta is merged, as it arrives, into the statistics of its arrival
    slot (``SLOT_S`` seconds of the monotonic clock): its requests by outcome
    and the ``WINDOW_HISTOGRAM_NAMES`` histograms, what the live gauges read.
    Each delta's token and success counts are kept in one queue in arrival
    order, and each source's running sums beside it. A delta is in the window
    while its slot starts after ``now - length_s`` (so a delta leaves at most
    ``SLOT_S`` early); deltas leave from the head of the queue, each once.
    A view merges the window's slots (at most ``length_s / SLOT_S + 1`` of
    them) and reads each source's sums: its cost does not grow with the
    number of deltas, and only by a few dictionary reads per source.

    The queue holds flat tuples of numbers and strings (keys by a small id),
    which the garbage collector stops tracking the first time it sees them:
    a full collection does not walk them, however many workers report.

    Not thread-safe; under gevent every caller runs on the hub, and neither
    ``add`` nor ``view`` yields.
    """

    __slots__ = (
        "_clock",
        "_covered_from_s",
        "_key_ids",
        "_keys",
        "_length_s",
        "_queue",
        "_slots",
        "_sources",
        "_started_s",
    )

    def __init__(self, length_s: float = DEFAULT_WINDOW_S, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Create an empty window whose coverage starts now.

        Args:
            length_s: window length in seconds.
            clock: monotonic clock in seconds (injected by tests).

        Raises:
            ValueError: ``length_s`` is not a positive finite number.
        """
        if not 0.0 < length_s < float("inf"):
            raise ValueError(f"window length must be a positive number of seconds, got {length_s!r}; e.g. 10.0")
        self._length_s = length_s
        self._clock = clock
        self._slots: deque[tuple[int, LLMStats]] = deque()
        # every delta in the window, oldest first, as one flat tuple of numbers and strings (``_Entry``)
        self._queue: deque[_Entry] = deque()
        # per source with deltas in the window: [deltas, last arrival, token sums, success sums] (sums by key id)
        self._sources: dict[str, list[Any]] = {}
        self._covered_from_s: dict[str, float] = {}
        self._key_ids: dict[StatsKey, int] = {}
        self._keys: list[StatsKey] = []
        self._started_s = clock()

    @property
    def length_s(self) -> float:
        """Window length in seconds."""
        return self._length_s

    def reset(self) -> None:
        """Forget every delta; coverage of every source starts now (call at each run start)."""
        self._slots.clear()
        self._queue.clear()
        self._sources.clear()
        self._covered_from_s.clear()
        self._started_s = self._clock()

    def _first_kept_slot(self, now_s: float) -> int:
        """The oldest slot still in the window: the first that starts after ``now - length``."""
        return math.floor((now_s - self._length_s) / SLOT_S) + 1

    def _key_id(self, key: StatsKey) -> int:
        key_id = self._key_ids.get(key)
        if key_id is None:
            key_id = self._key_ids[key] = len(self._keys)
            self._keys.append(key)
        return key_id

    def add(self, delta: LLMStats, source: str) -> None:
        """Record ``delta``, which covers ``source``'s time since its previous delta.

        ``delta`` is merged (not kept). Empty deltas count too (they extend the covered span).
        """
        now_s = self._clock()
        slot = math.floor(now_s / SLOT_S)
        entry: list[Any] = [now_s, slot, source]
        if not delta.is_empty():
            slots = self._slots
            if not slots or slots[-1][0] != slot:
                if slots:  # the previous slot is complete: each view merges its histograms, as one pair each
                    for _, closed in slots[-1][1].items():
                        for name in WINDOW_HISTOGRAM_NAMES:
                            getattr(closed, name).compact()
                slots.append((slot, LLMStats.empty()))
            slots[-1][1].merge_outcomes_and_histograms_in(delta, WINDOW_HISTOGRAM_NAMES)
            for key, endpoint_stats in delta.items():
                tokens, successes = endpoint_stats.completion_tokens_sum, endpoint_stats.succeeded
                if tokens or successes:
                    entry += (self._key_id(key), tokens, successes)
        flat = tuple(entry)
        self._queue.append(flat)
        state = self._sources.get(source)
        if state is None:
            state = self._sources[source] = [0, now_s, {}, {}]
        state[0] += 1
        state[1] = now_s
        _add_counts(state, flat, 1)
        self._drop_old(self._first_kept_slot(now_s))

    def view(self) -> WindowView:
        """Merge the window's slots and read each source's covered span and sums.

        Cost: one ``LLMStats.merge_in`` per slot (at most ``length_s / SLOT_S + 1``)
        plus a few dictionary reads per source.
        """
        now_s = self._clock()
        first = self._first_kept_slot(now_s)
        slots = self._slots
        while slots and slots[0][0] < first:
            slots.popleft()
        self._drop_old(first)
        merged = LLMStats.empty()
        for _, stats in slots:
            merged.merge_in(stats)
        tokens_per_s: dict[int, float] = {}
        requests_per_s: dict[int, float] = {}
        covered_from_s = self._covered_from_s
        started_s = self._started_s
        for source, (_, last_s, sum_tokens, sum_successes) in self._sources.items():
            span_s = last_s - covered_from_s.get(source, started_s)
            if span_s <= 0.0:
                continue
            for key_id, n in sum_tokens.items():
                tokens_per_s[key_id] = tokens_per_s.get(key_id, 0.0) + n / span_s
            for key_id, n in sum_successes.items():
                requests_per_s[key_id] = requests_per_s.get(key_id, 0.0) + n / span_s
        keys = self._keys
        return WindowView(
            self._length_s,
            merged,
            {keys[key_id]: rate for key_id, rate in tokens_per_s.items()},
            {keys[key_id]: rate for key_id, rate in requests_per_s.items()},
        )

    def _drop_old(self, first_slot: int) -> None:
        """Take out of the window every delta whose slot is before ``first_slot`` (the queue's head)."""
        queue = self._queue
        sources = self._sources
        while queue and queue[0][1] < first_slot:
            entry = queue.popleft()
            source = entry[2]
            self._covered_from_s[source] = entry[0]
            state = sources[source]
            state[0] -= 1
            if not state[0]:
                del sources[source]
            else:
                _add_counts(state, entry, -1)


@dataclass(frozen=True, slots=True)
class RunView:
    """Everything one scrape reports, read from the master's state at scrape time.

    Attributes:
        stats: merged statistics of the current (or last) run; read, never modified.
        window: the live window, or None when there is none (no window gauges).
        users: simulated users running now, over all workers.
        in_flight_requests: requests sent and not finished, over all workers
            (workers' counts are as of their latest report).
        workers: connected workers (0 for a single process).
        run_id: identifier of the current run ("" before the first run).
        host: target base URL.
        model: served model name ("" before it is known).
        version: llmload version.
        started_at_unix: wall-clock start of the run; None before the first run.
        client_saturated: ``llmload.exporters.sections.client_saturated``: CPU over the run so far, read
            lag over the live window (``saturation_read_lag``; the whole run once it ended).
        lost_workers: workers lost mid-run.
    """

    stats: LLMStats
    window: WindowView | None
    users: int
    in_flight_requests: int
    workers: int
    run_id: str
    host: str
    model: str
    version: str
    client_saturated: bool = False
    lost_workers: int = 0
    started_at_unix: float | None = None


def saturation_read_lag(
    stats: LLMStats, window: WindowView | None, *, ended: bool, name: str = "read_lag_s"
) -> LatencyHistogram:
    """The read lags (``name="request_lag_s"``: the request lags) the live ``llmload_client_saturated`` gauge judges.

    See ``sections.client_saturated``. While the run goes on: those of the live window (its last
    ``DEFAULT_WINDOW_S`` s), so one late read does not hold the gauge at 1 for the rest of the run.
    Once it ended (or without a window): the whole run's, as the results' ``client_saturated``.
    """
    total = stats.total() if ended or window is None else window.stats.total()
    lags: LatencyHistogram = getattr(total, name)
    return lags
