"""--slo parsing, the per-request goodput test, goodput counters through stats/wire/report, BC-16 warning."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from llmload.aggregate.stats import LLMStats
from llmload.errors import ConfigError, WireFormatError
from llmload.exporters.console import format_summary
from llmload.exporters.results import RunOutcome, build_results
from llmload.request.record import RequestRecord
from llmload.run.wire import from_wire, to_wire
from llmload.settings.config import RunConfig
from llmload.settings.goodput import SLO, parse_slo
from llmload.testing import T0_UNIX, failed_record, ok_record, spaced_s


def _results(stats: LLMStats, slo: SLO | None = None) -> dict[str, Any]:
    return build_results(RunOutcome(stats, config=dataclasses.replace(RunConfig(), slo=slo)))


# ── parsing ─────────────────────────────────────────────────────────────────
def test_parse_slo_reads_every_objective_in_seconds():
    assert parse_slo("ttft=0.5,tpot=0.05,e2e=10") == SLO(ttft_s=0.5, tpot_s=0.05, e2e_s=10.0)


def test_parse_slo_accepts_a_subset_and_spaces():
    assert parse_slo(" TTFT = 0.2 ") == SLO(ttft_s=0.2)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("ttft=0", "ttft must be a positive number of seconds, got '0'"),
        ("ttft=-1", "got '-1'"),
        ("e2e=inf", "got 'inf'"),
        ("tpot=nan", "got 'nan'"),
        ("tpot=fast", "got 'fast'"),
        ("itl=0.1", "NAME one of ttft, tpot, e2e"),
        ("ttft", "is not NAME=SECONDS"),
        ("ttft=1,ttft=2", "sets ttft twice"),
        (",", "needs at least one objective"),
    ],
)
def test_parse_slo_rejects_bad_parts_with_an_example(raw, fragment):
    with pytest.raises(ConfigError) as info:
        parse_slo(raw)
    assert fragment in str(info.value)
    assert "--slo" in str(info.value)


def test_run_config_parses_slo_option():
    config = RunConfig.from_options(argparse.Namespace(prompt="p", max_tokens="8", slo="e2e=2"))
    assert config.slo == SLO(e2e_s=2.0)
    assert RunConfig.from_options(argparse.Namespace(prompt="p", max_tokens="8", slo="")).slo is None


# ── per-request test ────────────────────────────────────────────────────────
def test_slo_met_by_request_within_every_limit():
    record = ok_record(spaced_s(0.1, 0.01, 5))
    assert record.tpot_s == pytest.approx(0.01)
    assert SLO(ttft_s=0.2, tpot_s=0.02, e2e_s=1.0).met_by(record)


@pytest.mark.parametrize("slo", [SLO(ttft_s=0.09), SLO(tpot_s=0.009), SLO(e2e_s=0.1)])
def test_slo_missed_when_one_metric_is_over_its_limit(slo):
    assert not slo.met_by(ok_record(spaced_s(0.1, 0.01, 5)))


def test_slo_never_met_by_a_failed_request():
    assert not SLO(e2e_s=100.0).met_by(failed_record())


def test_slo_undefined_tpot_of_one_token_reply_does_not_violate():
    record = ok_record(spaced_s(0.1, 0.01, 1))
    assert record.tpot_s is None
    assert SLO(tpot_s=0.001).met_by(record)


def test_slo_as_dict_lists_only_set_objectives():
    assert SLO(ttft_s=0.5, e2e_s=10.0).as_dict() == {"ttft_s": 0.5, "e2e_s": 10.0}


# ── counters, merge, wire, results ──────────────────────────────────────────
def _stats(records: list[RequestRecord], slo: SLO) -> LLMStats:
    stats = LLMStats.empty()
    for record in records:
        stats.add(record, met_slo=slo.met_by(record))
    return stats


def test_goodput_counts_requests_meeting_every_objective_and_merges():
    slo = SLO(ttft_s=0.15)
    a = _stats(
        [
            ok_record(spaced_s(0.1, 0.01, 5)),
            ok_record(spaced_s(0.2, 0.01, 5)),
        ],
        slo,
    )
    b = _stats([ok_record(spaced_s(0.05, 0.01, 5)), failed_record()], slo)
    merged = a.merge(b)
    assert merged.total().slo_met_requests == 2
    assert merged == b.merge(a)
    assert merged.merge(LLMStats.empty()) == merged


def test_goodput_counter_survives_the_wire():
    stats = _stats(
        [
            ok_record(spaced_s(0.1, 0.01, 5)),
            ok_record(spaced_s(0.3, 0.01, 5)),
        ],
        SLO(ttft_s=0.2),
    )
    payload = to_wire(stats)
    assert payload["endpoints"][0]["counters"] == {"slo_met_requests": 1}
    assert from_wire(payload) == stats


def test_wire_rejects_unknown_counter_name():
    payload = to_wire(_stats([ok_record(spaced_s(0.1, 0.01, 5))], SLO(ttft_s=1.0)))
    payload["endpoints"][0]["counters"]["bogus"] = 1
    with pytest.raises(WireFormatError, match="counters"):
        from_wire(payload)


def test_wire_accepts_payload_without_counters():
    payload = to_wire(_stats([ok_record(spaced_s(0.1, 0.01, 5))], SLO(ttft_s=0.01)))
    del payload["endpoints"][0]["counters"]
    assert from_wire(payload).total().succeeded == 1


def test_results_goodput_rate_and_share_count_failures_as_missed():
    slo = SLO(ttft_s=0.15, e2e_s=5.0)
    stats = _stats(
        [
            ok_record(spaced_s(0.1, 0.01, 5)),
            ok_record(spaced_s(0.1, 0.01, 5)),
            ok_record(spaced_s(0.5, 0.01, 5)),
            failed_record(start_unix=T0_UNIX + 0.5),
        ],
        slo,
    )
    results = _results(stats, slo)
    duration_s = results["duration_s"]
    assert duration_s == pytest.approx(0.5 + 0.05)  # failed request sent at +0.5 s, ended 0.05 s later
    assert results["goodput"] == {
        "requests_per_s": pytest.approx(2 / duration_s),
        "share": 0.5,
        "requests": 2,
        "slo": {"ttft_s": 0.15, "e2e_s": 5.0},
    }
    summary = format_summary(results)
    assert "Goodput (req/s, SLO ttft=0.15,e2e=5):" in summary
    assert "2 (50.0%)" in summary


def test_results_goodput_null_without_slo():
    assert _results(_stats([ok_record(spaced_s(0.1, 0.01, 5))], SLO(ttft_s=1.0)))["goodput"] is None


# The server's prompt count is used; the requested length is reported apart, with a warning.
def test_bc16_server_prompt_tokens_used_requested_reported_apart_with_warning():
    stats = LLMStats.empty()
    for _ in range(3):  # "hello world": requested 2, the server's template makes it 14
        stats.add(ok_record(spaced_s(0.1, 0.01, 5), prompt_tokens=14, requested_prompt_tokens=2))
    results = _results(stats)
    tokens = results["tokens"]
    assert tokens["prompt"] == 42
    assert tokens["prompt_source"] == "server"
    assert tokens["requested_prompt_avg"] == 2
    assert tokens["prompt_vs_requested"] == {"compared": 3, "mean_abs_diff": 12.0, "relative_diff": 6.0}
    assert "WARNING: server prompt tokens differ from the requested lengths by 600.0%" in format_summary(results)


def test_bc16_no_warning_within_five_percent():
    stats = LLMStats.empty()
    stats.add(ok_record(spaced_s(0.1, 0.01, 5), prompt_tokens=14, requested_prompt_tokens=14))
    stats.add(ok_record(spaced_s(0.1, 0.01, 5), prompt_tokens=14, requested_prompt_tokens=15))  # |14 - 15| / 29 = 3.4%
    results = _results(stats)
    assert results["tokens"]["prompt_vs_requested"]["relative_diff"] == pytest.approx(1 / 29)
    assert "WARNING: server prompt tokens" not in format_summary(results)


# Case BC-15: with usage and a tokenizer, disagreement is a diagnostic only
def test_bc15_tokenizer_disagreement_counted_but_server_count_used():
    stats = LLMStats.empty()
    stats.add(ok_record(spaced_s(0.1, 0.01, 5), prompt_tokens=14, client_completion_tokens=5))
    stats.add(ok_record(spaced_s(0.1, 0.01, 5), prompt_tokens=14, client_completion_tokens=8))
    stats.add(ok_record(spaced_s(0.1, 0.01, 5)))
    assert from_wire(to_wire(stats)) == stats
    tokens = _results(stats)["tokens"]
    assert tokens["completion"] == 15
    assert tokens["completion_source"] == "server"
    assert tokens["completion_client_vs_server"] == {"compared": 2, "disagreed": 1, "mean_abs_diff": 1.5}
