"""Finish reasons and degenerate replies over real HTTP: ScriptedServer → GeventHTTPTransport → StreamingClient.

Each record then goes through the run's statistics and results document,
so the figures a user reads (failures, throughput, percentiles, the
verdict) are checked, not only the record.
"""

from __future__ import annotations

import json

import pytest

from llmload.aggregate.stats import LLMStats
from llmload.exporters.console import format_summary
from llmload.exporters.results import RunOutcome, build_results
from llmload.request.payloads import build_chat_request
from llmload.request.record import Outcome, RequestRecord
from llmload.testing import CF, ROLE, C, Reply, U, W, json_reply, ok_record, sse

pytestmark = [pytest.mark.integration, pytest.mark.timing]


def results_of(*records: RequestRecord) -> dict:
    stats = LLMStats.empty()
    for record in records:
        stats.add(record)
    return build_results(RunOutcome(stats=stats))


def nc18_abort_reply() -> Reply:
    return Reply([
        W(10, sse(ROLE)),
        W(100, sse(C({"content": "The"}))),
        W(120, sse(C({"content": " answer"}))),
        W(130, sse(CF("abort"), U(9, 2), "[DONE]")),
    ])  # fmt: skip


# NC-18: the server aborts a request but answers 200 and [DONE]: a failure of its own category.
def test_nc18_abort_after_tokens_is_a_failure_named_by_its_finish_reason(run_scripted):
    run = run_scripted(nc18_abort_reply())
    record = run.record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "finish_reason abort"
    assert "'abort'" in record.error.message
    assert record.finish_reason == "abort"
    assert len(record.token_times_s) == 2  # what arrived is still recorded
    assert record.end_s == run.at(130)


def test_nc18_aborted_requests_leave_throughput_and_percentiles_and_fail_the_run(run_scripted):
    aborted = [run_scripted(nc18_abort_reply()).record for _ in range(3)]
    results = results_of(*aborted)
    assert results["requests"]["succeeded"] == 0
    assert results["requests"]["failed"] == 3
    assert results["requests"]["by_outcome"]["server_error"] == 3
    assert results["requests"]["finish_reasons"] == {"abort": 3}
    assert [(e["category"], e["count"]) for e in results["errors"]] == [("finish_reason abort", 3)]
    assert results["tokens"]["completion"] is None  # no success: no token total, never the aborted 2 each
    assert results["throughput"]["output_tokens_per_s"] is None
    assert results["latency"]["ttft_s"]["count"] == 0
    assert results["passed"] is False
    assert results["verdict"] == "FAILED: all 3 requests failed; exit status 1"
    assert "Finish reasons:                         abort 3" in format_summary(results)


def test_nc18_aborted_beside_successes_only_successes_count(run_scripted):
    aborted = run_scripted(nc18_abort_reply()).record
    ok = ok_record((0.1, 0.2, 0.3), end_s=0.3, completion_tokens=3, finish_reason="stop")
    results = results_of(aborted, ok, ok_record((0.1, 0.2), end_s=0.2, completion_tokens=2, finish_reason="length"))
    assert results["requests"]["finish_reasons"] == {"abort": 1, "length": 1, "stop": 1}
    assert results["tokens"]["completion"] == 5  # 3 + 2; the aborted reply's 2 tokens are out
    assert results["latency"]["e2e_s"]["count"] == 2
    assert results["latency"]["e2e_s"]["max"] == pytest.approx(0.3, rel=0.01)


# NC-18 variant: aborted before any token (usage 0).
def test_nc18_variant_abort_before_any_token_is_the_same_failure_not_empty(run_scripted):
    run = run_scripted(Reply([W(10, sse(ROLE)), W(30, sse(CF("abort"), U(9, 0), "[DONE]"))]))
    record = run.record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "finish_reason abort"
    assert record.completion_tokens.value == 0
    results = results_of(record)
    assert results["requests"]["finish_reasons"] == {"abort": 1}
    assert results["requests"]["degenerate"]["empty"] == 0
    assert results["passed"] is False


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        ("error", "finish_reason error"),
        ("cancelled", "finish_reason cancelled"),
        ("canceled", "finish_reason canceled"),
        ("timeout", "finish_reason timeout"),
        ("ABORT", "finish_reason abort"),
        ("engine died: OOM!", "finish_reason other"),  # not label-safe: a bounded label
    ],
)
def test_nc18_kind_every_abnormal_finish_reason_fails(run_scripted, reason, category):
    run = run_scripted(Reply([W(10, sse(ROLE, C({"content": "Hi"}), CF(reason), U(9, 1), "[DONE]"))]))
    assert run.record.outcome is Outcome.SERVER_ERROR
    assert run.record.error is not None
    assert run.record.error.category == category


