"""exporters.load: the results' load section (open-loop target vs achieved rate, schedule lag) and send figures."""

import dataclasses

import pytest

from llmload.edge.run_parts import RequestBudget, SendWindow
from llmload.edge.runtime import Runtime
from llmload.exporters.load import SendFigures, load_section
from llmload.settings.config import RunConfig
from llmload.workload.arrivals import Arrival, ArrivalSchedule


def results(total=100, duration=10.0, delay_max=0.02, span=None, cancelled=0):
    return {
        "requests": {"total": total, "cancelled": cancelled},
        "duration_s": duration,
        "send_span_s": span,
        "latency": {"dispatch_delay_s": {"max": delay_max, "mean": delay_max / 2, "count": total}},
    }


def test_load_section_closed_loop_is_just_the_mode():
    assert load_section(RunConfig(), results()) == {"mode": "closed"}


def test_load_section_open_loop_compares_achieved_with_the_schedule():
    config = dataclasses.replace(RunConfig(), request_rate=10.0)
    section = load_section(config, results(total=100, duration=10.0), SendFigures(scheduled_rate_per_s=9.9))
    assert section["mode"] == "open"
    assert section["achieved_rate_per_s"] == 10.0
    assert section["scheduled_rate_per_s"] == 9.9
    assert section["max_schedule_lag_s"] == 0.02
    assert section["rate_shortfall"] is False


# Case BC-20: the shortfall names its cause.
def test_load_section_warns_when_the_rate_is_not_met_and_names_the_cap():
    config = dataclasses.replace(RunConfig(), request_rate=10.0, max_concurrency=1)
    section = load_section(config, results(total=20, duration=10.0, delay_max=7.6), SendFigures(10.0))
    assert section["rate_shortfall"] is True
    assert "target rate 10 req/s not met: achieved 2.00 req/s (--max-concurrency" in section["warning"]
    assert "arrivals up to 7.60 s late" in section["warning"]


def test_load_section_achieved_rate_is_the_send_rate_not_finishes_over_wall_time():
    # 100 sends over 4.95 s, the last reply ending 1 s later: no shortfall at 20 req/s
    config = dataclasses.replace(RunConfig(), request_rate=20.0)
    section = load_section(config, results(total=100, duration=5.95, span=4.95), SendFigures(20.0))
    assert section["achieved_rate_per_s"] == 99 / 4.95
    assert section["rate_shortfall"] is False


def test_load_section_inf_rate_has_no_target_and_no_shortfall():
    config = dataclasses.replace(RunConfig(), request_rate=float("inf"), max_concurrency=64)
    section = load_section(config, results())
    assert section["unlimited_rate"] is True
    assert section["target_rate_per_s"] is None
    assert section["rate_shortfall"] is False


@pytest.mark.parametrize(
    ("users", "max_concurrency", "cap", "by"),
    [(4, None, 4, "users"), (64, 8, 8, "max_concurrency"), (4, 8, 4, "users"), (0, None, None, "users")],
)
def test_load_section_inf_rate_says_what_bounded_the_requests_in_flight(users, max_concurrency, cap, by):
    """With every request eligible at once, -u (or --max-concurrency) set the load; the section said neither."""
    config = dataclasses.replace(RunConfig(), request_rate=float("inf"), max_concurrency=max_concurrency)
    section = load_section(config, {**results(), "run": {"users": users}})
    assert (section["in_flight_cap"], section["in_flight_cap_by"]) == (cap, by)


def test_load_section_finite_rate_has_no_in_flight_cap():
    config = dataclasses.replace(RunConfig(), request_rate=10.0)
    section = load_section(config, {**results(), "run": {"users": 4}})
    assert "in_flight_cap" not in section
    assert "in_flight_cap_by" not in section


# Issue 14, P3: "achieved 8.40 req/s (too few users)" on a -t run that kept its schedule.
def test_p3_achieved_rate_counts_requests_cancelled_at_the_stop():
    # 94 finished over a 9.70 s send span plus 7 cancelled at the stop: 101 sends over 10.0 s
    config = dataclasses.replace(RunConfig(), request_rate=10.0, arrival="constant")
    sends = SendFigures(scheduled_rate_per_s=10.0, sent_rate_per_s=100 / 10.0, behind_s=0.0)
    section = load_section(config, results(total=94, duration=10.0, span=9.70, delay_max=0.0017, cancelled=7), sends)
    assert section["achieved_rate_per_s"] == 10.0
    assert section["rate_shortfall"] is False
    assert "warning" not in section


def test_p3_no_shortfall_warning_when_the_schedule_was_kept():
    # a Poisson schedule's last arrivals make the send rate differ by a few %, with ms of lag
    config = dataclasses.replace(RunConfig(), request_rate=10.0)
    sends = SendFigures(scheduled_rate_per_s=10.4, sent_rate_per_s=9.8, behind_s=0.0)
    section = load_section(config, results(total=95, duration=10.0, span=9.5, delay_max=0.0017), sends)
    assert section["rate_shortfall"] is False


def test_p3_shortfall_when_arrivals_were_still_unsent_at_the_stop():
    # every user busy at the end: no dispatch delay recorded yet, but the schedule is 1.5 s behind
    config = dataclasses.replace(RunConfig(), request_rate=10.0)
    sends = SendFigures(scheduled_rate_per_s=10.0, sent_rate_per_s=8.5, behind_s=1.5)
    section = load_section(config, results(total=80, duration=10.0, span=9.4, delay_max=0.001), sends)
    assert section["rate_shortfall"] is True
    assert section["max_schedule_lag_s"] == 1.5
    assert "(too few users), arrivals up to 1.50 s late" in section["warning"]


def test_p3_send_window_rates_cover_the_same_requests_sent_and_scheduled():
    window = SendWindow()
    for due_s, delay_s in ((5.0, 0.001), (5.1, 0.0), (5.2, 0.04), (5.3, 0.3)):
        window.note(due_s + delay_s, due_s)
    assert window.rate_per_s == pytest.approx(3 / 0.599)
    assert window.scheduled_rate_per_s == pytest.approx(10.0)
    assert SendWindow().rate_per_s is None
    closed = SendWindow()
    closed.note(1.0)
    closed.note(2.0)
    assert (closed.rate_per_s, closed.scheduled_rate_per_s) == (1.0, None)


def test_p3_send_figures_add_rates_and_keep_the_largest_lag():
    combined = SendFigures.combine([SendFigures(5.0, 4.9, 0.0), SendFigures(5.0, 5.1, 0.3), SendFigures()])
    assert combined == SendFigures(10.0, 10.0, 0.3)
    assert SendFigures.from_wire(combined.as_wire()) == combined
    assert SendFigures.from_wire("garbage") == SendFigures()


def test_p3_runtime_reads_the_lag_of_the_next_unsent_arrival_at_the_stop():
    runtime = Runtime(config=RunConfig())
    runtime.run.schedule = ArrivalSchedule(rate=10.0, arrival=Arrival.CONSTANT)
    for _ in range(3):
        runtime.run.schedule.next_offset_s()  # arrivals at 0, 0.1, 0.2 taken; the next is due at 0.3
    runtime.run.schedule_start_s = 100.0
    runtime.run.stopped_at_s = 101.0
    assert runtime.run.send_figures().behind_s == pytest.approx(0.7)
    runtime.run.budget = RequestBudget(3)
    for _ in range(3):
        runtime.run.budget.try_acquire()
    assert runtime.run.send_figures().behind_s is None  # --num-requests used up: nothing more was due
