"""The run-level results sections and summary notes (open-loop rates, failures, lost workers)."""

import dataclasses

from llmload.config import RunConfig
from llmload.exporters.run_summary import load_section, public_options


def results(total=100, duration=10.0, delay_max=0.02, span=None):
    return {
        "requests": {"total": total},
        "duration_s": duration,
        "send_span_s": span,
        "latency": {"dispatch_delay_s": {"max": delay_max, "mean": delay_max / 2, "count": total}},
    }


def test_load_section_closed_loop_is_just_the_mode():
    assert load_section(RunConfig(), results(), None) == {"mode": "closed"}


def test_load_section_open_loop_compares_achieved_with_the_schedule():
    config = dataclasses.replace(RunConfig(), request_rate=10.0)
    section = load_section(config, results(total=100, duration=10.0), scheduled=9.9)
    assert section["mode"] == "open"
    assert section["achieved_rate_per_s"] == 10.0
    assert section["scheduled_rate_per_s"] == 9.9
    assert section["max_schedule_lag_s"] == 0.02
    assert section["rate_shortfall"] is False


# Case BC-20: the shortfall names its cause.
def test_load_section_warns_when_the_rate_is_not_met_and_names_the_cap():
    config = dataclasses.replace(RunConfig(), request_rate=10.0, max_concurrency=1)
    section = load_section(config, results(total=20, duration=10.0), scheduled=10.0)
    assert section["rate_shortfall"] is True
    assert "target rate 10 req/s not met: achieved 2.00 req/s (--max-concurrency" in section["warning"]


def test_load_section_achieved_rate_is_the_send_rate_not_finishes_over_wall_time():
    # 100 sends over 4.95 s, the last reply ending 1 s later: no shortfall at 20 req/s
    config = dataclasses.replace(RunConfig(), request_rate=20.0)
    section = load_section(config, results(total=100, duration=5.95, span=4.95), scheduled=20.0)
    assert section["achieved_rate_per_s"] == 99 / 4.95
    assert section["rate_shortfall"] is False


def test_load_section_inf_rate_has_no_target_and_no_shortfall():
    config = dataclasses.replace(RunConfig(), request_rate=float("inf"), max_concurrency=64)
    section = load_section(config, results(), None)
    assert section["unlimited_rate"] is True
    assert section["target_rate_per_s"] is None
    assert section["rate_shortfall"] is False


def test_public_options_never_carry_the_key_material():
    options = public_options(RunConfig(api_key_file="/secret/key"))
    flat = repr(options)
    assert "api_key" not in flat
    assert "/secret/key" not in flat