@pytest.mark.parametrize(
    "reason",
    ["stop", "length", "tool_calls", "function_call", "content_filter", "eos", "eos_token", "end_turn",
     "stop_sequence", "max_tokens", "STOP"],
)  # fmt: skip
def test_nc18_kind_normal_finish_reasons_succeed(run_scripted, reason):
    run = run_scripted(Reply([W(10, sse(ROLE, C({"content": "Hi"}), CF(reason), U(9, 1), "[DONE]"))]))
    assert run.record.outcome is Outcome.OK
    assert results_of(run.record)["requests"]["finish_reasons"] == {reason.lower(): 1}


def test_nc18_no_finish_reason_with_done_still_succeeds(run_scripted):
    run = run_scripted(Reply([W(10, sse(ROLE, C({"content": "Hi"}), U(9, 1), "[DONE]"))]))
    assert run.record.outcome is Outcome.OK
    assert results_of(run.record)["requests"]["finish_reasons"] == {}


# ── replies short of the length asked for, and degenerate output (same kinds as NC-18: never a fast success) ──
def test_nc18_kind_ignore_eos_reply_that_ends_early_is_counted_short(run_scripted):
    request = build_chat_request(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=16, ignore_eos=True
    )
    writes = [W(10, sse(ROLE, C({"content": "Hi"}), C({"content": " there"}), C({"content": "."}))),
              W(20, sse(CF("stop"), U(9, 3), "[DONE]"))]  # fmt: skip
    record = run_scripted(Reply(writes), request).record
    assert record.outcome is Outcome.OK
    assert record.requested_output_tokens == 16
    assert record.completion_tokens.value == 3  # what came, never the 16 asked for
    results = results_of(record)
    assert results["requests"]["short_of_requested"] == {
        "checked": 1,
        "short": 1,
        "mean_got_tokens": 3.0,
        "mean_asked_tokens": 16.0,
    }
    assert results["tokens"]["completion"] == 3
    assert "1 of 1 replies ended early, on average 3.0 of 16.0 tokens" in format_summary(results)


def test_nc18_kind_one_token_repeated_is_degenerate_not_a_fast_success(run_scripted):
    writes = [W(10, sse(ROLE, C({"content": "The"}), *[C({"content": " the"})] * 30)),
              W(20, sse(CF("length"), U(9, 31), "[DONE]"))]  # fmt: skip
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "degenerate: repeated token"
    assert "' the' makes 30 of the reply's 31 pieces" in record.error.message
    results = results_of(record)
    assert results["requests"]["degenerate"]["repeated_token"] == 1
    assert results["requests"]["degenerate"]["samples"]["repeated_token"] == record.error.message
    assert results["requests"]["finish_reasons"] == {"length": 1}
    assert results["latency"]["ttft_s"]["count"] == 0


def test_nc18_kind_whole_reply_of_one_word_repeated_is_degenerate(run_scripted):
    choice = {"index": 0, "message": {"role": "assistant", "content": "no " * 40}, "finish_reason": "length"}
    usage = {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45}
    body = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice], "usage": usage}
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=40, stream=False)
    record = run_scripted(json_reply(200, json.dumps(body)), request).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "degenerate: repeated token"


def test_nc18_kind_empty_content_chunks_are_empty_not_a_fast_success(run_scripted):
    writes = [W(10, sse(ROLE, *[C({"content": ""})] * 5, CF("stop"), U(9, 5), "[DONE]"))]
    record = run_scripted(Reply(writes)).record
    assert record.outcome is Outcome.EMPTY
    assert results_of(record)["requests"]["degenerate"]["empty"] == 1
