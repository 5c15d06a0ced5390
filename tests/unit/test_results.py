"""exporters.results and exporters.sections: results document key paths and values, verdict, atomic JSON write."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import LLMStats
from llmload.exporters.console import format_summary
from llmload.exporters.results import (
    SCHEMA_VERSION,
    RunOutcome,
    build_results,
    judge,
    public_options,
    write_results_json,
)
from llmload.exporters.sections import CPU_SATURATION_S, client_saturated
from llmload.request.record import Outcome, RequestRecord, TokenCount, TokenSource
from llmload.settings.config import RunConfig
from llmload.testing import T0_UNIX as T0
from llmload.testing import failed_record, ok_record, stats_of

CONFIG = dataclasses.replace(RunConfig(), max_tokens=3)


def _results(stats: LLMStats) -> dict[str, Any]:
    outcome = RunOutcome(
        stats,
        config=CONFIG,
        run_id="r1",
        host="http://127.0.0.1:8000",
        user_classes=("ChatUser",),
        model="m",
        users=4,
        workers=2,
        started_at_unix=T0 - 1.0,
    )
    return build_results(outcome)


def _scenario() -> LLMStats:
    """Two successes, one failure, two cancelled; span T0 .. T0+2.0."""
    stats = LLMStats.empty()
    # TTFT 0.1, tokens at 0.1/0.12/0.14, E2E 0.5; TPOT 0.02; ITL [0.02, 0.02]
    stats.add(ok_record(start_unix=T0, times_s=(0.1, 0.12, 0.14), end_s=0.5))
    # TTFT 0.3, tokens at 0.3/0.4/0.5, E2E 1.0 -> ends at T0+2.0; TPOT 0.1; ITL [0.1, 0.1]
    stats.add(
        ok_record(
            start_unix=T0 + 1.0, times_s=(0.3, 0.4, 0.5), end_s=1.0, prompt_tokens=TokenCount(30, TokenSource.SERVER)
        )
    )
    stats.add(
        failed_record("NotFoundError/404", "model 'nope' is not served here", 404, start_unix=T0 + 0.5, end_s=0.01)
    )
    stats.add_cancelled("chat", "m", 2)
    return stats


def test_report_requests_section() -> None:
    requests = _results(_scenario())["requests"]
    assert requests["total"] == 3
    assert requests["succeeded"] == 2
    assert requests["failed"] == 1
    assert requests["cancelled"] == 2
    assert requests["failure_ratio"] == pytest.approx(1 / 3)
    assert requests["by_outcome"]["ok"] == 2
    assert requests["by_outcome"]["http_error"] == 1
    assert requests["by_outcome"]["cancelled"] == 2
    assert requests["by_outcome"]["timeout"] == 0
    assert set(requests["by_outcome"]) == {o.value for o in Outcome}


def test_report_errors_section() -> None:
    errors = _results(_scenario())["errors"]
    assert errors == [
        {
            "category": "NotFoundError/404",
            "status": 404,
            "count": 1,
            "samples": ["model 'nope' is not served here"],
        }
    ]


def test_report_errors_sorted_by_count_then_category() -> None:
    stats = LLMStats.empty()
    stats.add(failed_record("b", "x", 500, start_unix=T0, end_s=0.01))
    stats.add(failed_record("c", "x", 500, start_unix=T0, end_s=0.01))
    stats.add(failed_record("c", "y", 500, start_unix=T0, end_s=0.01))
    stats.add(failed_record("a", "x", 500, start_unix=T0, end_s=0.01))
    assert [e["category"] for e in _results(stats)["errors"]] == ["c", "a", "b"]


def test_report_tokens_section() -> None:
    tokens = _results(_scenario())["tokens"]
    assert tokens["prompt"] == 40
    assert tokens["completion"] == 6
    assert tokens["completion_source"] == "server"
    assert tokens["prompt_source"] == "server"
    assert tokens["completion_sources"] == {"server": 2}
    assert tokens["avg_completion_per_request"] == 3.0
    assert tokens["avg_prompt_per_request"] == 20.0
    assert tokens["requested_prompt_avg"] is None


def test_report_duration_and_throughput() -> None:
    results = _results(_scenario())
    assert results["duration_s"] == pytest.approx(2.0)
    throughput = results["throughput"]
    assert throughput["requests_per_s"] == pytest.approx(1.0)  # 2 successes / 2 s
    assert throughput["output_tokens_per_s"] == pytest.approx(3.0)  # 6 tokens / 2 s
    assert throughput["total_tokens_per_s"] == pytest.approx(23.0)  # (40 + 6) / 2 s


def test_report_latency_section_in_seconds() -> None:
    latency = _results(_scenario())["latency"]
    ttft = latency["ttft_s"]
    assert ttft["count"] == 2
    assert ttft["mean"] == pytest.approx(0.2)
    assert ttft["p50"] == pytest.approx(0.1, rel=0.01)
    assert ttft["p90"] == pytest.approx(0.3, rel=0.01)
    assert ttft["p99"] == pytest.approx(0.3, rel=0.01)
    assert ttft["max"] == 0.3
    assert latency["e2e_s"]["max"] == 1.0
    assert latency["e2e_s"]["mean"] == pytest.approx(0.75)
    assert latency["itl_s"]["count"] == 4
    assert latency["itl_s"]["mean"] == pytest.approx(0.06)
    assert latency["tpot_s"]["mean"] == pytest.approx(0.06)
    assert latency["ttfc_s"]["count"] == 2
    assert latency["itl_kind"] == "token"


def test_a_run_stopped_by_ctrl_c_says_so_in_its_results_and_verdict():
    """Found by the new-user check: a -t 60s run stopped by Ctrl-C after 5 s read PASSED like a finished one."""
    stats = stats_of(ok_record((0.1, 0.12, 0.14), end_s=0.15))
    stopped = build_results(RunOutcome(stats, stopped_by="Ctrl-C"))
    assert stopped["run"]["stopped_by"] == "Ctrl-C"
    assert stopped["passed"] is True
    assert stopped["verdict"] == (
        "PASSED: 1/1 requests succeeded (failure ratio 0.0% <= --max-failure-ratio 1.0%); "
        "stopped early by Ctrl-C; exit status 0"
    )
    ended = build_results(RunOutcome(stats))
    assert ended["run"]["stopped_by"] is None
    assert "stopped early" not in ended["verdict"]


def test_report_run_and_schema() -> None:
    results = _results(_scenario())
    assert results["schema_version"] == SCHEMA_VERSION == 1
    assert results["run"] == {
        "run_id": "r1",
        "host": "http://127.0.0.1:8000",
        "user_classes": ["ChatUser"],
        "model": "m",
        "users": 4,
        "workers": 2,
        "num_requests": None,
        "started_at_unix": T0 - 1.0,
        "workers_clock_offset_s": {},
        "workers_clock_offset_error_s": {},
        "stopped_by": None,
        "refused_options": {},
        "options": public_options(CONFIG),
    }
    assert results["run"]["options"]["max_tokens"] == 3
    assert results["by_endpoint"] == []
    assert results["latency_endpoints"] == ["chat"]


def test_report_run_model_is_null_when_no_model_was_chosen() -> None:
    """A run refused before the model list was read names no model: null (unknown), not an empty name."""
    results = build_results(RunOutcome(LLMStats.empty(), config=CONFIG, blocked="cannot reach http://h/v1/models"))
    assert results["run"]["model"] is None


def test_report_empty_run_is_all_unknown_not_zero() -> None:
    results = _results(LLMStats.empty())
    assert results["requests"]["total"] == 0
    assert results["requests"]["failure_ratio"] is None
    assert results["duration_s"] is None
    assert results["throughput"] == {
        "requests_per_s": None,
        "output_tokens_per_s": None,
        "total_tokens_per_s": None,
        "streamed_output_tokens_per_s": None,
        "input_tokens_per_s": None,
        "inputs_per_s": None,
    }
    assert results["tokens"]["prompt"] is None
    assert results["tokens"]["completion"] is None
    assert results["tokens"]["completion_source"] is None
    assert results["tokens"]["avg_completion_per_request"] is None
    assert results["latency"]["ttft_s"] == {
        "mean": None,
        "p50": None,
        "p90": None,
        "p99": None,
        "max": None,
        "count": 0,
    }
    assert results["latency"]["itl_kind"] is None
    assert "null" in json.dumps(results)


def test_report_unknown_counts_are_null_and_sources_mixed() -> None:
    stats = LLMStats.empty()
    stats.add(
        ok_record(
            start_unix=T0,
            times_s=(0.1, 0.2),
            end_s=1.0,
            prompt_tokens=TokenCount.unknown(),
            completion_tokens=TokenCount.unknown(),
        )
    )
    stats.add(
        ok_record(
            start_unix=T0,
            times_s=(0.1, 0.2),
            end_s=1.0,
            prompt_tokens=TokenCount.unknown(),
            completion_tokens=TokenCount(5, TokenSource.CHUNKS),
        )
    )
    results = _results(stats)
    tokens = results["tokens"]
    assert tokens["prompt"] is None
    assert tokens["prompt_source"] == "unknown"
    assert tokens["completion"] == 5
    assert tokens["completion_source"] == "mixed"
    assert tokens["completion_sources"] == {"chunk-count": 1, "unknown": 1}
    assert tokens["avg_completion_per_request"] == 5.0  # over requests with a known count only
    assert results["throughput"]["total_tokens_per_s"] is None
    assert results["throughput"]["output_tokens_per_s"] == pytest.approx(5.0)


def test_report_itl_kind_chunk_and_mixed() -> None:
    chunk_only = LLMStats.empty()
    chunk_only.add(
        ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=1.0, completion_tokens=TokenCount(9, TokenSource.SERVER))
    )  # 2 events, 9 tokens
    assert _results(chunk_only)["latency"]["itl_kind"] == "chunk"
    chunk_only.add(ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=1.0))  # 2 events, 2 server tokens: per token
    assert _results(chunk_only)["latency"]["itl_kind"] == "mixed"


def test_report_by_endpoint_when_several_keys() -> None:
    stats = _scenario()
    stats.add(ok_record(start_unix=T0, times_s=(0.2, 0.3), end_s=0.4, endpoint="completions"))
    results = _results(stats)
    assert results["requests"]["succeeded"] == 3
    by_endpoint = results["by_endpoint"]
    assert [(b["endpoint"], b["model"]) for b in by_endpoint] == [("chat", "m"), ("completions", "m")]
    assert by_endpoint[0]["requests"]["succeeded"] == 2
    assert by_endpoint[1]["requests"]["succeeded"] == 1
    assert by_endpoint[1]["latency"]["ttft_s"]["max"] == 0.2
    assert by_endpoint[1]["duration_s"] == pytest.approx(0.4)


def test_report_bc10_failed_stream_excluded_from_tokens_and_latency() -> None:
    stats = LLMStats.empty()
    stats.add(ok_record(start_unix=T0, times_s=(0.1, 0.12), end_s=0.2))
    partial = failed_record(
        "InternalServerError", "simulated engine failure", 500, start_unix=T0, outcome=Outcome.SERVER_ERROR, end_s=0.01
    )
    partial.token_times_s = [0.12, 0.14]
    partial.completion_tokens = TokenCount(2, TokenSource.CHUNKS)
    stats.add(partial)
    results = _results(stats)
    assert results["tokens"]["completion"] == 2
    assert results["latency"]["e2e_s"]["count"] == 1
    assert results["errors"][0]["samples"] == ["simulated engine failure"]
    assert "simulated engine failure" in format_summary(results)


def test_write_results_json_creates_parents_and_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "results.json"
    write_results_json(path, {"x": 1})
    write_results_json(path, {"x": 2, "y": None})
    assert json.loads(path.read_text()) == {"x": 2, "y": None}
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.json"]


def test_write_results_json_rejects_nan_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    with pytest.raises(ValueError, match="JSON"):
        write_results_json(path, {"x": float("nan")})
    assert list(tmp_path.iterdir()) == []


# ── the client's own delays ────────────────────────────────────────────────
def _with_reads(lags: list[float], unstamped: int) -> RequestRecord:
    record = ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=0.3)
    record.read_lags_s = lags
    record.unstamped_reads = unstamped
    record.connect_s = 0.004
    return record


def _client_section(*records: RequestRecord) -> dict:
    return _results(stats_of(*records))["client"]


def test_client_section_names_the_clock_that_timed_the_reads():
    assert _client_section(_with_reads([0.0001, 0.0002], 0))["clock"] == "kernel"
    assert _client_section(_with_reads([], 2))["clock"] == "monotonic"
    assert _client_section(_with_reads([0.0001], 1))["clock"] == "mixed"
    assert _client_section(_with_reads([], 0))["clock"] is None


def test_client_section_flags_a_p99_read_lag_above_two_ms():
    quick = _client_section(_with_reads([0.0005] * 99 + [0.0015], 0))
    assert quick["read_lag_saturated"] is False
    assert quick["read_lag_s"]["count"] == 100
    assert quick["connect_s"]["mean"] == pytest.approx(0.004)
    late = _client_section(_with_reads([0.0005] * 90 + [0.004] * 10, 0))
    assert late["read_lag_saturated"] is True
    assert late["read_lag_s"]["p99"] == pytest.approx(0.004, rel=0.02)


def test_issue19_one_request_far_off_flags_the_run_however_low_the_p99():
    # 199 requests read at once, one whose read waited 100 ms: the P99 read lag is low,
    # but that request's TTFT may be 100 ms off, so the run is never clean
    records = [_with_reads([0.0002, 0.0003], 0) for _ in range(199)] + [_with_reads([0.0002, 0.1], 0)]
    stats = stats_of(*records)
    client = _results(stats)["client"]
    assert client["read_lag_s"]["p99"] < 0.002
    assert client["read_lag_saturated"] is True
    assert client["lagged_requests"] == 1
    assert client["request_lag_limit_s"] == 0.01
    assert client["request_lag_s"]["count"] == 200
    assert client["request_lag_s"]["max"] == pytest.approx(0.1)
    assert client["request_lag_s"]["p50"] == pytest.approx(0.0003, rel=0.02)
    assert build_results(RunOutcome(stats))["client_saturated"] is True


def test_issue19_a_send_the_kernel_held_counts_in_the_request_lag_like_a_read_lag():
    # every read on time, but one request's hand-over to the kernel took 12 ms: its clock may have
    # started 12 ms before the request left, so the run is not clean
    held = _with_reads([0.0, 0.0002], 0)
    held.send_lag_s = 0.012
    normal = [_with_reads([0.0, 0.0002], 0) for _ in range(199)]
    for record in normal:
        record.send_lag_s = 0.00002
    stats = stats_of(*normal, held)
    client = _results(stats)["client"]
    assert client["read_lag_s"]["max"] == pytest.approx(0.0002, rel=0.02)  # the reads are not blamed
    assert client["request_lag_s"]["count"] == 200
    assert client["request_lag_s"]["max"] == pytest.approx(0.012, rel=0.02)
    assert client["lagged_requests"] == 1
    assert build_results(RunOutcome(stats))["client_saturated"] is True
    # a send timed with no stamped read (unstamped reads) still has its request lag
    alone = _with_reads([], 1)
    alone.send_lag_s = 0.003
    assert _client_section(alone)["request_lag_s"]["max"] == pytest.approx(0.003, rel=0.02)
    assert _client_section(_with_reads([], 1))["request_lag_s"]["count"] == 0  # neither: no lag known


def test_issue19_a_request_just_within_the_limit_leaves_the_run_clean():
    client = _client_section(*[_with_reads([0.0002, 0.0095], 0) for _ in range(2)], _with_reads([0.0002] * 400, 0))
    assert client["lagged_requests"] == 0
    assert client["read_lag_saturated"] is False


def test_public_options_never_carry_the_key_material():
    options = public_options(RunConfig(api_key_file="/secret/key"))
    flat = repr(options)
    assert "api_key" not in flat
    assert "/secret/key" not in flat


def _verdict_of(*, succeeded=0, failed=0, cancelled=0, limit=0.01, blocked=None):
    results = {
        "requests": {"total": succeeded + failed, "succeeded": succeeded, "failed": failed, "cancelled": cancelled},
        "max_failure_ratio": limit,
    }
    if blocked:
        results["blocked"] = blocked
    return judge(results)


# Issue 14, P5: "failure ratio 0.0% > 1.0%" for a blocked run, "100.0% > 100.0%" when all failed.
def test_p5_blocked_run_exits_2_and_says_it_was_blocked_before_load():
    verdict = _verdict_of(blocked='model "other" not served; available: m')
    assert verdict.exit_status == 2
    assert verdict.text == (
        'BLOCKED before load: model "other" not served; available: m; no load was sent; exit status 2'
    )


def test_p5_all_requests_failed_is_said_plainly_even_with_a_ratio_limit_of_one():
    verdict = _verdict_of(failed=12, limit=1.0)
    assert (verdict.exit_status, verdict.text) == (1, "FAILED: all 12 requests failed; exit status 1")
    assert _verdict_of(failed=1).text == "FAILED: the only request failed; exit status 1"


def test_p5_failure_ratio_comparison_is_printed_with_enough_decimals_to_be_true():
    verdict = _verdict_of(succeeded=9899, failed=101, limit=0.01)
    assert verdict.text == (
        "FAILED: 101/10000 requests failed (failure ratio 1.01% > --max-failure-ratio 1.00%); exit status 1"
    )


def test_p5_nothing_finished_fails_and_counts_the_cancelled():
    verdict = _verdict_of(cancelled=50)
    assert (verdict.exit_status, verdict.text) == (
        1,
        "FAILED: no request finished (50 cancelled at the stop); exit status 1",
    )


def test_p5_passing_run_states_its_ratio_within_the_limit():
    verdict = _verdict_of(succeeded=99, failed=1, limit=0.01)
    assert verdict.passed
    assert verdict.text == (
        "PASSED: 99/100 requests succeeded (failure ratio 1.0% <= --max-failure-ratio 1.0%); exit status 0"
    )


def test_verdict_says_the_requests_cancelled_at_the_stop_are_not_in_its_fraction():
    passed = _verdict_of(succeeded=3689, cancelled=255)
    assert passed.passed
    assert passed.text == (
        "PASSED: 3689/3689 requests succeeded (failure ratio 0.0% <= --max-failure-ratio 1.0%); "
        "255 cancelled at the stop, not counted; exit status 0"
    )
    failed = _verdict_of(succeeded=90, failed=10, cancelled=3, limit=0.01)
    assert failed.text == (
        "FAILED: 10/100 requests failed (failure ratio 10.0% > --max-failure-ratio 1.0%); "
        "3 cancelled at the stop, not counted; exit status 1"
    )


def test_client_saturation_is_one_rule_of_cpu_streak_or_read_lag() -> None:
    calm = LatencyHistogram.empty()
    for _ in range(100):
        calm.add(0.0005)
    late = calm.copy()
    for _ in range(5):
        late.add(0.004)  # 5 of 105 reads above 2 ms: the p99 is late
    assert not client_saturated(CPU_SATURATION_S - 0.1, calm)
    assert client_saturated(CPU_SATURATION_S, calm)
    assert client_saturated(0.0, late)
    outcome = RunOutcome(LLMStats.empty(), cpu_saturated_s=CPU_SATURATION_S)
    assert build_results(outcome)["client_saturated"] is True


def test_summary_nc09_throttled_share_and_nc10_skipped_count() -> None:
    stats = _scenario()
    before = _results(stats)
    assert "Throttled" not in format_summary(before)
    assert "Skipped" not in format_summary(before)
    stats.add(failed_record("HTTP 429", "slow down", 429, outcome=Outcome.THROTTLED, start_unix=T0 + 3, end_s=0.01))
    stats.add(
        failed_record(
            "skipped: UnicodeEncodeError",
            "surrogates not allowed",
            None,
            outcome=Outcome.SKIPPED,
            start_unix=T0 + 3,
            end_s=0.01,
        )
    )
    results = _results(stats)
    total = results["requests"]["total"]
    assert total == before["requests"]["total"] + 1  # skipped requests are not finished
    assert (results["requests"]["skipped"], results["requests"]["by_outcome"]["throttled"]) == (1, 1)
    text = format_summary(results)
    values = {line.split(":")[0]: line.split(":", 1)[1].strip() for line in text.splitlines() if ":" in line}
    assert values["Throttled (429/503)"] == f"1 ({100 / total:.1f}% of finished)"
    assert values["Skipped (client fault, not sent)"] == "1"
    assert "  1 x skipped: UnicodeEncodeError" in text.splitlines()
    verdict = judge(results)
    assert verdict.exit_status == 1
    assert verdict.text.startswith("FAILED: 1 of ")
    assert "skipped by a fault in the client" in verdict.text
