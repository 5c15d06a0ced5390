"""exporters.report: results document key paths and values, console summary, atomic JSON write."""

import json
from pathlib import Path

import pytest

from llmload.exporters.report import (
    SCHEMA_VERSION,
    RunInfo,
    build_results,
    format_summary,
    write_results_json,
)
from llmload.record import Outcome, RequestRecord, TokenCount, TokenSource
from llmload.stats import LLMStats
from llmload.testing import T0_UNIX as T0
from llmload.testing import failed_record, ok_record

RUN = RunInfo(
    run_id="r1",
    host="http://127.0.0.1:8000",
    user_classes=("ChatUser",),
    model="m",
    users=4,
    workers=2,
    num_requests=None,
    started_at_unix=T0 - 1.0,
    options={"max_tokens": 3},
)


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
    requests = build_results(_scenario(), run=RUN)["requests"]
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
    errors = build_results(_scenario(), run=RUN)["errors"]
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
    assert [e["category"] for e in build_results(stats, run=RUN)["errors"]] == ["c", "a", "b"]


def test_report_tokens_section() -> None:
    tokens = build_results(_scenario(), run=RUN)["tokens"]
    assert tokens["prompt"] == 40
    assert tokens["completion"] == 6
    assert tokens["completion_source"] == "server"
    assert tokens["prompt_source"] == "server"
    assert tokens["completion_sources"] == {"server": 2}
    assert tokens["avg_completion_per_request"] == 3.0
    assert tokens["avg_prompt_per_request"] == 20.0
    assert tokens["requested_prompt_avg"] is None


def test_report_duration_and_throughput() -> None:
    results = build_results(_scenario(), run=RUN)
    assert results["duration_s"] == pytest.approx(2.0)
    throughput = results["throughput"]
    assert throughput["requests_per_s"] == pytest.approx(1.0)  # 2 successes / 2 s
    assert throughput["output_tokens_per_s"] == pytest.approx(3.0)  # 6 tokens / 2 s
    assert throughput["total_tokens_per_s"] == pytest.approx(23.0)  # (40 + 6) / 2 s


def test_report_latency_section_in_seconds() -> None:
    latency = build_results(_scenario(), run=RUN)["latency"]
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


def test_report_run_and_schema() -> None:
    results = build_results(_scenario(), run=RUN)
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
        "options": {"max_tokens": 3},
    }
    assert results["by_endpoint"] == []


def test_report_empty_run_is_all_unknown_not_zero() -> None:
    results = build_results(LLMStats.empty(), run=RUN)
    assert results["requests"]["total"] == 0
    assert results["requests"]["failure_ratio"] is None
    assert results["duration_s"] is None
    assert results["throughput"] == {
        "requests_per_s": None,
        "output_tokens_per_s": None,
        "total_tokens_per_s": None,
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
    results = build_results(stats, run=RUN)
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
    assert build_results(chunk_only, run=RUN)["latency"]["itl_kind"] == "chunk"
    chunk_only.add(ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=1.0))  # 2 events, 2 server tokens: per token
    assert build_results(chunk_only, run=RUN)["latency"]["itl_kind"] == "mixed"


def test_report_by_endpoint_when_several_keys() -> None:
    stats = _scenario()
    stats.add(ok_record(start_unix=T0, times_s=(0.2, 0.3), end_s=0.4, endpoint="completions"))
    results = build_results(stats, run=RUN)
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
    results = build_results(stats, run=RUN)
    assert results["tokens"]["completion"] == 2
    assert results["latency"]["e2e_s"]["count"] == 1
    assert results["errors"][0]["samples"] == ["simulated engine failure"]
    assert "simulated engine failure" in format_summary(results)


def test_summary_shows_counts_rates_and_latencies_in_ms() -> None:
    text = format_summary(build_results(_scenario(), run=RUN))
    lines = text.splitlines()
    assert any(line.startswith("Successful requests:") and line.endswith("2/3 (33.3% failed)") for line in lines)
    assert any(line.startswith("Cancelled at stop:") and line.endswith(" 2") for line in lines)
    assert any(line.startswith("Wall time (s):") and line.endswith("2.00") for line in lines)
    assert any(line.startswith("Request throughput (req/s):") and line.endswith("1.00") for line in lines)
    assert any(line.startswith("Output token throughput (tok/s):") and line.endswith("3.00") for line in lines)
    assert any(line.startswith("Total token throughput (tok/s):") and line.endswith("23.00") for line in lines)
    assert any(line.startswith("Mean TTFT (ms):") and line.endswith("200.00") for line in lines)
    assert any(line.startswith("Mean E2E (ms):") and line.endswith("750.00") for line in lines)
    assert any(line.startswith("P99 TTFT (ms):") for line in lines)
    assert any(line.startswith("Mean TPOT (ms):") and line.endswith("60.00") for line in lines)
    assert any(line.startswith("Mean ITL (ms):") and line.endswith("60.00") for line in lines)
    assert any(line.startswith("Total generated tokens:") and line.endswith(" 6") for line in lines)
    assert any(line.startswith("Avg generated tokens per request:") and line.endswith("3.0") for line in lines)
    assert any(line.startswith("Output token count source:") and line.endswith("server") for line in lines)
    assert "1 x NotFoundError/404 [404]" in text
    assert "model 'nope' is not served here" in text


def test_summary_aligns_values_in_one_column() -> None:
    lines = format_summary(build_results(_scenario(), run=RUN)).splitlines()
    widths = {len(line) for line in lines if line.startswith(("Mean ", "P50 ", "P90 ", "P99 "))}
    assert widths == {52}


def test_summary_prints_na_for_unknowns() -> None:
    text = format_summary(build_results(LLMStats.empty(), run=RUN))
    assert "Successful requests:" in text
    assert any(line.startswith("Mean TTFT (ms):") and line.endswith("n/a") for line in text.splitlines())
    assert any(line.startswith("Total input tokens:") and line.endswith("n/a") for line in text.splitlines())


def test_summary_names_mixed_sources_with_breakdown() -> None:
    stats = LLMStats.empty()
    stats.add(
        ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=1.0, completion_tokens=TokenCount(2, TokenSource.SERVER))
    )
    stats.add(
        ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=1.0, completion_tokens=TokenCount(2, TokenSource.TOKENIZER))
    )
    text = format_summary(build_results(stats, run=RUN))
    assert "mixed: client-tokenized=1, server=1" in text


def test_summary_works_on_results_read_back_from_json(tmp_path: Path) -> None:
    results = build_results(_scenario(), run=RUN)
    path = tmp_path / "r.json"
    write_results_json(path, results)
    assert format_summary(json.loads(path.read_text())) == format_summary(results)


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
    stats = LLMStats.empty()
    for record in records:
        stats.add(record)
    return build_results(stats, run=RUN)["client"]


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


def test_summary_warns_about_read_lag_with_the_measured_figures():
    from llmload.exporters.run_summary import summary_lines

    stats = LLMStats.empty()
    stats.add(_with_reads([0.0005] * 90 + [0.004] * 10, 0))
    results = build_results(stats, run=RUN)
    results["client_saturated"] = True
    results["client_cpu_saturated_s"] = 0.0
    text = "\n".join(summary_lines(results))
    assert "Clock for arrival times:                kernel" in text
    assert "WARNING: latencies may include up to 4.0 ms (P99; max 4.0 ms) of client delay" in text
    assert "CPU > 90%" not in text  # the CPU was not the cause
