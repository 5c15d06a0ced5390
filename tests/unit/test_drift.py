"""Drift: the first stretch of a run against its last, from constructed series (``llmload.exporters.drift``)."""

from __future__ import annotations

import pytest

from llmload.aggregate.series import IntervalSeries
from llmload.aggregate.stats import LLMStats
from llmload.exporters.console import summary_lines
from llmload.exporters.drift import MIN_INTERVALS, MIN_SAMPLES, TOLERANCES, drift_section
from llmload.exporters.results import RunOutcome, build_results
from llmload.testing import failed_record, ok_record

INTERVAL_S = 10.0


def _interval(ttft_s: float = 0.1, *, n: int = MIN_SAMPLES, failed: int = 0, tokens: int = 3) -> LLMStats:
    """``n`` successes with TTFT ``ttft_s`` and ``tokens`` completion tokens each, plus ``failed`` failures."""
    stats = LLMStats.empty()
    for _ in range(n):
        stats.add(ok_record((ttft_s, ttft_s + 0.01), end_s=ttft_s + 0.02, completion_tokens=tokens))
    for _ in range(failed):
        stats.add(failed_record())
    return stats


def _series(intervals: list[LLMStats]) -> IntervalSeries:
    series = IntervalSeries.empty()
    for index, stats in enumerate(intervals):
        series.slot(index).merge_in(stats)
    return series


def _rss(values: list[int]) -> dict[int, dict[str, float | int | None]]:
    return {i: {"client_rss_bytes": v} for i, v in enumerate(values)}


def test_drift_steady_run_flags_nothing():
    drift = drift_section(_series([_interval() for _ in range(20)]), INTERVAL_S, 200.0, _rss([100 << 20] * 20))
    assert drift["judged"] is True
    assert drift["note"] is None
    assert (drift["intervals"], drift["stretch_intervals"]) == (20, 2)
    assert drift["first"] == {"from_s": 0.0, "to_s": 20.0}
    assert drift["last"] == {"from_s": 180.0, "to_s": 200.0}
    assert drift["flagged"] == []
    assert set(drift["metrics"]) == set(TOLERANCES)
    tok = drift["metrics"]["output_tokens_per_s"]
    assert tok["first"] == tok["last"] == pytest.approx(2 * MIN_SAMPLES * 3 / 20.0)
    assert tok["change"] == pytest.approx(0.0)


def test_drift_latency_rise_beyond_25_percent_is_flagged_and_within_is_not():
    slow = drift_section(_series([_interval(0.1)] * 18 + [_interval(0.2)] * 2), INTERVAL_S, 200.0)
    ttft = slow["metrics"]["ttft_p99_s"]
    assert ttft["first"] == pytest.approx(0.1, rel=0.01)
    assert ttft["last"] == pytest.approx(0.2, rel=0.01)
    assert ttft["change"] == pytest.approx(1.0, rel=0.03)
    assert ttft["flagged"] is True
    assert "ttft_p99_s" in slow["flagged"]
    mild = drift_section(_series([_interval(0.1)] * 18 + [_interval(0.115)] * 2), INTERVAL_S, 200.0)
    assert mild["metrics"]["ttft_p99_s"]["flagged"] is False


def test_drift_p99_is_an_exact_merge_of_the_stretch_not_an_average_of_interval_p99s():
    # first stretch: interval 0 all fast, interval 1 with 2 slow requests in 100 (its own p99 is slow);
    # merged, 2 in 200 are slow and the p99 is fast; an average of the intervals' p99 would be 0.55 s
    mixed = _interval(0.1, n=98)
    mixed.merge_in(_interval(1.0, n=2))
    assert mixed.total().ttft_s.quantile(0.99) == pytest.approx(1.0, rel=0.01)
    drift = drift_section(_series([_interval(0.1), mixed] + [_interval(0.1)] * 18), INTERVAL_S, 200.0)
    first = drift["metrics"]["ttft_p99_s"]["first"]
    assert first == pytest.approx(0.1, rel=0.01)


