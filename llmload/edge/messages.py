"""The messages llmload adds to Locust's master/worker connection: names and payload types.

The protocol (who sends what, when) is described in ``llmload.edge.cluster``.
Every payload is typed where it is built; what travels are plain msgpack-safe
dicts, byte for byte the ones of earlier versions (a worker and its master may
run different llmload versions within one wire version).

============  ===============  ===============================================================
message       direction        payload
============  ===============  ===============================================================
``PLAN``      master → all     ``RunPlan`` (``llmload.run.wire_plans.plan_to_wire``), a parsed
                               option of Locust's spawn message, not a message of its own
``SHARE``     master → worker  ``ShareMessage`` (``llmload.run.wire_plans.share_to_wire``)
``LIVE``      worker → master  ``WorkerReport`` (``llmload.run.wire_reports.report_to_wire``)
``DONE``      worker → master  ``DoneMessage``
``FLUSH``     master → worker  ``FlushMessage``
``FINAL``     worker → master  ``WorkerReport`` (``llmload.run.wire_reports.report_to_wire``)
============  ===============  ===============================================================

The regular reports travel inside Locust's own ``stats`` message, under the
key ``REPORT_KEY`` (a ``WorkerReport`` too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmload.settings.options import OPTIONS

__all__ = [
    "DONE",
    "FINAL",
    "FLUSH",
    "LIVE",
    "PLAN_OPTION",
    "REPORT_KEY",
    "SHARE",
    "DoneMessage",
    "FlushMessage",
    "option_defaults",
]

PLAN_OPTION = "llmload_plan"
"""The parsed option that carries the run plan (``llmload.run.wire_plans.plan_to_wire``) in every spawn message."""

SHARE = "llmload_share"
"""Master → one worker, before Locust's spawn message: that worker's own share of the run."""

LIVE = "llmload_live"
"""Worker → master every 0.5 s with the Prometheus exporter: the delta since the last report."""

DONE = "llmload_done"
"""Worker → master: this worker has sent its whole share (``DoneMessage``)."""

FLUSH = "llmload_flush"
"""Master → worker at the stop: stop the users and send the final report (``FlushMessage``)."""

FINAL = "llmload_final"
"""Worker → master: the last delta of the run, after a flush or when the worker shuts down on its own."""

REPORT_KEY = "llmload"
"""The key of llmload's delta in Locust's regular worker report."""


@dataclass(frozen=True, slots=True)
class DoneMessage:
    """Payload of ``DONE``: the run (``RunState.run_id``) whose whole share this worker has sent."""

    run_id: str

    def to_wire(self) -> dict[str, Any]:
        """``{"run_id": ...}``, what ``send_message`` takes (msgpack-safe)."""
        return {"run_id": self.run_id}

    @classmethod
    def from_wire(cls, payload: object) -> DoneMessage | None:
        """The message in ``payload``, or None when it names no run (a malformed or foreign message)."""
        run_id = payload.get("run_id") if isinstance(payload, dict) else None
        return cls(run_id) if isinstance(run_id, str) else None


@dataclass(frozen=True, slots=True)
class FlushMessage:
    """Payload of ``FLUSH``: the run (``RunState.run_id``) whose final reports the master waits for."""

    run_id: str

    def to_wire(self) -> dict[str, Any]:
        """``{"run_id": ...}``, what ``send_message`` takes (msgpack-safe)."""
        return {"run_id": self.run_id}


def option_defaults() -> dict[str, Any]:
    """llmload's options as Locust's parser sets them from no arguments (attribute name -> value)."""
    return {spec.dest: spec.locust_default for spec in OPTIONS}
