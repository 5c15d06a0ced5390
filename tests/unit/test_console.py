"""exporters.console: the summary table and notes, rendered from a results document only."""

import json
from pathlib import Path

from llmload.aggregate.stats import LLMStats
from llmload.exporters.console import RESULTS_LINE_PREFIX, format_summary, results_line, summary_lines
from llmload.exporters.results import write_results_json
from llmload.request.record import TokenCount, TokenSource
from llmload.testing import T0_UNIX as T0
from llmload.testing import ok_record
from tests.unit.test_results import _results, _scenario, _with_reads


def test_summary_shows_counts_rates_and_latencies_in_ms() -> None:
    text = format_summary(_results(_scenario()))
    lines = text.splitlines()
    assert any(line.startswith("Successful requests:") and line.endswith("2/3 (33.3% failed)") for line in lines)
    assert any(line.startswith("Cancelled at stop (not counted):") and line.endswith(" 2") for line in lines)
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
    lines = format_summary(_results(_scenario())).splitlines()
    widths = {len(line) for line in lines if line.startswith(("Mean ", "P50 ", "P90 ", "P99 "))}
    assert widths == {52}


def test_summary_prints_na_for_unknowns() -> None:
    text = format_summary(_results(LLMStats.empty()))
    assert "Successful requests:" in text
    assert any(line.startswith("Mean TTFT (ms):") and line.endswith("n/a") for line in text.splitlines())
    assert any(line.startswith("Total input tokens:") and line.endswith("n/a") for line in text.splitlines())


def test_summary_names_mixed_sources_with_breakdown() -> None:
    stats = LLMStats.empty()
    stats.add(ok_record((0.1, 0.2), start_unix=T0, end_s=1.0, completion_tokens=TokenCount(2, TokenSource.SERVER)))
    stats.add(ok_record((0.1, 0.2), start_unix=T0, end_s=1.0, completion_tokens=TokenCount(2, TokenSource.TOKENIZER)))
    text = format_summary(_results(stats))
    assert "mixed: client-tokenized=1, server=1" in text


def test_summary_works_on_results_read_back_from_json(tmp_path: Path) -> None:
    results = _results(_scenario())
    path = tmp_path / "r.json"
    write_results_json(path, results)
    assert format_summary(json.loads(path.read_text())) == format_summary(results)


def test_a_read_lag_p99_just_above_the_limit_is_not_printed_as_the_limit():
    """P99 2.01 ms against a 2 ms limit was printed "up to 2.0 ms", which reads as within it."""
    stats = LLMStats.empty()
    stats.add(_with_reads([0.0005] * 90 + [0.00201] * 10, 0))
    results = _results(stats)
    assert results["client"]["read_lag_limit_s"] == 0.002
    text = "\n".join(summary_lines(results))
    assert "WARNING: latencies may include up to 2.01 ms (P99; max 2.0 ms)" in text


def test_summary_warns_about_read_lag_with_the_measured_figures():
    stats = LLMStats.empty()
    stats.add(_with_reads([0.0005] * 90 + [0.004] * 10, 0))
    results = _results(stats)
    results["client_saturated"] = True
    results["client_cpu_saturated_s"] = 0.0
    text = "\n".join(summary_lines(results))
    assert "Clock for arrival times:                kernel" in text
    assert "WARNING: latencies may include up to 4.0 ms (P99; max 4.0 ms) of client delay" in text
    assert "CPU > 90%" not in text  # the CPU was not the cause


def test_issue19_summary_warns_when_one_request_was_read_late_with_a_low_p99():
    stats = LLMStats.empty()
    for _ in range(199):
        stats.add(_with_reads([0.0002, 0.0003], 0))
    stats.add(_with_reads([0.0002, 0.1], 0))
    text = "\n".join(summary_lines(_results(stats)))
    assert "Requests maybe > 10 ms off:             1 of 200" in text
    assert "WARNING: 1 request(s) may have TTFT, ITL or E2E off by up to 100.0 ms (max; read lag P99 0.3 ms)" in text


