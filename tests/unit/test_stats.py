"""LLMStats / EndpointStats: what each outcome counts, token provenance, error table bounds."""

import pytest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import MAX_ERROR_CATEGORIES, MAX_ERROR_SAMPLES, OVERFLOW_CATEGORY, ErrorGroup, LLMStats
from llmload.request.record import ITLKind, Outcome, RequestRecord, TokenCount, TokenSource
from llmload.testing import T0_UNIX as T0
from llmload.testing import failed_record, ok_record, stats_of


def test_stats_empty_is_empty() -> None:
    stats = LLMStats.empty()
    assert stats.is_empty()
    assert stats.keys() == []
    assert stats.total().finished == 0
    assert stats.total().first_send_unix is None


def test_stats_success_sums_tokens_and_fills_histograms() -> None:
    stats = stats_of(
        ok_record(times_s=(0.1, 0.12, 0.14), end_s=0.15, completion_tokens=TokenCount(3, TokenSource.SERVER)),
        ok_record(times_s=(0.2, 0.3), end_s=0.35, prompt_tokens=TokenCount(20, TokenSource.SERVER)),
    )
    s = stats.total()
    assert s.succeeded == 2
    assert s.failed == 0
    assert s.finished == 2
    assert s.prompt_tokens_sum == 30
    assert s.completion_tokens_sum == 5
    assert s.completion_tokens_by_source == {TokenSource.SERVER: 5}
    assert s.ttft_s.count == 2
    assert s.ttft_s.min == 0.1
    assert s.ttft_s.max == 0.2
    assert s.e2e_s.sum_ns == 500_000_000
    # ITL: [0.02, 0.02] from the first, [0.1] from the second; TTFT never among them (BC-18).
    assert s.itl_s.count == 3
    assert s.itl_s.max == pytest.approx(0.1)
    assert s.itl_s.min == pytest.approx(0.02)
    # TPOT: (0.14-0.1)/2 = 0.02 and (0.3-0.2)/1 = 0.1
    assert s.tpot_s.count == 2
    assert s.tpot_s.mean == pytest.approx(0.06)
    assert s.itl_kind_requests == {ITLKind.TOKEN: 2}


def test_stats_bc18_itl_excludes_ttft() -> None:
    s = stats_of(ok_record(times_s=(0.5, 0.52, 0.54), end_s=0.55)).total()
    assert s.ttft_s.max == 0.5
    assert s.itl_s.count == 2
    assert s.itl_s.mean == pytest.approx(0.02)
    assert s.itl_s.max == pytest.approx(0.02)


def test_stats_bc14_itl_spreads_multi_token_chunks() -> None:
    record = ok_record(
        times_s=(0.1, 0.11, 0.12, 0.13),
        end_s=0.131,
        token_counts=[4, 4, 4, 4],
        completion_tokens=TokenCount(16, TokenSource.SERVER),
    )
    s = stats_of(record).total()
    assert s.completion_tokens_sum == 16
    # 16 tokens give 15 samples: the first event's 3 other tokens are 0 s, then three
    # gaps of 10 ms each spread over 4 tokens; their mean is the TPOT (30 ms / 15)
    assert s.itl_s.count == 15
    assert s.itl_s.zero_count == 3
    assert s.itl_s.mean == pytest.approx(0.002)
    assert s.tpot_s.mean == pytest.approx(0.002)
    assert s.itl_kind_requests == {ITLKind.TOKEN: 1}


def test_stats_ttfc_separate_from_ttft_bc12() -> None:
    s = stats_of(ok_record(times_s=(0.3, 0.32, 0.34, 0.9), first_content_s=0.9, end_s=0.91)).total()
    assert s.ttft_s.max == 0.3
    assert s.ttfc_s.max == 0.9


def test_stats_no_content_means_no_ttfc_sample() -> None:
    record = ok_record(times_s=(0.3, 0.32))
    record.first_content_s = None
    s = stats_of(record).total()
    assert s.ttft_s.count == 1
    assert s.ttfc_s.count == 0


