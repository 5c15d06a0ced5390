"""Finish reasons, short replies and degenerate output in the statistics, the wire and the results."""

from __future__ import annotations

import pytest

from llmload.aggregate.stats import MAX_LABELS, OVERFLOW_CATEGORY, LLMStats
from llmload.errors import WireFormatError
from llmload.exporters.console import format_summary
from llmload.exporters.results import RunOutcome, build_results
from llmload.request.degenerate import DEGENERATE_REPEATED, DEGENERATE_SAME_TEXT
from llmload.request.record import Outcome, TokenCount, TokenSource
from llmload.run.wire import from_wire, to_wire
from llmload.testing import failed_record, ok_record, stats_of


def results_of(stats: LLMStats) -> dict:
    return build_results(RunOutcome(stats=stats))


def test_stats_finish_reasons_count_successes_and_failures():
    stats = stats_of(
        ok_record(finish_reason="stop"),
        ok_record(finish_reason="STOP"),
        failed_record("finish_reason abort", outcome=Outcome.SERVER_ERROR, finish_reason="abort"),
    )
    assert stats.total().finish_reasons == {"stop": 2, "abort": 1}


def test_stats_finish_reason_labels_are_bounded():
    stats = stats_of(*(ok_record(finish_reason=f"r{i:03d}") for i in range(100)))
    reasons = stats.total().finish_reasons
    assert len(reasons) == MAX_LABELS
    assert reasons[OVERFLOW_CATEGORY] == 100 - (MAX_LABELS - 1)
    assert sum(reasons.values()) == 100


def test_stats_finish_reasons_travel_on_the_wire_and_merge():
    a = stats_of(ok_record(finish_reason="stop"), ok_record(finish_reason="length"))
    b = stats_of(ok_record(finish_reason="stop", endpoint="completions"))
    payload = to_wire(a.merge(b))
    assert payload["endpoints"][0]["labels"] == {"finish_reasons": {"length": 1, "stop": 1}}
    assert from_wire(payload) == a.merge(b)
    no_labels = to_wire(stats_of(ok_record(finish_reason=None)))["endpoints"][0]
    assert "labels" not in no_labels  # older masters read it still


def test_wire_rejects_a_bad_label_map():
    payload = to_wire(stats_of(ok_record(finish_reason="stop")))
    payload["endpoints"][0]["labels"] = {"finish_reasons": {"stop": -1}}
    with pytest.raises(WireFormatError, match=r"finish_reasons\.stop"):
        from_wire(payload)
    payload["endpoints"][0]["labels"] = {"nope": {}}
    with pytest.raises(WireFormatError, match="labels"):
        from_wire(payload)


def test_results_finish_reasons_per_endpoint_and_in_the_summary():
    stats = stats_of(
        ok_record(finish_reason="stop"),
        ok_record(finish_reason="length", endpoint="completions"),
        ok_record(finish_reason="length", endpoint="completions"),
    )
    results = results_of(stats)
    assert results["requests"]["finish_reasons"] == {"length": 2, "stop": 1}
    by_endpoint = {e["endpoint"]: e["requests"]["finish_reasons"] for e in results["by_endpoint"]}
    assert by_endpoint == {"chat": {"stop": 1}, "completions": {"length": 2}}
    assert "Finish reasons:                         length 2, stop 1" in format_summary(results)


def test_results_short_replies_counted_with_how_far_short_and_warned():
    stats = stats_of(
        ok_record(completion_tokens=128, requested_output_tokens=128),
        ok_record(completion_tokens=10, requested_output_tokens=128),
        ok_record(completion_tokens=30, requested_output_tokens=128),
        ok_record(completion_tokens=5),  # no exact length asked: not checked
        # a chunk count is only a lower bound: never proof of a short reply
        ok_record(completion_tokens=TokenCount(3, TokenSource.CHUNKS), requested_output_tokens=128),
    )
    results = results_of(stats)
    assert results["requests"]["short_of_requested"] == {
        "checked": 3,
        "short": 2,
        "mean_got_tokens": 20.0,
        "mean_asked_tokens": 128.0,
    }
    assert results["tokens"]["completion"] == 128 + 10 + 30 + 5 + 3  # what was generated, never what was asked
    summary = format_summary(results)
    assert "WARNING: the server ignored the requested length (ignore_eos / min_tokens): 2 of 3 replies ended " in (
        summary
    )
    assert "on average 20.0 of 128.0 tokens" in summary


def test_results_no_short_replies_no_warning():
    results = results_of(stats_of(ok_record(completion_tokens=8, requested_output_tokens=8)))
    assert results["requests"]["short_of_requested"]["short"] == 0
    assert results["requests"]["short_of_requested"]["mean_got_tokens"] is None
    assert "ignored the requested length" not in format_summary(results)


def test_results_degenerate_counted_apart_with_samples():
    stats = stats_of(
        ok_record(),
        failed_record(
            DEGENERATE_REPEATED, "degenerate output: ' the' makes 30 of 32", None, outcome=Outcome.SERVER_ERROR
        ),
        failed_record(DEGENERATE_SAME_TEXT, "degenerate output: the same text", None, outcome=Outcome.SERVER_ERROR),
        failed_record(DEGENERATE_SAME_TEXT, "degenerate output: the same text", None, outcome=Outcome.SERVER_ERROR),
        failed_record("empty response", "no generated token", None, outcome=Outcome.EMPTY),
    )
    results = results_of(stats)
    assert results["requests"]["degenerate"] == {
        "empty": 1,
        "repeated_token": 1,
        "same_text": 2,
        "samples": {
            "repeated_token": "degenerate output: ' the' makes 30 of 32",
            "same_text": "degenerate output: the same text",
        },
    }
    assert results["requests"]["failed"] == 4
    assert results["throughput"]["requests_per_s"] is not None
    assert "Degenerate replies (failed):            empty 1, repeated token 1, same text 2" in format_summary(results)