def test_drift_tokens_per_s_fall_and_error_ratio_rise_are_flagged():
    intervals = [_interval(tokens=4)] * 18 + [_interval(tokens=2, failed=10)] * 2
    drift = drift_section(_series(intervals), INTERVAL_S, 200.0)
    tok, errors = drift["metrics"]["output_tokens_per_s"], drift["metrics"]["error_ratio"]
    assert tok["change"] == pytest.approx(-0.5)
    assert tok["flagged"] is True
    assert errors["relative"] is False
    assert errors["first"] == 0.0
    assert errors["change"] == pytest.approx(10 / 110)
    assert errors["flagged"] is True
    assert drift["flagged"] == ["output_tokens_per_s", "error_ratio"]


def test_drift_error_ratio_within_005_absolute_is_not_flagged():
    drift = drift_section(_series([_interval()] * 18 + [_interval(failed=4)] * 2), INTERVAL_S, 200.0)
    assert drift["metrics"]["error_ratio"]["change"] == pytest.approx(4 / 104)
    assert drift["metrics"]["error_ratio"]["flagged"] is False


def test_drift_client_rss_growth_beyond_50_percent_is_flagged_from_the_largest_sample():
    rss = [100 << 20] * 10 + [120 << 20] * 8 + [140 << 20, 160 << 20]
    drift = drift_section(_series([_interval()] * 20), INTERVAL_S, 200.0, _rss(rss))
    metric = drift["metrics"]["client_rss_bytes"]
    assert (metric["first"], metric["last"]) == (float(100 << 20), float(160 << 20))
    assert metric["samples"] == [2, 2]
    assert metric["flagged"] is True


def test_drift_without_rss_samples_is_unknown_and_not_flagged():
    metric = drift_section(_series([_interval()] * 20), INTERVAL_S, 200.0)["metrics"]["client_rss_bytes"]
    assert (metric["first"], metric["last"], metric["change"], metric["flagged"]) == (None, None, None, False)


def test_drift_latency_on_few_samples_is_not_flagged():
    drift = drift_section(_series([_interval(0.1, n=5)] * 18 + [_interval(0.5, n=5)] * 2), INTERVAL_S, 200.0)
    ttft = drift["metrics"]["ttft_p99_s"]
    assert ttft["change"] == pytest.approx(4.0, rel=0.05)
    assert ttft["samples"] == [10, 10]
    assert ttft["enough_samples"] is False
    assert ttft["flagged"] is False


def test_drift_short_run_is_too_short_to_judge():
    drift = drift_section(_series([_interval()] * 5), INTERVAL_S, 50.0)
    assert drift["judged"] is False
    assert drift["metrics"] == {}
    assert drift["first"] is None
    assert drift["note"].startswith(f"too short to judge: 5 interval(s) of 10 s, drift needs {MIN_INTERVALS}")


def test_drift_leaves_out_a_last_interval_cut_short_by_the_stop():
    # 10 whole intervals and 2 s of an 11th: the stretches are intervals 0 and 9, the 11th is left out
    intervals = [_interval()] * 10 + [_interval(5.0)]
    drift = drift_section(_series(intervals), INTERVAL_S, 102.0)
    assert drift["intervals"] == 10
    assert drift["last"] == {"from_s": 90.0, "to_s": 100.0}
    assert drift["flagged"] == []
    kept = drift_section(_series(intervals), INTERVAL_S, 106.0)  # more than half of it ran: kept
    assert kept["intervals"] == 11
    assert kept["metrics"]["ttft_p99_s"]["flagged"] is True