def test_stats_unknown_token_counts_are_unknown_not_zero() -> None:
    stats = stats_of(
        ok_record(prompt_tokens=TokenCount.unknown(), completion_tokens=TokenCount.unknown()),
        ok_record(
            prompt_tokens=TokenCount(7, TokenSource.TOKENIZER), completion_tokens=TokenCount(3, TokenSource.TOKENIZER)
        ),
    )
    s = stats.total()
    assert s.prompt_tokens_sum == 7
    assert s.completion_tokens_sum == 3
    assert s.prompt_source_requests == {TokenSource.UNKNOWN: 1, TokenSource.TOKENIZER: 1}
    assert s.completion_source_requests == {TokenSource.UNKNOWN: 1, TokenSource.TOKENIZER: 1}
    assert s.prompt_tokens_known_requests == 1
    assert s.completion_tokens_known_requests == 1


def test_stats_value_none_with_a_named_source_counts_as_unknown() -> None:
    s = stats_of(ok_record(completion_tokens=TokenCount(None, TokenSource.SERVER))).total()
    assert s.completion_source_requests == {TokenSource.UNKNOWN: 1}


def test_stats_completion_tokens_per_source() -> None:
    s = stats_of(
        ok_record(completion_tokens=TokenCount(3, TokenSource.SERVER)),
        ok_record(completion_tokens=TokenCount(5, TokenSource.CHUNKS)),
        ok_record(completion_tokens=TokenCount(4, TokenSource.SERVER)),
    ).total()
    assert s.completion_source_requests == {TokenSource.SERVER: 2, TokenSource.CHUNKS: 1}
    assert s.completion_tokens_by_source == {TokenSource.SERVER: 7, TokenSource.CHUNKS: 5}


def test_stats_requested_prompt_tokens_bc16() -> None:
    s = stats_of(
        ok_record(prompt_tokens=TokenCount(14, TokenSource.SERVER), requested_prompt_tokens=2),
        ok_record(prompt_tokens=TokenCount(14, TokenSource.SERVER), requested_prompt_tokens=4),
        ok_record(prompt_tokens=TokenCount(14, TokenSource.SERVER)),
    ).total()
    assert s.prompt_tokens_sum == 42
    assert s.requested_prompt_tokens_sum == 6
    assert s.requested_prompt_tokens_count == 2


def test_stats_bc10_failure_partial_tokens_and_timings_excluded() -> None:
    partial = failed_record(
        "InternalServerError",
        "simulated engine failure",
        500,
        outcome=Outcome.SERVER_ERROR,
        token_times_s=[0.12, 0.14],
        end_s=0.15,
        completion_tokens=TokenCount(2, TokenSource.CHUNKS),
    )
    s = stats_of(ok_record(), partial).total()
    assert s.succeeded == 1
    assert s.failed == 1
    assert s.completion_tokens_sum == 3
    assert s.e2e_s.count == 1
    assert s.ttft_s.count == 1
    assert s.itl_s.count == 2
    assert s.errors == {"InternalServerError": ErrorGroup(1, 500, ["simulated engine failure"])}
    assert s.requests_by_outcome == {Outcome.OK: 1, Outcome.SERVER_ERROR: 1}


def test_stats_bc09_empty_reply_is_a_failure_with_its_own_category() -> None:
    empty = RequestRecord(
        endpoint="chat",
        model="m",
        started_at_unix=T0,
        outcome=Outcome.EMPTY,
        end_s=0.06,
        completion_tokens=TokenCount(0, TokenSource.SERVER),
    )
    s = stats_of(empty).total()
    assert s.failed == 1
    assert s.succeeded == 0
    assert s.ttft_s.count == 0
    assert s.e2e_s.count == 0
    assert s.completion_source_requests == {}
    assert s.errors == {"empty": ErrorGroup(1, None, [])}


def test_stats_bc27_cancelled_neither_success_nor_failure() -> None:
    stats = stats_of(ok_record())
    stats.add_cancelled("chat", "m", 50)
    s = stats.total()
    assert s.cancelled == 50
    assert s.finished == 1
    assert s.failed == 0
    assert s.e2e_s.count == 1


