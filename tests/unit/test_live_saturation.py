"""The live ``llmload_client_saturated`` gauge follows the live window's read lags; the results keep the whole run."""

from __future__ import annotations

from llmload.aggregate.stats import LLMStats
from llmload.exporters.sections import client_saturated
from llmload.exporters.window import DEFAULT_WINDOW_S, SlidingWindow, saturation_read_lag
from llmload.request.record import RequestRecord, TokenCount, TokenSource


def _stats(*lags_s: float, send_lag_s: float | None = None) -> LLMStats:
    stats = LLMStats.empty()
    stats.add(
        RequestRecord(
            endpoint="completions",
            model="m",
            started_at_unix=1000.0,
            token_times_s=[0.05, 0.06],
            first_content_s=0.05,
            end_s=0.07,
            completion_tokens=TokenCount(2, TokenSource.SERVER),
            read_lags_s=list(lags_s),
            send_lag_s=send_lag_s,
        )
    )
    return stats


def test_one_late_read_sets_the_live_gauge_only_while_it_is_in_the_window():
    """Issue 19: a read 20 ms late saturates the live gauge for the window's length, not for the rest of the run."""
    now = [0.0]
    window = SlidingWindow(clock=lambda: now[0])
    run = _stats(0.020, 0.0001)  # one read 20 ms late (> the 10 ms per-request limit)
    window.add(run, "local")
    assert client_saturated(0.0, saturation_read_lag(run, window.view(), ended=False))

    now[0] = DEFAULT_WINDOW_S + 2.0  # the late read has left the window; recent reads are prompt
    recent = _stats(0.0001, 0.0002)
    window.add(recent, "local")
    run.merge_in(recent)
    live = saturation_read_lag(run, window.view(), ended=False)
    assert live.count == 2
    assert live.max == 0.0002
    assert not client_saturated(0.0, live)
    # the whole run still had the late read: the results (and the gauge once the run ended) say so
    assert client_saturated(0.0, saturation_read_lag(run, window.view(), ended=True))
    assert client_saturated(0.0, saturation_read_lag(run, None, ended=False))


def test_a_send_the_kernel_held_sets_the_live_gauge_by_the_request_lags():
    """Issue 19: a request whose hand-over to the kernel took 12 ms (reads on time) saturates the gauge too."""
    now = [0.0]
    window = SlidingWindow(clock=lambda: now[0])
    run = _stats(0.0001, 0.0002, send_lag_s=0.012)
    window.add(run, "local")
    reads = saturation_read_lag(run, window.view(), ended=False)
    requests = saturation_read_lag(run, window.view(), ended=False, name="request_lag_s")
    assert reads.max == 0.0002
    assert requests.max is not None
    assert requests.max > 0.0119
    assert not client_saturated(0.0, reads)  # judged by the reads alone, it would pass
    assert client_saturated(0.0, reads, requests)
