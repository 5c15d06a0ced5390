"""Figures of the other APIs (responses, messages, embeddings) per endpoint: stats, wire, results, Prometheus."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from llmload.aggregate.stats import LLMStats
from llmload.exporters.console import format_summary
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.results import RunOutcome, build_results
from llmload.exporters.window import RunView
from llmload.request.record import TokenCount
from llmload.run.wire import from_wire, to_wire
from llmload.testing import T0_UNIX as T0
from llmload.testing import ok_record


def _stats() -> LLMStats:
    stats = LLMStats.empty()
    for i in range(3):
        stats.add(ok_record(start_unix=T0 + i, endpoint="responses", completion_tokens=3))
        stats.add(ok_record((), end_s=0.05, start_unix=T0 + i, endpoint="embeddings", prompt_tokens=12,
                            completion_tokens=0, inputs=4, streamed=False))  # fmt: skip
    stats.add(ok_record(start_unix=T0 + 3, endpoint="chat"))
    return stats


def test_embedding_inputs_add_up_and_travel_on_the_wire():
    stats = _stats()
    assert stats.get("embeddings", "m").inputs_sum == 12
    assert stats.get("responses", "m").inputs_sum == 0
    assert from_wire(to_wire(stats)) == stats


def test_results_per_endpoint_sum_to_totals_and_give_inputs_per_s():
    stats = _stats()
    results = build_results(RunOutcome(stats, run_id="r1", host="http://h", model="m", started_at_unix=T0))
    entries = {e["endpoint"]: e for e in results["by_endpoint"]}
    assert set(entries) == {"chat", "responses", "embeddings"}
    assert sum(e["requests"]["succeeded"] for e in entries.values()) == results["requests"]["succeeded"] == 7
    assert sum(e["tokens"]["prompt"] for e in entries.values()) == results["tokens"]["prompt"]
    embeddings = entries["embeddings"]
    duration_s = embeddings["duration_s"]
    assert embeddings["throughput"]["inputs_per_s"] == 12 / duration_s
    assert embeddings["throughput"]["input_tokens_per_s"] == 36 / duration_s
    assert entries["responses"]["throughput"]["inputs_per_s"] is None
    summary = format_summary(results)
    assert "--- Per endpoint ---" in summary
    assert "embeddings (m): 3/3 ok" in summary
    assert "inputs/s" in summary


def test_prometheus_families_are_labelled_by_the_new_endpoints():
    stats = _stats()
    view = RunView(stats=stats, window=None, users=0, in_flight_requests=0, workers=0, run_id="r1",
                   host="http://h", model="m", version="9")  # fmt: skip
    registry = CollectorRegistry()
    PrometheusExporter(lambda: view, registry=registry)
    for endpoint, n in (("responses", 3), ("embeddings", 3), ("chat", 1)):
        labels = {"endpoint": endpoint, "model": "m", "outcome": "ok"}
        assert registry.get_sample_value("llmload_requests_total", labels) == n
    assert registry.get_sample_value("llmload_prompt_tokens_total", {"endpoint": "embeddings", "model": "m"}) == 36


def _embeddings_record(start_unix: float):
    from llmload.request.record import TokenCount

    return ok_record((), end_s=0.05, start_unix=start_unix, endpoint="embeddings", prompt_tokens=12,
                     completion_tokens=TokenCount.unknown(), inputs=4, streamed=False)  # fmt: skip


def test_embeddings_have_no_output_tokens_and_the_summary_shows_inputs_per_s():
    stats = LLMStats.empty()
    for i in range(3):
        stats.add(_embeddings_record(T0 + i))
    results = build_results(RunOutcome(stats, run_id="r1", host="http://h", model="m", started_at_unix=T0))
    tokens, throughput = results["tokens"], results["throughput"]
    assert tokens["completion"] is None  # not applicable: never 0
    assert tokens["completion_sources"] == {}  # and not "unknown" either
    assert throughput["output_tokens_per_s"] is None
    assert throughput["inputs_per_s"] == 12 / results["duration_s"]
    summary = format_summary(results)
    assert "Output token throughput" not in summary
    assert "Total generated tokens" not in summary
    assert "had no output token count" not in summary
    assert f"Embedded inputs/s:{'':>1}" in summary or "Embedded inputs/s:" in summary
    assert summary.count("Embedded inputs/s:") == 1
    assert "Input token throughput (tok/s):" in summary
    assert f"{36 / results['duration_s']:.2f}" in summary


def test_embeddings_in_a_mixed_run_leave_output_totals_to_the_generating_requests():
    stats = LLMStats.empty()
    for i in range(3):
        stats.add(ok_record(start_unix=T0 + i, endpoint="responses", completion_tokens=3))
        stats.add(_embeddings_record(T0 + i))
    results = build_results(RunOutcome(stats, run_id="r1", host="http://h", model="m", started_at_unix=T0))
    tokens = results["tokens"]
    assert tokens["completion"] == 9
    assert tokens["avg_completion_per_request"] == 3.0  # over the three responses, not all six successes
    assert tokens["completion_source"] == "server"
    entries = {e["endpoint"]: e for e in results["by_endpoint"]}
    assert entries["embeddings"]["tokens"]["completion"] is None
    assert entries["responses"]["tokens"]["completion"] == 9
    summary = format_summary(results)
    assert "Output token throughput (tok/s):" in summary
    assert "had no output token count" not in summary
    assert from_wire(to_wire(stats)) == stats


def test_html_report_has_a_per_endpoint_table_with_inputs_per_s_for_embeddings():
    import re

    from llmload.exporters.html import render_report

    stats = LLMStats.empty()
    for i in range(3):
        stats.add(ok_record(start_unix=T0 + i, endpoint="responses", completion_tokens=3))
        stats.add(_embeddings_record(T0 + i))
    stats.add(ok_record(start_unix=T0 + 3, endpoint="chat"))
    results = build_results(RunOutcome(stats, run_id="r1", host="http://h", model="m", started_at_unix=T0))
    page = render_report([results])
    rows = dict(re.findall(r'<tr data-endpoint="(\w+)">(.*?)</tr>', page, re.S))
    assert sorted(rows) == ["chat", "embeddings", "responses"]
    cells = {name: re.findall(r'<td class="num">([^<]*)</td>', row) for name, row in rows.items()}
    # Succeeded, Failed, Req/s, Output tok/s, Input tok/s, Inputs/s, TTFT p50, TTFT p99, E2E p50
    embeddings, responses = cells["embeddings"], cells["responses"]
    assert embeddings[:2] == ["3", "0"]
    assert embeddings[3] == "n/a"  # no output tokens
    entry = next(e for e in results["by_endpoint"] if e["endpoint"] == "embeddings")
    assert float(embeddings[5].replace(",", "")) == pytest.approx(entry["throughput"]["inputs_per_s"], rel=0.01)
    assert responses[5] == "n/a"
    assert responses[3] != "n/a"


def test_time_series_rows_of_embeddings_have_no_output_tokens_and_totals_still_add_up():
    from llmload.exporters.timeseries import interval_rows

    stats = LLMStats.empty()
    for i in range(3):
        stats.add(ok_record(start_unix=T0 + i, endpoint="responses", completion_tokens=3))
        stats.add(_embeddings_record(T0 + i))
    rows = {row["endpoint"]: row for row in interval_rows(0, stats, 1.0)}
    assert rows["embeddings"]["output_tokens"] is None  # not applicable, never 0
    assert rows["embeddings"]["output_tokens_per_s"] is None
    assert rows["embeddings"]["prompt_tokens"] == 36
    assert rows["responses"]["output_tokens"] == 9
    assert rows[None]["output_tokens"] == 9  # the total row: the generating requests' tokens
    assert rows[None]["prompt_tokens"] == rows["embeddings"]["prompt_tokens"] + rows["responses"]["prompt_tokens"]


def test_embeddings_replies_without_usage_are_counted_and_warned_about_once():
    """Issue 24: an EmbeddingsUser reply without usage left input tokens unknown with no warning. Now the
    summary (and so the HTML report) warns once, naming how many replies and on which endpoint; the count
    is tokens.prompt_sources.unknown, and the unknown inputs are left out of the totals, never added as 0."""
    stats = LLMStats.empty()
    unknown = TokenCount.unknown()
    for i in range(3):
        stats.add(ok_record((), end_s=0.05, start_unix=T0 + i, endpoint="embeddings", prompt_tokens=unknown,
                            completion_tokens=0, inputs=4, streamed=False))  # fmt: skip
    stats.add(ok_record((), end_s=0.05, start_unix=T0 + 3, endpoint="embeddings", prompt_tokens=12,
                        completion_tokens=0, inputs=4, streamed=False))  # fmt: skip
    stats.add(ok_record(start_unix=T0 + 3, endpoint="chat"))
    results = build_results(RunOutcome(stats))
    assert results["tokens"]["prompt_sources"] == {"server": 2, "unknown": 3}
    embeddings = next(e for e in results["by_endpoint"] if e["endpoint"] == "embeddings")
    assert embeddings["tokens"]["prompt"] == 12
    warnings = [line for line in format_summary(results).splitlines() if "no input token count" in line]
    assert warnings == [
        "WARNING: 3 successful request(s) (embeddings 3) had no input token count (the reply carried no usage, "
        "e.g. an embeddings reply without usage.prompt_tokens, and no --tokenizer): input tok/s and the input "
        "token totals leave them out; pass --tokenizer PATH or make the server return usage."
    ]
    assert "no input token count" not in format_summary(build_results(RunOutcome(_stats())))


def test_prometheus_embeddings_have_no_completion_or_token_time_series_not_zeros():
    """Issue 24: /metrics showed llmload_completion_tokens_total{endpoint="embeddings"} 0 (and empty TTFT,
    ITL, TPOT histograms) although embeddings generate nothing; the module promised those families stay empty."""
    view = RunView(stats=_stats(), window=None, users=0, in_flight_requests=0, workers=0, run_id="r1",
                   host="http://h", model="m", version="9")  # fmt: skip
    registry = CollectorRegistry()
    PrometheusExporter(lambda: view, registry=registry)
    embeddings = {"endpoint": "embeddings", "model": "m"}
    assert registry.get_sample_value("llmload_completion_tokens_total", {**embeddings, "source": "server"}) is None
    for name in ("time_to_first_token", "inter_token_latency", "time_per_output_token"):
        assert registry.get_sample_value(f"llmload_{name}_seconds_count", embeddings) is None
    assert registry.get_sample_value("llmload_request_duration_seconds_count", embeddings) == 3
    chat = {"endpoint": "chat", "model": "m"}
    assert registry.get_sample_value("llmload_completion_tokens_total", {**chat, "source": "server"}) is not None
    assert registry.get_sample_value("llmload_time_to_first_token_seconds_count", chat) == 1


def _mixed_chat_and_embeddings() -> LLMStats:
    """3 chat replies of 1.0 s E2E and 9 embeddings calls of 0.05 s: pooled, E2E p50 would be an embeddings call's."""
    stats = LLMStats.empty()
    for i in range(3):
        stats.add(ok_record((0.2, 0.6, 0.98), end_s=1.0, start_unix=T0 + i, endpoint="chat"))
    for i in range(9):
        stats.add(_embeddings_record(T0 + i / 3))
    return stats