def test_stats_cancelled_record_only_counted() -> None:
    record = ok_record(start_unix=T0 - 100)
    record.outcome = Outcome.CANCELLED
    s = stats_of(record).total()
    assert s.cancelled == 1
    assert s.finished == 0
    assert s.ttft_s.count == 0
    assert s.first_send_unix is None


def test_stats_add_cancelled_zero_is_a_no_op_and_negative_is_rejected() -> None:
    stats = LLMStats.empty()
    stats.add_cancelled("chat", "m", 0)
    assert stats == LLMStats.empty()
    with pytest.raises(ValueError, match="got -1"):
        stats.add_cancelled("chat", "m", -1)


def test_stats_span_covers_sends_and_ends_of_finished_requests() -> None:
    s = stats_of(
        ok_record(start_unix=T0 + 1.0, end_s=2.0),  # ends T0+3
        ok_record(start_unix=T0, end_s=0.5),  # first send T0
        failed_record("HTTP 500", outcome=Outcome.HTTP_ERROR, start_unix=T0 + 2.0, end_s=0.1),
    ).total()
    assert s.first_send_unix == T0
    assert s.last_end_unix == T0 + 3.0


def test_stats_span_failure_without_end_uses_finished_at() -> None:
    stats = LLMStats.empty()
    stats.add(
        failed_record("timeout: read idle", outcome=Outcome.TIMEOUT, start_unix=T0, end_s=None),
        finished_at_unix=T0 + 300.0,
    )
    assert stats.total().last_end_unix == T0 + 300.0


def test_stats_span_failure_without_end_defaults_to_last_known_timing() -> None:
    stats = stats_of(
        failed_record(
            "stream ended", outcome=Outcome.STREAM_ERROR, start_unix=T0, token_times_s=[0.1, 0.25], end_s=None
        )
    )
    assert stats.total().last_end_unix == T0 + 0.25


def test_stats_errors_keep_smallest_distinct_samples_and_smallest_status() -> None:
    stats = stats_of(
        *(failed_record("HTTP 500", f"request id {c}", 500, outcome=Outcome.HTTP_ERROR) for c in "edcbae"),
        failed_record("HTTP 500", "request id z", 502, outcome=Outcome.HTTP_ERROR),
    )
    group = stats.total().errors["HTTP 500"]
    assert group.count == 7
    assert group.status == 500
    assert group.samples == ["request id a", "request id b", "request id c"]


def test_stats_bc28_unique_messages_keep_memory_bounded() -> None:
    stats = LLMStats.empty()
    for i in range(5_000):
        stats.add(
            failed_record(
                "InternalServerError/500", f"internal error, request id {i:08x}", 500, outcome=Outcome.HTTP_ERROR
            )
        )
    s = stats.total()
    assert list(s.errors) == ["InternalServerError/500"]
    assert s.errors["InternalServerError/500"].count == 5_000
    assert len(s.errors["InternalServerError/500"].samples) == MAX_ERROR_SAMPLES


def test_stats_bc28_category_count_bounded_with_overflow_other() -> None:
    stats = LLMStats.empty()
    for i in range(MAX_ERROR_CATEGORIES + 30):
        stats.add(failed_record(f"cat{i:03d}", f"msg {i}", 500, outcome=Outcome.SERVER_ERROR))
    s = stats.total()
    assert len(s.errors) == MAX_ERROR_CATEGORIES
    kept = sorted(c for c in s.errors if c != OVERFLOW_CATEGORY)
    assert kept == [f"cat{i:03d}" for i in range(MAX_ERROR_CATEGORIES - 1)]
    assert s.errors[OVERFLOW_CATEGORY].count == 31
    assert sum(g.count for g in s.errors.values()) == MAX_ERROR_CATEGORIES + 30 == s.failed


