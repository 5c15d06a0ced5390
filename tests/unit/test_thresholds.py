"""--abort-on: the expression grammar (good and bad expressions, messages) and evaluation over time-series rows."""

from __future__ import annotations

from typing import Any

import pytest

from llmload.aggregate.stats import LLMStats
from llmload.errors import ConfigError
from llmload.exporters.timeseries import columns, interval_rows
from llmload.settings.config import RunConfig
from llmload.settings.options import OPTIONS
from llmload.settings.thresholds import METRICS, Threshold, ThresholdWatch, parse_threshold, parse_thresholds
from llmload.testing import failed_record
from tests.unit.test_config import options
from tests.unit.test_readme_schema import _ok


# ── grammar ─────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(
    ("text", "metric", "op", "value", "for_s"),
    [
        ("error_ratio>0.05 for 5m", "error_ratio", ">", 0.05, 300.0),
        ("ttft_p99>10s for 10m", "ttft_p99", ">", 10.0, 600.0),
        ("output_tok_s<100 for 2m", "output_tok_s", "<", 100.0, 120.0),
        ("  ERROR_RATIO >= 5%  ", "error_ratio", ">=", 0.05, None),
        ("itl_p99 <= 200ms for 1h30m", "itl_p99", "<=", 0.2, 5400.0),
        ("throttled_ratio>0.5 for 90s", "throttled_ratio", ">", 0.5, 90.0),
        ("req_s<1 for 2m", "req_s", "<", 1.0, 120.0),
        ("e2e_p50>1.5s for 500ms", "e2e_p50", ">", 1.5, 0.5),
        ("tpot_p90 > 0.1s", "tpot_p90", ">", 0.1, None),
    ],
)
def test_threshold_parses_good_expressions(text, metric, op, value, for_s):
    threshold = parse_threshold(text)
    assert (threshold.metric, threshold.op, threshold.for_s) == (metric, op, for_s)
    assert threshold.value == pytest.approx(value)
    assert threshold.text == text.strip()


@pytest.mark.parametrize(
    ("text", "says", "fix"),
    [
        ("ttft_p99>10 for 10m", "latency: give its unit, s or ms", "'ttft_p99>10s for 10m'"),
        ("error_ratio>5", "ratio from 0 to 1", "'error_ratio>0.05'"),
        ("error_ratio>0.05s", "a ratio: a number from 0 to 1 or a percentage", "'error_ratio>0.05'"),
        ("output_tok_s<100tok", "is not a number", "'output_tok_s<100 for 2m'"),
        ("output_tok_s<100s", "a rate per second: a plain number, no unit", "'output_tok_s<100'"),
        ("foo>1", "unknown metric 'foo'; known: error_ratio, throttled_ratio", "'error_ratio>0.05 for 5m'"),
        ("error_ratio 0.05", "no comparison; use >, >=, < or <=", "'error_ratio>0.05 for 5m'"),
        ("error_ratio=0.05", "comparison '=' is not one of >, >=, <, <=", "'error_ratio>0.05 for 5m'"),
        ("error_ratio>", "no value after '>'", "'error_ratio>0.05 for 5m'"),
        ("error_ratio>0.05 for 5", "must be like 90s, 5m or 1h30m, got '5'", "'error_ratio>0.05 for 5s'"),
        ("error_ratio>0.05 for five minutes", "must be like 90s, 5m", "'error_ratio>0.05 for 5m'"),
        ("error_ratio>0.05 for", "got ''", "'error_ratio>0.05 for 5m'"),
        ("error_ratio>0.05 for 0s", "must be more than 0", "'error_ratio>0.05 for 5m'"),
        ("", "expected METRIC OP VALUE [for DURATION]", "'error_ratio>0.05 for 5m'"),
    ],
)
def test_threshold_refuses_bad_expressions_naming_value_and_fix(text, says, fix):
    with pytest.raises(ConfigError) as info:
        parse_threshold(text)
    message = str(info.value)
    assert message.startswith(f"--abort-on {text.strip()!r}" if text.strip() else "--abort-on ''")
    assert says in message
    assert f"pass e.g. --abort-on {fix}" in message


def test_threshold_option_is_repeatable_and_parsed_once_per_line():
    parsed = parse_thresholds("--abort-on", "error_ratio>0.05 for 5m\n\nttft_p99>10s")
    assert [t.text for t in parsed] == ["error_ratio>0.05 for 5m", "ttft_p99>10s"]
    (spec,) = [s for s in OPTIONS if s.flag == "--abort-on"]
    assert spec.repeatable
    assert spec.default == ()


def test_threshold_bad_option_value_is_refused_by_the_config():
    with pytest.raises(ConfigError, match=r"--abort-on 'ttft_p99>10': ttft_p99 is a latency"):
        RunConfig.from_options(options(abort_on=["error_ratio>0.05 for 5m", "ttft_p99>10"]))
    config = RunConfig.from_options(options(abort_on=["error_ratio>0.05 for 5m"]))
    assert [t.text for t in config.abort_on] == ["error_ratio>0.05 for 5m"]


def test_threshold_checkpoint_interval_option_accepts_zero_and_refuses_negative():
    assert RunConfig.from_options(options(checkpoint_interval="0")).checkpoint_interval_s == 0.0
    assert RunConfig.from_options(options()).checkpoint_interval_s == 300.0
    with pytest.raises(ConfigError, match=r"--checkpoint-interval must be a finite number of seconds >= 0"):
        RunConfig.from_options(options(checkpoint_interval="-1"))