def test_mixed_run_top_level_latency_is_over_its_generation_requests_and_says_so():
    """Issue 24: a run mixing embeddings with chat (locustfiles/mixed.py) pooled the embeddings' E2E with the
    chat replies' in the top-level latency: E2E p50 0.05 s (an embeddings call) and p99 1.0 s, describing no
    request kind. Now the top-level latency is over the generation requests, ``latency_endpoints`` says which,
    the embeddings keep theirs per endpoint, and the summary labels the latency sections."""
    results = build_results(RunOutcome(_mixed_chat_and_embeddings(), run_id="r1", host="http://h", model="m",
                                       started_at_unix=T0))  # fmt: skip
    e2e = results["latency"]["e2e_s"]
    assert e2e["count"] == 3  # the chat replies only
    assert e2e["p50"] == pytest.approx(1.0, rel=0.05)
    assert e2e["mean"] == pytest.approx(1.0)
    assert results["latency_endpoints"] == ["chat"]
    assert results["latency"]["ttft_s"]["count"] == 3
    assert [point[0] for point in results["latency_cdf"]["e2e_s"]] == pytest.approx([1.0], rel=0.05)
    entries = {e["endpoint"]: e for e in results["by_endpoint"]}
    assert entries["embeddings"]["latency"]["e2e_s"]["count"] == 9
    assert entries["embeddings"]["latency"]["e2e_s"]["mean"] == pytest.approx(0.05)
    assert results["requests"]["succeeded"] == 12  # counts and rates stay the run's
    summary = format_summary(results)
    assert "Latency below: generation requests only\n  (chat; embeddings: see Per endpoint)" in summary
    assert "Mean E2E (ms):" in summary
    assert f"{1000.0:.2f}" in summary.split("Mean E2E (ms):")[1].splitlines()[0]


