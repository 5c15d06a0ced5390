"""A worker's report on the wire: ``WorkerReport`` and its envelope (``report_to_wire``, ``report_from_wire``).

Workers put ``report_to_wire(report)`` under the ``"llmload"`` key of Locust's
``report_to_master`` data and in llmload's live and final messages; the
master calls ``report_from_wire`` and merges. Its statistics travel as
``llmload.run.wire`` payloads, per interval of ``series``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from llmload.aggregate.series import IntervalSeries
from llmload.aggregate.stats import LLMStats
from llmload.errors import WireFormatError
from llmload.run.wire import from_wire, to_wire
from llmload.run.wire_fields import (
    MISMATCH_HINT,
    check_keys,
    checked_count,
    envelope,
    fail,
    get_field,
    int_field,
    optional_float,
    str_field,
)

__all__ = ["REPORT_VERSION", "SendsWire", "WorkerReport", "report_from_wire", "report_run_id", "report_to_wire"]

REPORT_VERSION = 2
"""Version of the report envelope: version 2 carries each request once (in ``series``; totals are derived)."""
_SERIES_ITEM_KEYS = frozenset({"i", "stats"})


class SendsWire(TypedDict, total=False):
    """A worker's open-loop send figures in its report (``llmload.exporters.load.SendFigures.as_wire``).

    Each value is per second (``behind_s``: seconds) or None = unknown; a key
    that is absent is unknown too (an older worker, or none measured yet).
    """

    scheduled_rate_per_s: float | None
    sent_rate_per_s: float | None
    behind_s: float | None


def _sends_from_wire(raw: dict[Any, Any]) -> SendsWire:
    """The known send figures of a report's ``"sends"``: numbers, or None (unknown) for anything else."""

    def number(key: str) -> float | None:
        value = raw[key]
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    sends = SendsWire()
    if "scheduled_rate_per_s" in raw:
        sends["scheduled_rate_per_s"] = number("scheduled_rate_per_s")
    if "sent_rate_per_s" in raw:
        sends["sent_rate_per_s"] = number("sent_rate_per_s")
    if "behind_s" in raw:
        sends["behind_s"] = number("behind_s")
    return sends


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """One worker's report: its statistics delta and process figures.

    Attributes:
        run_id: the run the delta belongs to.
        stats: requests finished since the worker's previous report.
        cpu_saturated_s: seconds its CPU has been saturated so far.
        in_flight: requests in flight when the report was taken.
        sends: its open-loop send figures as ``SendFigures.as_wire`` made them
            (read back by ``SendFigures.from_wire``, which treats anything else as unknown).
        series: the same requests as ``stats``, per interval of their finish
            time on the worker's clock (``llmload.aggregate.series``); on the wire as
            ``[{"i": index, "stats": to_wire(...)}, ...]``, optional (absent:
            empty) so older workers still merge.
        clock_offset_s: the worker's wall clock minus the master's, as the
            worker estimated it at its run start (an upper bound,
            ``llmload.run.clock``); None = unknown (optional on the wire).
        rss_bytes: the worker process's resident memory when the report was
            taken; None = unknown (optional on the wire).
        taken_at_unix: the worker's own wall clock when the report was taken
            (a lower bound of its clock offset, ``llmload.run.clock.OffsetEstimate``);
            None = unknown (optional on the wire).
    """

    run_id: str
    stats: LLMStats
    cpu_saturated_s: float = 0.0
    in_flight: int = 0
    sends: SendsWire = field(default_factory=SendsWire)
    series: IntervalSeries = field(default_factory=IntervalSeries.empty)
    clock_offset_s: float | None = None
    rss_bytes: int | None = None
    taken_at_unix: float | None = None


def report_to_wire(report: WorkerReport, *, version: int = REPORT_VERSION) -> dict[str, Any]:
    """Encode a worker report (the value of Locust's ``"llmload"`` report key and of llmload's messages).

    Version 2 sends each request once, in ``series`` (the master derives the
    totals from it); ``version=1`` is the older form (totals beside the
    series), kept so tests can play an older worker.
    """
    payload: dict[str, Any] = {
        "v": version,
        "run_id": report.run_id,
        "cpu_saturated_s": report.cpu_saturated_s,
        "in_flight": report.in_flight,
        "sends": dict(report.sends),
        "series": [{"i": i, "stats": to_wire(stats, version=version)} for i, stats in report.series.items()],
        "clock_offset_s": report.clock_offset_s,
        "rss_bytes": report.rss_bytes,
        "taken_at_unix": report.taken_at_unix,
    }
    if version < 2:
        payload["stats"] = to_wire(report.stats, version=version)
    return payload


def report_run_id(payload: object) -> str | None:
    """The run id a report claims (None if it has none), read without decoding the rest."""
    run_id = payload.get("run_id") if isinstance(payload, dict) else None
    return run_id if isinstance(run_id, str) else None


_REPORT_KEYS = {
    "v", "run_id", "stats", "cpu_saturated_s", "in_flight", "sends", "series", "clock_offset_s", "rss_bytes",
    "taken_at_unix",
}  # fmt: skip


def report_from_wire(payload: object) -> WorkerReport:
    """Decode ``report_to_wire``'s output (version 1 or 2).

    Raises:
        WireFormatError: wrong version or shape (the message names the field
            and, for a worker newer than this master, says to upgrade the master).
    """
    raw = envelope(payload, "report", accepts=(1, REPORT_VERSION))
    check_keys(raw, _REPORT_KEYS, "report")
    cpu = optional_float(raw, "cpu_saturated_s", "report") if "cpu_saturated_s" in raw else None
    in_flight = raw.get("in_flight", 0)
    raw_sends = raw.get("sends", {})
    if not isinstance(raw_sends, dict):
        raise fail("report.sends", "a dict", raw_sends)
    sends = _sends_from_wire(raw_sends)
    series = _series_from_wire(raw.get("series", []))
    if "stats" in raw:  # version 1: the totals travel beside the series
        stats = from_wire(raw["stats"])
    elif raw.get("v", 1) == 1:
        raise WireFormatError(f"llmload worker payload: report.stats is missing; {MISMATCH_HINT}")
    else:
        stats = _derived_total(series)
    return WorkerReport(
        run_id=str_field(raw, "run_id", "report"),
        stats=stats,
        cpu_saturated_s=cpu or 0.0,
        in_flight=checked_count(in_flight, "report.in_flight"),
        sends=sends,
        series=series,
        clock_offset_s=optional_float(raw, "clock_offset_s", "report") if "clock_offset_s" in raw else None,
        rss_bytes=None if raw.get("rss_bytes") is None else checked_count(raw["rss_bytes"], "report.rss_bytes"),
        taken_at_unix=optional_float(raw, "taken_at_unix", "report") if "taken_at_unix" in raw else None,
    )


def _derived_total(series: IntervalSeries) -> LLMStats:
    """The report's totals from its series; a one-interval report shares that interval's statistics (read-only)."""
    items = list(series.items())
    if len(items) == 1:
        return items[0][1]
    return series.total()


def _series_from_wire(raw: object) -> IntervalSeries:
    if not isinstance(raw, list):
        raise fail("report.series", "a list", raw)
    series = IntervalSeries.empty()
    for n, item in enumerate(raw):
        path = f"report.series[{n}]"
        if not isinstance(item, dict):
            raise fail(path, "a dict", item)
        check_keys(item, _SERIES_ITEM_KEYS, path)
        series.adopt(int_field(item, "i", path), from_wire(get_field(item, "stats", path)))
    return series