def test_stats_exactly_max_categories_are_kept_without_folding() -> None:
    stats = LLMStats.empty()
    for i in range(MAX_ERROR_CATEGORIES):
        stats.add(failed_record(f"cat{i:03d}", outcome=Outcome.SERVER_ERROR))
    assert OVERFLOW_CATEGORY not in stats.total().errors
    assert len(stats.total().errors) == MAX_ERROR_CATEGORIES


def test_stats_keys_per_endpoint_and_model_and_total_merges_them() -> None:
    stats = stats_of(
        ok_record(endpoint="chat", model="a"),
        ok_record(endpoint="completions", model="a"),
        ok_record(endpoint="chat", model="a"),
    )
    assert stats.keys() == [("chat", "a"), ("completions", "a")]
    assert stats.get("chat", "a").succeeded == 2
    assert stats.get("chat", "nope").succeeded == 0
    assert stats.total().succeeded == 3


def test_stats_merge_is_pure_and_equals_adding_all_records() -> None:
    a_records = [ok_record(), failed_record("timeout: read idle", outcome=Outcome.TIMEOUT)]
    b_records = [ok_record(start_unix=T0 + 5, times_s=(1.0, 1.5), end_s=2.0)]
    a, b = stats_of(*a_records), stats_of(*b_records)
    merged = a.merge(b)
    assert merged == stats_of(*a_records, *b_records)
    assert a == stats_of(*a_records)
    assert b == stats_of(*b_records)


def test_stats_merge_in_accumulates_deltas() -> None:
    master = LLMStats.empty()
    master.merge_in(stats_of(ok_record()))
    master.merge_in(stats_of(ok_record(), failed_record("HTTP 404", outcome=Outcome.HTTP_ERROR, status=404)))
    assert master.total().succeeded == 2
    assert master.total().failed == 1


def test_stats_merged_copy_does_not_share_state() -> None:
    a = stats_of(ok_record())
    merged = a.merge(LLMStats.empty())
    merged.add(ok_record())
    assert a.total().succeeded == 1
    assert a.total().ttft_s.count == 1


def test_stats_equality_sees_histogram_differences() -> None:
    a = stats_of(ok_record(times_s=(0.1, 0.2)))
    b = stats_of(ok_record(times_s=(0.1, 0.3)))
    assert a.total().ttft_s == b.total().ttft_s
    assert a != b


def test_stats_rejects_negative_timing() -> None:
    stats = LLMStats.empty()
    with pytest.raises(ValueError, match="seconds >= 0"):
        stats.add(ok_record(times_s=(-0.1, 0.2)))


def test_endpoint_stats_histograms_are_named() -> None:
    s = stats_of(ok_record()).total()
    assert set(s.histograms()) == {
        "ttft_s",
        "ttfc_s",
        "itl_s",
        "tpot_s",
        "e2e_s",
        "dispatch_delay_s",
        "ttft_from_schedule_s",
        "e2e_from_schedule_s",
        "ttft_with_connect_s",
        "read_lag_s",
        "connect_s",
        "request_lag_s",
        "session_duration_s",
    }
    assert all(isinstance(h, LatencyHistogram) for h in s.histograms().values())
    assert s.histograms()["e2e_s"].count == 1


def _connected(ttft_s: float, connect_s: float | None) -> RequestRecord:
    record = ok_record(start_unix=T0, times_s=(ttft_s, ttft_s + 0.01), end_s=ttft_s + 0.02)
    record.connect_s = connect_s
    return record


def test_issue19_ttft_with_connect_adds_the_connection_set_up_to_ttft():
    s = stats_of(_connected(0.05, 0.012), _connected(0.06, 0.0), _connected(0.07, None)).total()
    assert s.ttft_s.count == 3
    # the kept-alive connection counts 0; an unmeasured set-up is unknown, never 0
    assert s.ttft_with_connect_s.count == 2
    assert s.ttft_with_connect_s.max == pytest.approx(0.062)
    assert s.ttft_with_connect_s.min == pytest.approx(0.06)
    failed = failed_record()
    failed.connect_s = 0.01
    assert stats_of(failed).total().ttft_with_connect_s.count == 0
