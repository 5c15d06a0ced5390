"""wire: the versioned master/worker envelopes (run plan, worker report)."""

import dataclasses
import json

import msgpack
import pytest

from llmload.aggregate.series import IntervalSeries
from llmload.errors import WireFormatError
from llmload.exporters.load import SendFigures
from llmload.request.record import Outcome, RequestRecord
from llmload.run.plan import RunPlan, split_run
from llmload.run.wire_fields import ENVELOPE_VERSION
from llmload.run.wire_plans import ShareMessage, plan_from_wire, plan_to_wire, share_from_wire, share_to_wire
from llmload.run.wire_reports import REPORT_VERSION, WorkerReport, report_from_wire, report_run_id, report_to_wire


def _plan() -> RunPlan:
    shares = split_run(3, num_requests=10, warmup_requests=4, request_rate=6.0, max_concurrency=5)
    return RunPlan(
        run_id="abc123",
        model="m",
        url_authorization=None,
        blocked=None,
        users_per_worker=4,
        workers=3,
        limited=True,
        shares={str(i + 1): s for i, s in enumerate(shares)},
        started_at_unix=1.75e9,
        planned_after_s=0.04,
    )


def _report() -> WorkerReport:
    """A report as workers make them: its totals are its series merged (``Runtime.take_delta``)."""
    series = IntervalSeries.empty()
    series.add(0, RequestRecord(endpoint="chat", model="m", started_at_unix=1.7e9, outcome=Outcome.TIMEOUT, end_s=1.0))
    series.add(2, RequestRecord(endpoint="chat", model="m", started_at_unix=1.7e9, outcome=Outcome.TIMEOUT, end_s=2.0))
    series.add_cancelled(2, "chat", "m", 2)
    return WorkerReport(
        run_id="abc123",
        stats=series.total(),
        series=series,
        cpu_saturated_s=1.5,
        in_flight=3,
        sends={"behind_s": 0.25},
        clock_offset_s=-300.02,
        rss_bytes=80 << 20,
        taken_at_unix=1.75e9 + 3.5,
    )


def test_plan_envelope_round_trips_through_msgpack_and_json() -> None:
    plan = _plan()
    payload = plan_to_wire(plan)
    assert payload["v"] == ENVELOPE_VERSION
    assert plan_from_wire(msgpack.unpackb(msgpack.packb(payload))) == plan
    assert plan_from_wire(json.loads(json.dumps(payload))) == plan


def test_plan_envelope_carries_an_unlimited_rate() -> None:
    shares = split_run(2, num_requests=None, warmup_requests=0, request_rate=float("inf"), max_concurrency=64)
    plan = RunPlan(run_id="r", workers=2, shares={"0": shares[0], "1": shares[1]})
    decoded = plan_from_wire(msgpack.unpackb(msgpack.packb(plan_to_wire(plan))))
    assert decoded.shares["1"].rate_per_s == float("inf")
    assert decoded.shares["1"].concurrency == 32


def test_plan_envelope_without_version_names_the_upgrade() -> None:
    payload = plan_to_wire(_plan())
    del payload["v"]
    with pytest.raises(WireFormatError, match="plan has version None"):
        plan_from_wire(payload)


def test_plan_envelope_bad_share_names_the_field() -> None:
    payload = plan_to_wire(_plan())
    payload["shares"]["2"]["concurrency"] = 0
    with pytest.raises(WireFormatError, match=r"plan\.shares\.2\.concurrency must be a positive integer"):
        plan_from_wire(payload)


def test_report_envelope_round_trips() -> None:
    report = _report()
    payload = report_to_wire(report)
    assert report_from_wire(msgpack.unpackb(msgpack.packb(payload))) == report
    assert report_run_id(payload) == "abc123"


def test_report_sends_are_the_send_figures_as_plain_numbers_on_the_wire() -> None:
    """``WorkerReport.sends`` is typed (``SendsWire``); its bytes are those of the plain dict it always was."""
    figures = SendFigures(scheduled_rate_per_s=10.0, sent_rate_per_s=9.5, behind_s=None)
    report = dataclasses.replace(_report(), sends=figures.as_wire())
    payload = report_to_wire(report)
    plain = {"scheduled_rate_per_s": 10.0, "sent_rate_per_s": 9.5, "behind_s": None}
    assert msgpack.packb(payload["sends"]) == msgpack.packb(plain)
    decoded = report_from_wire(msgpack.unpackb(msgpack.packb(payload)))
    assert SendFigures.from_wire(decoded.sends) == figures
    # a value that is not a number, or a key this master does not know, reads as unknown
    payload["sends"] = {"sent_rate_per_s": "fast", "behind_s": True, "newer_figure_s": 1.0}
    assert report_from_wire(payload).sends == {"sent_rate_per_s": None, "behind_s": None}