def test_embeddings_only_run_top_level_latency_is_its_embeddings_and_has_no_scope_line():
    stats = LLMStats.empty()
    for i in range(3):
        stats.add(_embeddings_record(T0 + i))
    results = build_results(RunOutcome(stats, run_id="r1", host="http://h", model="m", started_at_unix=T0))
    assert results["latency_endpoints"] == ["embeddings"]
    assert results["latency"]["e2e_s"]["count"] == 3
    assert "generation requests only" not in format_summary(results)


def test_mixed_run_drift_e2e_is_over_its_generation_requests():
    """Embeddings calls of 2.0 s (large batches) beside chat replies of 1.0 s: the drift's E2E p99 was 2.0 s."""
    from llmload.aggregate.series import IntervalSeries
    from llmload.exporters.drift import drift_section

    series = IntervalSeries.empty()
    for index in range(20):
        for _ in range(3):
            series.add(index, ok_record((0.2, 0.6, 0.98), end_s=1.0, start_unix=T0 + index, endpoint="chat"))
            series.add(index, ok_record((), end_s=2.0, start_unix=T0 + index, endpoint="embeddings",
                                        completion_tokens=TokenCount.unknown(), inputs=4, streamed=False))  # fmt: skip
    drift = drift_section(series, 10.0, 200.0)
    e2e = drift["metrics"]["e2e_p99_s"]
    assert e2e["first"] == pytest.approx(1.0, rel=0.05)
    assert e2e["last"] == pytest.approx(1.0, rel=0.05)
    assert e2e["samples"] == [6, 6]  # the chat replies of each stretch (2 intervals)