def test_drift_rates_of_a_kept_last_interval_cut_short_use_its_own_length():
    # the 11th interval ran 6 s of its 10 at the same pace (0.6 of the requests): output tok/s did not fall
    intervals = [_interval()] * 10 + [_interval(n=MIN_SAMPLES * 6 // 10)]
    drift = drift_section(_series(intervals), INTERVAL_S, 106.0)
    assert drift["last"] == {"from_s": 100.0, "to_s": 106.0}  # not past the run's end
    tok = drift["metrics"]["output_tokens_per_s"]
    assert tok["last"] == pytest.approx(tok["first"])
    assert tok["flagged"] is False
    assert "output_tokens_per_s" not in drift["flagged"]


def test_drift_relative_change_from_zero_is_unknown():
    intervals = [_interval(n=0, failed=5)] * 18 + [_interval()] * 2
    tok = drift_section(_series(intervals), INTERVAL_S, 200.0)["metrics"]["output_tokens_per_s"]
    assert tok["first"] == 0.0
    assert tok["change"] is None
    assert tok["flagged"] is False


def test_drift_summary_block_flags_and_too_short_note():
    flagged = drift_section(_series([_interval(0.1)] * 18 + [_interval(0.3)] * 2), INTERVAL_S, 200.0)
    lines = summary_lines(build_results(RunOutcome(LLMStats.empty(), drift=flagged)))
    text = "\n".join(lines)
    assert "--- Drift (first vs last 10%)" in text
    assert "Stretches (s):                          0-20 vs 180-200" in text
    ttft_line = next(line for line in lines if line.startswith("TTFT P99 (ms):"))
    assert "100." in ttft_line
    assert "300." in ttft_line
    assert ttft_line.endswith("(tolerance +25%)  DRIFT")
    assert "WARNING: drift beyond tolerance: ttft_p99_s" in text
    short = drift_section(_series([_interval()] * 3), INTERVAL_S, 30.0)
    short_text = "\n".join(summary_lines(build_results(RunOutcome(LLMStats.empty(), drift=short))))
    # too short to judge: the results say so (note), the summary has no line that reads like a fault
    assert "Drift" not in short_text
    assert short["note"].startswith("too short to judge: 3 interval(s)")


def test_drift_stretches_cut_by_the_stop_are_rounded_like_the_others():
    """Issue 24: a last stretch cut by the stop printed as ``22-23.9859`` beside ``0-2``."""
    intervals = [_interval(0.1)] * 20
    for end_s, shown in ((195.98594, "0-20 vs 180-196"), (195.5123, "0.0-20.0 vs 180.0-195.5")):
        drift = drift_section(_series(intervals), INTERVAL_S, end_s)
        text = "\n".join(summary_lines(build_results(RunOutcome(LLMStats.empty(), drift=drift))))
        line = next(line for line in text.splitlines() if line.startswith("Stretches (s):"))
        assert line.endswith(f" {shown}"), line


def _embeddings_interval(n: int = MIN_SAMPLES) -> LLMStats:
    stats = LLMStats.empty()
    for _ in range(n):
        stats.add(ok_record((), end_s=0.05, endpoint="embeddings", prompt_tokens=12, completion_tokens=0,
                            inputs=4, streamed=False))  # fmt: skip
    return stats


def test_drift_output_tokens_per_s_of_embeddings_alone_is_unknown_not_zero():
    """Issue 24: embeddings generate no output tokens; drift showed their output tok/s as 0 in both stretches."""
    drift = drift_section(_series([_embeddings_interval() for _ in range(20)]), INTERVAL_S, 200.0)
    tok = drift["metrics"]["output_tokens_per_s"]
    assert (tok["first"], tok["last"], tok["change"], tok["samples"]) == (None, None, None, [0, 0])
    assert tok["flagged"] is False
    results = build_results(RunOutcome(LLMStats.empty(), drift=drift))
    line = next(line for line in summary_lines(results) if line.startswith("Output tok/s:"))
    assert line.endswith("n/a -> n/a  n/a (tolerance -25%)  (no samples)")


def test_drift_output_tokens_per_s_of_a_mixed_run_counts_the_generating_successes():
    mixed = []
    for _ in range(20):
        interval = _interval(tokens=4)
        interval.merge_in(_embeddings_interval(5))
        mixed.append(interval)
    tok = drift_section(_series(mixed), INTERVAL_S, 200.0)["metrics"]["output_tokens_per_s"]
    assert tok["first"] == pytest.approx(4 * MIN_SAMPLES * 2 / (2 * INTERVAL_S))
    assert tok["samples"] == [2 * MIN_SAMPLES, 2 * MIN_SAMPLES]