def test_report_envelope_without_version_reads_as_version_1() -> None:
    """Workers of the release before the envelope sent the same keys without "v"."""
    payload = report_to_wire(_report(), version=1)
    del payload["v"]
    assert report_from_wire(payload) == _report()


def test_report_envelope_version_1_of_an_older_worker_still_merges() -> None:
    """An older worker sends its totals beside the series and version-1 histograms: the same report."""
    payload = report_to_wire(_report(), version=1)
    assert payload["v"] == 1
    assert "stats" in payload
    assert report_from_wire(msgpack.unpackb(msgpack.packb(payload))) == _report()


def test_report_envelope_version_2_carries_each_request_once() -> None:
    """Version 2 has no totals beside the series: the master derives them (no second decode)."""
    payload = report_to_wire(_report())
    assert payload["v"] == REPORT_VERSION == 2
    assert "stats" not in payload
    report = report_from_wire(payload)
    assert report.stats == _report().series.total()
    assert report.stats.get("chat", "m").requests_by_outcome == {Outcome.TIMEOUT: 2, Outcome.CANCELLED: 2}


def test_report_envelope_version_1_without_totals_names_the_field() -> None:
    payload = report_to_wire(_report(), version=1)
    del payload["stats"]
    with pytest.raises(WireFormatError, match=r"report\.stats is missing"):
        report_from_wire(payload)


def test_report_envelope_newer_version_says_upgrade_this_process() -> None:
    payload = report_to_wire(_report())
    payload["v"] = REPORT_VERSION + 1
    with pytest.raises(WireFormatError, match="upgrade llmload on this process"):
        report_from_wire(payload)


def test_plan_envelope_of_an_older_master_without_its_run_start_reads_as_unknown() -> None:
    payload = plan_to_wire(_plan())
    del payload["started_at_unix"], payload["planned_after_s"]
    plan = plan_from_wire(payload)
    assert (plan.started_at_unix, plan.planned_after_s) == (0.0, 0.0)


def test_report_envelope_of_an_older_worker_without_clock_offset_and_rss_reads_as_unknown() -> None:
    payload = report_to_wire(_report())
    del payload["clock_offset_s"], payload["rss_bytes"], payload["taken_at_unix"]
    report = report_from_wire(payload)
    assert (report.clock_offset_s, report.rss_bytes, report.taken_at_unix) == (None, None, None)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("clock_offset_s", float("nan"), r"report\.clock_offset_s must be a finite number"),
        ("rss_bytes", -5, r"report\.rss_bytes must be an integer >= 0"),
        ("in_flight", -1, r"report\.in_flight must be an integer >= 0"),
        ("cpu_saturated_s", "x", r"report\.cpu_saturated_s must be a finite number"),
        ("sends", [], r"report\.sends must be a dict"),
        ("stats", {"v": 9, "endpoints": []}, "version 9"),
    ],
)
def test_report_envelope_bad_field_is_named(key: str, value: object, message: str) -> None:
    payload = report_to_wire(_report())
    payload[key] = value
    with pytest.raises(WireFormatError, match=message):
        report_from_wire(payload)


def test_report_run_id_of_garbage_is_none() -> None:
    assert report_run_id([1]) is None
    assert report_run_id({"run_id": 3}) is None


def test_share_message_round_trips_through_msgpack_and_json() -> None:
    share = split_run(3, num_requests=10, warmup_requests=4, request_rate=6.0, max_concurrency=5)[2]
    payload = share_to_wire(ShareMessage(run_id="abc123", share=share))
    assert share_from_wire(msgpack.unpackb(msgpack.packb(payload))) == ShareMessage("abc123", share)
    assert share_from_wire(json.loads(json.dumps(payload))) == ShareMessage("abc123", share)


def test_share_message_bad_field_names_it() -> None:
    (share,) = split_run(1, num_requests=None, warmup_requests=0, request_rate=None, max_concurrency=None)
    payload = share_to_wire(ShareMessage(run_id="r", share=share))
    payload["share"]["rank"] = -1
    with pytest.raises(WireFormatError, match=r"share\.share\.rank must be an integer >= 0"):
        share_from_wire(payload)


def test_plan_without_shares_is_the_same_size_for_1000_and_2000_workers() -> None:
    """Every worker receives the plan; its own share travels apart, so the plan does not grow with the workers."""
    sizes = {
        len(msgpack.packb(plan_to_wire(RunPlan(run_id="r", workers=n, users_per_worker=100, limited=True))))
        for n in (1000, 2000)
    }
    assert len(sizes) == 1
    assert sizes.pop() < 400
