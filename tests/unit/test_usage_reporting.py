"""Reasoning vs answer tokens, cached prompt tokens, usage checks: stats → wire → results, summary, series, metrics."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry

from llmload.aggregate.stats import LLMStats
from llmload.exporters.console import format_summary
from llmload.exporters.prometheus_server import PrometheusExporter
from llmload.exporters.requests_log import RequestsLog
from llmload.exporters.timeseries import interval_rows
from llmload.request.payloads import build_chat_request
from llmload.request.preflight import ModelList, PreflightReport, probe
from llmload.request.record import TokenCount, TokenSource, UsageNote
from llmload.run import wire
from llmload.settings.config import RunConfig
from llmload.testing import CF, ROLE, C, U, ok_record, sse, stats_of
from llmload.testing import T0_UNIX as T0
from tests.unit.test_client import FakeResponse, FakeTransport
from tests.unit.test_prometheus import _view
from tests.unit.test_results import _results

CHAT = {"endpoint": "chat", "model": "m"}


def _reasoning_stats() -> LLMStats:
    hidden = ok_record(
        (0.5, 0.52, 0.54, 0.56),
        completion_tokens=104,
        prompt_tokens=12,
        reasoning_tokens=100,
        hidden_reasoning_tokens=100,
        cached_prompt_tokens=8,
        usage_notes=(UsageNote.HIDDEN_REASONING,),
    )
    plain = ok_record((0.1, 0.12), start_unix=T0 + 1.0, completion_tokens=2, prompt_tokens=12, reasoning_tokens=0)
    return stats_of(hidden, plain)


def test_usage_stats_count_reasoning_cached_and_notes():
    s = _reasoning_stats().total()
    assert (s.reasoning_tokens_sum, s.reasoning_known_requests, s.hidden_reasoning_tokens_sum) == (100, 2, 100)
    assert (s.cached_prompt_tokens_sum, s.cached_prompt_tokens_known_requests) == (8, 1)
    assert s.hidden_reasoning_requests == 1
    assert s.tpot_s.count == 2
    assert s.tpot_s.max is not None
    assert s.tpot_s.max < 0.03


def test_usage_stats_travel_on_the_wire():
    stats = _reasoning_stats()
    assert wire.from_wire(wire.to_wire(stats)) == stats


def test_usage_results_report_reasoning_vs_answer_and_cached_prompt():
    results = _results(_reasoning_stats())
    tok = results["tokens"]
    assert (tok["completion"], tok["reasoning"], tok["answer"]) == (106, 100, 6)
    assert (tok["hidden_reasoning"], tok["streamed_completion"]) == (100, 6)
    assert (tok["cached_prompt"], tok["cached_prompt_known_requests"]) == (8, 1)
    assert tok["usage_checks"]["hidden_reasoning"] == 1
    thr = results["throughput"]
    assert thr["streamed_output_tokens_per_s"] * 106 == thr["output_tokens_per_s"] * 6


def test_usage_results_unknown_details_are_null_not_zero():
    tok = _results(stats_of(ok_record()))["tokens"]
    assert (tok["reasoning"], tok["answer"], tok["cached_prompt"]) == (None, None, None)
    assert tok["streamed_completion"] == 3


def test_usage_results_count_the_logprobs_source():
    record = ok_record((0.1, 0.11, 0.12), completion_tokens=TokenCount(7, TokenSource.LOGPROBS))
    tok = _results(stats_of(record))["tokens"]
    assert (tok["completion_source"], tok["completion_sources"], tok["completion"]) == ("logprobs", {"logprobs": 1}, 7)


def test_usage_summary_shows_reasoning_cached_and_the_check():
    text = format_summary(_results(_reasoning_stats()))
    assert "Reasoning / answer tokens:" in text
    assert "100 / 6" in text
    assert "Reasoning tokens never streamed:" in text
    assert "Cached prompt tokens:" in text
    assert "NOTE: 1 request(s): usage's reasoning tokens were never streamed" in text


def test_usage_summary_of_an_older_results_file_has_no_usage_lines():
    results = _results(stats_of(ok_record()))
    for key in ("reasoning", "cached_prompt", "usage_checks"):
        results["tokens"].pop(key)
    text = format_summary(results)
    assert "Reasoning" not in text
    assert "Cached prompt" not in text


def test_usage_time_series_columns():
    total = interval_rows(0, _reasoning_stats(), 10.0)[0]
    assert (total["reasoning_tokens"], total["cached_prompt_tokens"]) == (100, 8)
    empty = interval_rows(0, stats_of(ok_record()), 10.0)[0]
    assert (empty["reasoning_tokens"], empty["cached_prompt_tokens"]) == (None, None)


def test_usage_prometheus_counters():
    registry = CollectorRegistry()
    view = _view(_reasoning_stats())
    PrometheusExporter(lambda: view, registry=registry)
    assert registry.get_sample_value("llmload_reasoning_tokens_total", CHAT) == 100
    assert registry.get_sample_value("llmload_hidden_reasoning_tokens_total", CHAT) == 100
    assert registry.get_sample_value("llmload_cached_prompt_tokens_total", CHAT) == 8
    checks = {**CHAT, "check": "hidden_reasoning"}
    assert registry.get_sample_value("llmload_usage_checks_total", checks) == 1
    logprobs = {**CHAT, "source": "logprobs"}
    assert registry.get_sample_value("llmload_completion_tokens_total", logprobs) == 0


def _reasoning_apart_stats() -> LLMStats:
    # reason_gt: completion_tokens 4 with reasoning_tokens 100: the server counts reasoning apart
    apart = ok_record(
        (0.5, 0.52, 0.54, 0.56),
        completion_tokens=4,
        prompt_tokens=12,
        reasoning_tokens=100,
        usage_notes=(UsageNote.REASONING_APART,),
    )
    inside = ok_record((0.1, 0.12), start_unix=T0 + 1.0, completion_tokens=5, prompt_tokens=12, reasoning_tokens=3)
    return stats_of(apart, inside)


def test_nc23_kind_reasoning_above_completion_answer_never_negative_everywhere():
    stats = _reasoning_apart_stats()
    s = stats.total()
    assert (s.reasoning_tokens_sum, s.reasoning_apart_tokens_sum, s.reasoning_apart_requests) == (103, 100, 1)
    assert s.answer_tokens == 4 + (5 - 3)  # not 9 - 103 = -94
    assert wire.from_wire(wire.to_wire(stats)) == stats
    results = _results(stats)
    tok = results["tokens"]
    assert (tok["completion"], tok["reasoning"], tok["answer"], tok["reasoning_apart"]) == (9, 103, 6, 100)
    assert tok["usage_checks"]["reasoning_apart"] == 1
    text = format_summary(results)
    assert "103 / 6" in text
    assert "NOTE: 1 request(s): usage's reasoning tokens exceed its completion_tokens" in text
    total = interval_rows(0, stats, 10.0)[0]
    assert (total["reasoning_tokens"], total["answer_tokens"]) == (103, 6)
    registry = CollectorRegistry()
    view = _view(stats)
    PrometheusExporter(lambda: view, registry=registry)
    assert registry.get_sample_value("llmload_reasoning_apart_tokens_total", CHAT) == 100
    assert registry.get_sample_value("llmload_usage_checks_total", {**CHAT, "check": "reasoning_apart"}) == 1
    assert ok_record(completion_tokens=4, reasoning_tokens=100).answer_tokens == 4
    assert ok_record(completion_tokens=5, reasoning_tokens=3).answer_tokens == 2


def test_usage_above_text_check_is_counted_and_noted():
    record = ok_record((0.5, 0.52, 0.54, 0.56), completion_tokens=40, usage_notes=(UsageNote.ABOVE_TEXT,))
    assert (record.streamed_tokens, record.tpot_s) == (None, None)
    results = _results(stats_of(record))
    assert results["tokens"]["usage_checks"]["usage_above_text"] == 1
    assert results["latency"]["tpot_s"]["count"] == 0
    assert results["throughput"]["output_tokens_per_s"] is not None  # still the server's count
    assert "NOTE: 1 request(s): usage counted more tokens than the streamed text can hold" in format_summary(results)


def test_usage_requests_log_has_per_request_reasoning_cached_and_notes(tmp_path):
    path = tmp_path / "req.jsonl"
    log = RequestsLog(str(path))
    log.write(
        ok_record(
            (0.5, 0.52),
            completion_tokens=12,
            reasoning_tokens=10,
            hidden_reasoning_tokens=10,
            cached_prompt_tokens=4,
            usage_notes=(UsageNote.HIDDEN_REASONING,),
        )
    )
    log.write(ok_record())
    log.close()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert (first["reasoning_tokens"], first["cached_prompt_tokens"], first["streamed_tokens"]) == (10, 4, 2)
    assert first["usage_notes"] == ["hidden_reasoning"]
    assert (second["reasoning_tokens"], second["cached_prompt_tokens"], second["usage_notes"]) == (None, None, [])


def _probe_with(reads: list[bytes]) -> PreflightReport:
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    transport = FakeTransport(FakeResponse(reads, 200, "text/event-stream"))
    return probe(transport, [("ChatUser", request)], RunConfig(), ModelList(("m",), {}), "m")


def _logprob_chunk(text: str, tokens: int) -> str:
    entries = [{"token": "t", "logprob": 0.0}] * tokens
    choice = {"index": 0, "delta": {"content": text}, "logprobs": {"content": entries}, "finish_reason": None}
    return json.dumps({"id": "c1", "choices": [choice]})


def test_usage_preflight_says_the_tokens_come_from_logprobs():
    report = _probe_with([sse(ROLE, _logprob_chunk("Hello there", 2), CF("stop"), "[DONE]")])
    assert any("come from the tokens listed in logprobs" in note for note in report.notes)
    assert not any("no usage" in warning for warning in report.warnings)


def test_usage_preflight_warns_when_usage_is_below_the_streamed_events():
    report = _probe_with([sse(ROLE, C({"content": "a"}), C({"content": "b"}), CF("stop"), U(3, 1), "[DONE]")])
    assert any("fewer tokens than it streamed events" in warning for warning in report.warnings)


# NC-20: the preflight probe reads content given as typed parts (it used to exit 2 on a str + list error).
def test_nc20_preflight_probe_reads_content_parts():
    parts = [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}, {"type": "text", "text": "42"}]
    report = _probe_with([sse(ROLE, C({"content": parts}), CF("stop"), U(3, 2), "[DONE]")])
    assert any("token counts come from the server" in note for note in report.notes)
    assert report.warnings == []


def _probe_whole(body: dict[str, object], config: RunConfig | None = None) -> PreflightReport:
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=False)
    transport = FakeTransport(FakeResponse([json.dumps(body).encode()], 200, "application/json"))
    return probe(transport, [("ChatUser", request)], config or RunConfig(), ModelList(("m",), {}), "m")


_WHOLE = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is 42"}, "finish_reason": "stop"}],
}


# NC-26 (kind: token counting without usage, --no-stream): a whole reply without usage:
# the preflight says so and what counts instead.
def test_nc26_kind_no_stream_preflight_warns_when_the_reply_has_no_usage():
    report = _probe_whole(_WHOLE)
    assert not any("token counts from the server's usage" in note for note in report.notes)
    assert report.warnings == [
        "ChatUser: non-streaming, the server sent no usage in its reply; token counts, output tok/s and "
        "total tok/s will be unavailable (n/a): pass --tokenizer PATH, or make the server return usage"
    ]
    with_usage = _probe_whole({**_WHOLE, "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}})
    assert "ChatUser: non-streaming; token counts from the server's usage" in with_usage.notes
    assert with_usage.warnings == []


# NC-26 (kind): usage with total_tokens alone is usage without completion_tokens, not "no usage".
def test_nc26_kind_preflight_names_usage_without_completion_tokens():
    chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 7}}
    total_only = json.dumps(chunk)
    report = _probe_with([sse(ROLE, C({"content": "Hi"}), C({"content": " there"}), CF("stop"), total_only, "[DONE]")])
    assert any("sent usage without completion_tokens in its stream" in w for w in report.warnings)
    assert not any("sent no usage" in w for w in report.warnings)
    whole = _probe_whole({**_WHOLE, "usage": {"total_tokens": 9}})
    assert any("sent usage without completion_tokens in its reply" in w for w in whole.warnings)


def test_nc26_kind_summary_warns_when_successes_had_no_output_token_count():
    record = ok_record(completion_tokens=TokenCount.unknown())
    text = format_summary(_results(stats_of(record, ok_record())))
    assert "WARNING: 1 successful request(s) had no output token count" in text
    assert "no output token count" not in format_summary(_results(stats_of(ok_record())))


def test_usage_detail_unreadable_check_is_counted_noted_exported_and_travels():
    """Issue 24: an unreadable usage detail is counted per success in the results, noted in the summary,
    exported as a usage check, and carried on the wire; the reasoning total stays unknown, never 0."""
    record = ok_record((0.5, 0.52), completion_tokens=2, usage_notes=(UsageNote.DETAIL_UNREADABLE,))
    stats = stats_of(record)
    assert wire.from_wire(wire.to_wire(stats)).total().usage_detail_unreadable_requests == 1
    results = _results(stats)
    tok = results["tokens"]
    assert tok["usage_checks"]["usage_detail_unreadable"] == 1
    assert (tok["reasoning"], tok["reasoning_known_requests"]) == (None, 0)
    assert "NOTE: 1 request(s): a usage detail (reasoning or cached prompt tokens) was not a token count" in (
        format_summary(results)
    )
    registry = CollectorRegistry()
    view = _view(stats)
    PrometheusExporter(lambda: view, registry=registry)
    checks = {**CHAT, "check": "usage_detail_unreadable"}
    assert registry.get_sample_value("llmload_usage_checks_total", checks) == 1
    cached = {**CHAT, "check": "cached_above_prompt"}
    assert registry.get_sample_value("llmload_usage_checks_total", cached) == 0