def test_issue19_summary_warns_of_a_request_whose_send_the_kernel_held_with_every_read_on_time():
    stats = LLMStats.empty()
    for _ in range(199):
        stats.add(_with_reads([0.0002, 0.0003], 0))
    held = _with_reads([0.0002, 0.0003], 0)
    held.send_lag_s = 0.015
    stats.add(held)
    results = _results(stats)
    assert results["client"]["read_lag_saturated"] is False  # the reads were on time
    text = "\n".join(summary_lines(results))
    assert "Requests maybe > 10 ms off:             1 of 200" in text
    assert "WARNING: 1 request(s) may have TTFT, ITL or E2E off by up to 15.0 ms (max; read lag P99 0.3 ms)" in text
    assert "or the kernel held the client while it sent" in text


def test_issue19_summary_warning_gives_the_largest_request_lag_beside_a_high_read_lag_p99():
    # reads late at P99 (4 ms) and one request's send held 15 ms: the warning's max is the 15 ms
    stats = LLMStats.empty()
    stats.add(_with_reads([0.0005] * 90 + [0.004] * 10, 0))
    held = _with_reads([0.0005], 0)
    held.send_lag_s = 0.015
    stats.add(held)
    text = "\n".join(summary_lines(_results(stats)))
    assert "Requests maybe > 10 ms off:             1 of 2" in text
    assert "WARNING: latencies may include up to 4.0 ms (P99; max 15.0 ms) of client delay" in text


def test_issue19_summary_of_a_run_read_in_time_has_no_lag_warning():
    stats = LLMStats.empty()
    stats.add(_with_reads([0.0002, 0.0003], 0))
    text = "\n".join(summary_lines(_results(stats)))
    assert "late" not in text
    assert "WARNING" not in text


def test_issue19_summary_gives_ttft_with_connect_beside_ttft_from_the_send():
    stats = LLMStats.empty()
    record = ok_record(start_unix=T0, times_s=(0.05, 0.06), end_s=0.07)
    record.connect_s = 0.02
    stats.add(record)
    text = "\n".join(summary_lines(_results(stats)))
    assert "Mean TTFT (ms):                                50.00" in text
    assert "Mean TTFT incl. connect (ms):                  70.00" in text
    assert "P99 TTFT incl. connect (ms):                   70.00" in text
    assert "TTFT: from the send. Incl. connect: from before" in text
    assert all(len(line) <= 52 for line in text.splitlines() if "connect" in line)


def test_results_line_is_one_marked_line_that_reads_back_as_the_document() -> None:
    results = _results(_scenario())
    line = results_line(results)
    assert "\n" not in line
    assert line.startswith(RESULTS_LINE_PREFIX)
    assert json.loads(line.removeprefix(RESULTS_LINE_PREFIX)) == results


def test_summary_server_block_prints_the_cross_check_and_ttft_split_under_a_header_as_wide_as_the_others() -> None:
    from llmload.exporters.results import RunOutcome, build_results
    from llmload.servermetrics import Endpoint, parse_snapshot, summarise
    from tests.unit.test_results import CONFIG
    from tests.unit.test_servermetrics import run_of, vllm_text

    client = build_results(RunOutcome(_scenario(), config=CONFIG))["tokens"]
    prompt, completion = client["prompt"], client["completion"]
    at_end = vllm_text(prompt, completion, (1, 2, 2), 0.19, running=3)
    target = run_of(vllm_text(0, 0, (0, 0, 0), 0), at_end)
    target.run.add(parse_snapshot(at_end, model="m"), sample_gauges=True)  # one gauge sample under load
    hanging = Endpoint(url="http://127.0.0.1:9/metrics", failed_scrapes=2, error="no answer within 2 s")
    results = build_results(RunOutcome(_scenario(), config=CONFIG, server=summarise([target, hanging])))
    lines = summary_lines(results)
    text = "\n".join(lines)
    assert "--- Server (vllm) " in text
    assert any(
        line.startswith("Metrics scraped from:") and line.endswith(" http://127.0.0.1:1/metrics") for line in lines
    )
    headers = [line for line in text.splitlines() if line.startswith("--- ")]
    assert len(headers) >= 6  # the latency blocks and the server block
    assert {len(line) for line in headers} == {len(headers[0])}  # the server block's dashes match the others
    assert all(line.endswith(" ---") or line.endswith("----") for line in headers)
    assert any(line.startswith("Running requests mean / max:") and line.endswith("3.0 / 3.0") for line in lines)
    assert "Tokens: client = server" in text
    ttft_split = next(line for line in lines if line.startswith("TTFT client − server mean / p50 (ms):"))
    assert ttft_split.endswith("+105.00 / n/a (network + HTTP + client time)") or "+105.00" in ttft_split
    assert (
        "WARNING: server metrics incomplete; failed scrapes: http://127.0.0.1:9/metrics (no answer within 2 s)" in text
    )
    assert lines[-1] == results["verdict"]  # the verdict stays last


