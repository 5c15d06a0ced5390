"""Rows of the web UI's LLM tabs (issue 10): the summary's figures per endpoint/model, the run's state."""

from __future__ import annotations

from llmload.aggregate.stats import LLMStats
from llmload.exporters.web_tables import (
    ENDPOINT_COLUMNS,
    RESET_IN_WEB_UI,
    RunFacts,
    endpoint_rows,
    reset_note,
    run_rows,
)
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource


def _ok(endpoint: str, e2e_s: float, completion: int) -> RequestRecord:
    return RequestRecord(
        endpoint=endpoint, model="m", started_at_unix=1_700_000_000.0,
        token_times_s=[0.05, 0.05 + e2e_s / 2], first_content_s=0.05, end_s=e2e_s,
        prompt_tokens=TokenCount(10, TokenSource.SERVER), completion_tokens=TokenCount(completion, TokenSource.SERVER),
    )  # fmt: skip


def _failed(message: str) -> RequestRecord:
    return RequestRecord(
        endpoint="chat", model="m", started_at_unix=1_700_000_000.0, outcome=Outcome.HTTP_ERROR,
        error=ErrorInfo("HTTP 500", message, 500), end_s=0.01,
    )  # fmt: skip


def test_endpoint_rows_one_per_pair_and_a_total_with_every_column() -> None:
    stats = LLMStats.empty()
    stats.add(_ok("chat", 0.2, 5))
    stats.add(_ok("completions", 0.4, 7))
    stats.add(_failed("boom"))
    rows = endpoint_rows(stats)
    assert [(r["endpoint"], r["succeeded"], r["failed"]) for r in rows] == [
        ("chat", "1", "1"),
        ("completions", "1", "0"),
        ("Total", "2", "1"),
    ]
    assert all(set(r) == {k for k, _ in ENDPOINT_COLUMNS} for r in rows)
    assert rows[-1]["completion_tokens"] == "12"


def test_endpoint_rows_single_pair_has_no_total_and_unknowns_are_na() -> None:
    stats = LLMStats.empty()
    stats.add(_failed("boom"))
    (row,) = endpoint_rows(stats)
    assert row["ttft_p99_ms"] == "n/a"
    assert row["failed"] == "1"


def test_run_rows_say_coverage_verdict_failures_and_metrics() -> None:
    stats = LLMStats.empty()
    stats.add(_failed("boom 1"))
    stats.add(_failed("boom 2"))
    facts = RunFacts(
        state="stopped", run_id="abc", reset_at="12:00:00", results={"verdict": "PASSED: ...", "exit_status": 0},
        metrics_url="http://0.0.0.0:9646/metrics",
    )  # fmt: skip
    rows = {r["item"]: r["value"] for r in run_rows(stats, facts)}
    assert rows["Statistics cover"] == "requests finished since RESET at 12:00:00"
    assert rows["Verdict"] == "PASSED: ..."
    assert rows["Failures: HTTP 500"] == "2 (e.g. boom 1)"
    assert rows["Prometheus"] == "http://0.0.0.0:9646/metrics"
    live = {r["item"]: r["value"] for r in run_rows(LLMStats.empty(), RunFacts(state="running"))}
    assert "Verdict" not in live
    assert live["Statistics cover"] == "the whole run"


def test_run_rows_say_the_verdict_is_pending_while_the_results_are_built() -> None:
    rows = {r["item"]: r["value"] for r in run_rows(LLMStats.empty(), RunFacts(state="stopped", ending=True))}
    assert rows["Verdict"].startswith("pending")


def test_endpoint_rows_of_a_mixed_run_show_embeddings_inputs_per_s_and_no_output_tokens() -> None:
    stats = LLMStats.empty()
    stats.add(_ok("chat", 0.2, 5))
    stats.add(_ok("responses", 0.4, 7))
    embeddings = RequestRecord(
        endpoint="embeddings", model="m", started_at_unix=1_700_000_000.0, end_s=0.5, streamed=False,
        prompt_tokens=TokenCount(30, TokenSource.SERVER), completion_tokens=TokenCount.unknown(), inputs=3,
    )  # fmt: skip
    stats.add(embeddings)
    rows = {r["endpoint"]: r for r in endpoint_rows(stats)}
    assert list(rows) == ["chat", "embeddings", "responses", "Total"]
    assert rows["embeddings"]["inputs_per_s"] == "6.00"  # 3 inputs over the 0.5 s it spans
    assert rows["embeddings"]["input_tokens_per_s"] == "60.00"
    assert rows["embeddings"]["output_tokens_per_s"] == "n/a"
    assert rows["embeddings"]["completion_tokens"] == "n/a"
    assert rows["chat"]["inputs_per_s"] == "n/a"
    assert rows["Total"]["completion_tokens"] == "12"  # embeddings add no output tokens, and leave the sum known
    assert rows["Total"]["prompt_tokens"] == "50"


def test_endpoint_rows_total_latency_of_a_mixed_run_is_over_the_generation_requests_and_says_so() -> None:
    """Issue 24: the LLM tab's Total row pooled the embeddings call's E2E (0.5 s) with chat's and responses'."""
    stats = LLMStats.empty()
    stats.add(_ok("chat", 0.2, 5))
    stats.add(_ok("responses", 0.4, 7))
    embeddings = RequestRecord(
        endpoint="embeddings", model="m", started_at_unix=1_700_000_000.0, end_s=5.0, streamed=False,
        prompt_tokens=TokenCount(30, TokenSource.SERVER), completion_tokens=TokenCount.unknown(), inputs=3,
    )  # fmt: skip
    stats.add(embeddings)
    rows = {r["endpoint"]: r for r in endpoint_rows(stats)}
    assert rows["Total"]["model"] == "latency: chat, responses"
    assert rows["Total"]["e2e_p99_ms"] == max(rows["chat"]["e2e_p99_ms"], rows["responses"]["e2e_p99_ms"], key=float)
    assert rows["embeddings"]["e2e_p99_ms"] == "5000.0"
    assert rows["Total"]["succeeded"] == "3"


def test_reset_note_says_what_was_reset_and_what_was_kept_in_plain_words():
    """Issue 24: the RESET line said only "statistics reset from the web UI" (also for --reset-stats, which
    is not the web UI). Now it names the cause, what was reset (server metrics only when scraped) and what was kept."""
    note = reset_note(RESET_IN_WEB_UI, server_metrics=False)
    assert note.startswith("llmload: RESET in the web UI: statistics reset. Reset: requests, latencies, tokens")
    assert "the time series, /metrics (its counters start again at 0, its live window empties)" in note
    assert "Kept: the run itself (users keep sending, and requests in flight now are counted when they finish)" in note
    assert "server-metrics" not in note
    ramp = reset_note("--reset-stats at the end of the ramp-up", server_metrics=True)
    assert ramp.startswith("llmload: --reset-stats at the end of the ramp-up: statistics reset.")
    assert "and the server-metrics figures (read again from now)" in ramp