def test_mixed_run_html_report_says_its_latency_is_over_the_generation_requests():
    from llmload.exporters.html import render_report

    results = build_results(RunOutcome(_mixed_chat_and_embeddings(), run_id="r1", host="http://h", model="m",
                                       started_at_unix=T0))  # fmt: skip
    page = render_report([results])
    assert "latency (table and distributions) is over the generation requests (chat); embeddings:" in page


def test_mixed_run_timeseries_total_row_latency_is_over_its_generation_requests():
    """The time series' total rows pooled the embeddings' E2E with chat's too (e2e_p50_s of an embeddings
    call); an interval in which only embeddings finished showed theirs as the run's latency."""
    from llmload.aggregate.series import IntervalSeries
    from llmload.exporters.timeseries import series_rows

    series = IntervalSeries.empty()
    for _ in range(3):
        series.add(0, ok_record((0.2, 0.6, 0.98), end_s=1.0, endpoint="chat"))
    for index in (0, 1):
        for _ in range(9):
            series.add(index, _embeddings_record(T0))
    rows = series_rows(series, 10.0, end_s=19.5)
    totals = [row for row in rows if row["endpoint"] is None]
    assert [row["e2e_p50_s"] for row in totals] == [pytest.approx(1.0, rel=0.05), None]
    assert [row["succeeded"] for row in totals] == [12, 9]  # counts stay every request's
    per_key = {(row["t"], row["endpoint"]): row for row in rows if row["endpoint"] is not None}
    assert per_key[(10.0, "embeddings")]["e2e_p50_s"] == pytest.approx(0.05, rel=0.05)
    alone = IntervalSeries.empty()
    alone.add(0, _embeddings_record(T0))
    assert series_rows(alone, 10.0, end_s=9.5)[0]["e2e_p50_s"] == pytest.approx(0.05, rel=0.05)