def test_summary_warns_about_a_server_metrics_url_that_never_answered() -> None:
    from llmload.exporters.results import RunOutcome, build_results
    from tests.unit.test_results import CONFIG

    warning = "--server-metrics http://127.0.0.1:9/metrics never answered with Prometheus text (2 scrape(s) failed"
    results = build_results(RunOutcome(_scenario(), config=CONFIG, server=None, server_warnings=(warning,)))
    assert results["server"] is None
    assert results["server_warnings"] == [warning]
    lines = summary_lines(results)
    assert f"WARNING: {warning}" in lines
    assert "--- Server" not in "\n".join(lines)
    assert lines[-1] == results["verdict"]


def test_nc24_summary_server_block_names_unmapped_llm_families_instead_of_no_token_counters() -> None:
    from llmload.exporters.results import RunOutcome, build_results
    from llmload.servermetrics import summarise
    from tests.unit.test_results import CONFIG
    from tests.unit.test_servermetrics import run_of

    page = "myllm_prompt_tokens_total 5\nmyllm_time_to_first_token_seconds_count 1\nuptime_seconds 9\n"
    results = build_results(RunOutcome(_scenario(), config=CONFIG, server=summarise([run_of(page, page)])))
    assert results["server"]["unmapped_families"] == ["myllm_prompt_tokens", "myllm_time_to_first_token_seconds"]
    text = "\n".join(summary_lines(results))
    assert "--- Server (unknown) " in text
    assert "server has no token counters" not in text
    tokens = next(line for line in text.splitlines() if line.startswith("Tokens: "))
    assert "LLM-looking metrics no mapping knows: myllm_prompt_tokens, myllm_time_to_first_token_seconds" in tokens


def test_console_summary_shows_the_trace_schedule_lag_and_ttft_by_session_turn():
    from tests.unit.test_readme_schema import MODES

    trace = "\n".join(summary_lines(MODES["trace"]()))
    assert "--- Trace replay" in trace
    assert "Schedule lag p99 / max (ms):            1.00 / 1.00" in trace
    sessions = "\n".join(summary_lines(MODES["sessions"]()))
    assert "Completed / failed:                     3 / 0" in sessions
    assert "Mean TTFT by turn (ms):                 1: 100.0, 2: 100.0" in sessions


def test_summary_warns_when_the_run_ended_before_its_num_requests_were_sent() -> None:
    """-t cut a --num-requests run (or a trace) short: the summary says how many were never sent (5 of 20)."""
    results = _results(_scenario())  # 3 finished + 2 cancelled = 5 sent
    results["run"]["num_requests"] = 20
    text = "\n".join(summary_lines(results))
    assert (
        "the run ended before it sent all its requests: 5 of 20 (--num-requests); the other 15 were never sent" in text
    )
    results["load"] = {"mode": "trace"}
    assert "5 of 20 (trace lines)" in "\n".join(summary_lines(results))
    results["run"]["num_requests"] = 5  # all sent: nothing to say
    assert "never sent" not in "\n".join(summary_lines(results))
    results["run"]["num_requests"] = None
    assert "never sent" not in "\n".join(summary_lines(results))