def test_threshold_metrics_read_existing_time_series_columns():
    row = {name: float(i + 1) for i, name in enumerate(columns())}
    row.update(succeeded=6, failed=2, throttled=1)
    values = {metric: Threshold(metric, metric, ">", 0.0).read(row) for metric in METRICS}
    assert values["error_ratio"] == 0.25
    assert values["throttled_ratio"] == 0.125
    assert values["ttft_p99"] == row["ttft_p99_s"]
    assert values["e2e_p50"] == row["e2e_p50_s"]
    assert values["output_tok_s"] == row["output_tokens_per_s"]
    assert values["req_s"] == row["requests_per_s"]
    assert None not in values.values()  # every metric maps to a column the rows have


def test_threshold_for_duration_rounds_up_to_whole_intervals():
    assert parse_threshold("error_ratio>0.1 for 5m").intervals(10.0) == 30
    assert parse_threshold("error_ratio>0.1 for 25s").intervals(10.0) == 3
    assert parse_threshold("error_ratio>0.1 for 2s").intervals(10.0) == 1
    assert parse_threshold("error_ratio>0.1").intervals(10.0) == 1


# ── evaluation over rows ────────────────────────────────────────────────────
def _row(index: int, *, ok: int = 0, failed: int = 0, interval_s: float = 1.0) -> dict[str, Any]:
    """The total row of interval ``index`` with ``ok`` successes (TTFT 0.1 s) and ``failed`` failures."""
    stats = LLMStats.empty()
    for _ in range(ok):
        stats.add(_ok(1_700_000_000.0))
    for _ in range(failed):
        stats.add(failed_record(start_unix=1_700_000_000.0, end_s=0.01))
    return interval_rows(index, stats, interval_s)[0]


def test_threshold_fires_when_the_condition_holds_for_the_whole_window():
    watch = ThresholdWatch([parse_threshold("error_ratio>0.2 for 3s")], 1.0)
    assert watch.observe([_row(0, ok=10), _row(1, ok=5, failed=5), _row(2, failed=4)]) is None
    breach = watch.observe([_row(3, ok=1, failed=3)])
    assert breach is not None
    assert breach.as_dict() == {
        "threshold": "error_ratio>0.2 for 3s",
        "at_s": 4.0,
        "from_s": 1.0,
        "values": [0.5, 1.0, 0.75],
    }


def test_threshold_break_in_the_condition_restarts_the_window():
    watch = ThresholdWatch([parse_threshold("error_ratio>0.2 for 2s")], 1.0)
    rows = [_row(0, failed=3), _row(1, ok=9, failed=1), _row(2, failed=3)]
    assert watch.observe(rows) is None  # 0.1 at interval 1 breaks it
    breach = watch.observe([_row(3, failed=1)])
    assert breach is not None
    assert (breach.from_s, breach.at_s) == (2.0, 4.0)


def test_threshold_interval_with_no_request_is_unknown_and_restarts_the_window():
    watch = ThresholdWatch([parse_threshold("error_ratio>0.2 for 2s")], 1.0)
    assert watch.observe([_row(0, failed=3), _row(1), _row(2, failed=3)]) is None
    assert watch.observe([_row(3, failed=3)]) is not None


def test_threshold_rates_are_zero_not_unknown_when_nothing_finished():
    watch = ThresholdWatch([parse_threshold("req_s<1 for 3s")], 1.0)
    breach = watch.observe([_row(0), _row(1), _row(2)])
    assert breach is not None
    assert breach.values == (0.0, 0.0, 0.0)


def test_threshold_latency_unknown_when_nothing_succeeded():
    watch = ThresholdWatch([parse_threshold("ttft_p99>50ms for 2s")], 1.0)
    assert watch.observe([_row(0, ok=2), _row(1, failed=5), _row(2, ok=1)]) is None  # interval 1: no TTFT
    breach = watch.observe([_row(3, ok=1)])
    assert breach is not None
    assert breach.values == pytest.approx((0.1, 0.1), rel=0.02)


def test_threshold_per_key_rows_are_ignored_and_first_breach_wins():
    stats = LLMStats.empty()
    stats.add(failed_record(start_unix=1_700_000_000.0, end_s=0.01))
    watch = ThresholdWatch([parse_threshold("req_s<1"), parse_threshold("error_ratio>0.5")], 1.0)
    rows = interval_rows(0, stats, 1.0)
    keyed = [dict(rows[0], endpoint="chat", model="m", failed=0, succeeded=100, requests_per_s=100.0)]
    breach = watch.observe(keyed + rows)
    assert breach is not None
    assert breach.threshold == "req_s<1"


def test_threshold_watch_refuses_a_bad_interval():
    with pytest.raises(ValueError, match="interval must be a positive number of seconds"):
        ThresholdWatch([], 0.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # the suggested fix is itself valid: the missing duration unit is fixed with the missing latency unit
        ("ttft_p99>10 for 5", "pass e.g. --abort-on 'ttft_p99>10s for 5s'"),
        ("output_tok_s<-5", "the value '-5' is negative"),
        ("e2e_p99>=1e309s", "is not a finite number: the threshold could never fire"),
    ],
)
def test_abort_on_refusals_name_the_fault_and_suggest_a_valid_expression(raw, message):
    with pytest.raises(ConfigError) as caught:
        parse_threshold(raw)
    assert message in str(caught.value)
    suggested = str(caught.value).split("pass e.g. --abort-on ", 1)[1].split("'")[1]
    assert parse_threshold(suggested).text == suggested  # the fix it suggests is accepted