def test_summary_warns_about_successes_that_named_no_finish_reason() -> None:
    """[DONE] without any finish_reason (or "" / null) passes, but never silently: counted and warned about."""
    stats = LLMStats.empty()
    stats.add(ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=0.3, finish_reason=None))
    done = ok_record(start_unix=T0, times_s=(0.1, 0.2), end_s=0.3)  # "stop"
    stats.add(done)
    embedded = ok_record(start_unix=T0, times_s=(0.1,), end_s=0.2, endpoint="embeddings", finish_reason=None)
    stats.add(embedded)
    results = _results(stats)
    assert results["requests"]["without_finish_reason"] == 1
    text = "\n".join(summary_lines(results))
    assert "WARNING: 1 successful replies named no finish reason" in text
    stats2 = LLMStats.empty()
    stats2.add(done)
    assert "named no finish reason" not in "\n".join(summary_lines(_results(stats2)))


def test_issue24_open_loop_summary_labels_target_sent_and_completed_rates() -> None:
    """'Target / achieved rate inf / 5.28' beside 'Request throughput 3.05' read as two figures for one thing."""
    from tests.unit.test_readme_schema import open_loop

    results = open_loop()
    lines = summary_lines(results)
    assert not any("Target / achieved" in line for line in lines)
    assert "Target rate (req/s):                    10" in lines
    assert f"Request rate sent (req/s):              {results['load']['achieved_rate_per_s']:.2f}" in lines
    assert f"Request rate completed (req/s):         {results['throughput']['requests_per_s']:.2f}" in lines
    unlimited = {**results["load"], "unlimited_rate": True, "target_rate_per_s": None}  # --request-rate inf
    lines = summary_lines({**results, "load": unlimited})
    assert "Target rate (req/s):                    inf (every request eligible at once)" in lines


def test_open_loop_summary_with_an_unlimited_rate_says_the_users_bounded_concurrency() -> None:
    """--request-rate inf: the summary said inf but not that -u N capped the load."""
    from tests.unit.test_readme_schema import open_loop

    results = open_loop()
    load = {**results["load"], "unlimited_rate": True, "target_rate_per_s": None}
    by_users = {**load, "in_flight_cap": 4, "in_flight_cap_by": "users"}
    lines = summary_lines({**results, "load": by_users})
    row = (
        "Concurrency bound:                      -u 4 users "
        "(rate unlimited: at most 4 requests in flight, one per user)"
    )
    assert row in lines
    assert (
        lines.index(row)
        == lines.index("Target rate (req/s):                    inf (every request eligible at once)") + 1
    )
    by_cap = {**load, "in_flight_cap": 2, "in_flight_cap_by": "max_concurrency"}
    assert any(
        line.endswith("--max-concurrency 2 (rate unlimited: at most 2 requests in flight, fewer than the users)")
        for line in summary_lines({**results, "load": by_cap})
    )
    one = {**load, "in_flight_cap": 1, "in_flight_cap_by": "users"}
    assert any(
        line.endswith("-u 1 user (rate unlimited: at most 1 request in flight, one per user)")
        for line in summary_lines({**results, "load": one})
    )
    assert not any(line.startswith("Concurrency bound:") for line in summary_lines(results))  # a finite rate


def test_ttft_split_of_a_difference_that_rounds_to_zero_has_no_minus_sign_and_no_negative_gloss():
    # found by a new-user walk: "-0.00 / n/a ... (negative: the server's TTFT spans more ...)"
    from llmload.exporters.console import ttft_split_row

    def row(mean_s: float) -> str:
        split = {"mean": mean_s, "p50": None, "p50_resolution_s": 0.1}
        return ttft_split_row({"cross_check": {"ttft_client_minus_server_s": split}})[1]

    assert row(-0.000001).startswith("+0.00 / n/a")
    assert row(-0.000001).endswith("(network + HTTP + client time)")
    assert row(-0.00002).startswith("-0.02 / n/a")
    assert "(negative: the server's TTFT spans more" in row(-0.00002)
    assert row(0.0123).startswith("+12.30 / n/a")
