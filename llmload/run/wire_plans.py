"""The master's plan and a worker's share on the wire (``plan_to_wire``, ``share_to_wire`` and their decodes).

The plan travels to every worker as a parsed option of Locust's spawn
message (``llmload.edge.messages``); each worker's own share follows in a
message to that worker alone (``ShareMessage``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmload.run.plan import RunPlan, WorkerShare
from llmload.run.wire_fields import (
    ENVELOPE_VERSION,
    check_keys,
    checked_count,
    dict_field,
    envelope,
    fail,
    get_field,
    int_field,
    optional_float,
    str_field,
)

__all__ = ["ShareMessage", "plan_from_wire", "plan_to_wire", "share_from_wire", "share_to_wire"]

_SHARE_FIELDS = ("rank", "quota_requests", "warmup_requests", "rate_per_s", "concurrency")
_PLAN_KEYS = {
    "v", "run_id", "model", "url_authorization", "proxy_note", "blocked", "users_per_worker", "workers", "limited",
    "shares", "started_at_unix", "planned_after_s",
}  # fmt: skip


def plan_to_wire(plan: RunPlan) -> dict[str, Any]:
    """Encode the master's plan (shipped to workers as a parsed option with Locust's spawn message)."""
    return {
        "v": ENVELOPE_VERSION,
        "run_id": plan.run_id,
        "model": plan.model,
        "url_authorization": plan.url_authorization,
        "proxy_note": plan.proxy_note,
        "blocked": plan.blocked,
        "users_per_worker": plan.users_per_worker,
        "workers": plan.workers,
        "limited": plan.limited,
        "shares": {index: _share_dict(s) for index, s in plan.shares.items()},
        "started_at_unix": plan.started_at_unix,
        "planned_after_s": plan.planned_after_s,
    }


def plan_from_wire(payload: object) -> RunPlan:
    """Decode ``plan_to_wire``'s output.

    Raises:
        WireFormatError: wrong version or shape (the message names the field).
    """
    raw = envelope(payload, "plan", default_version=None)
    check_keys(raw, _PLAN_KEYS, "plan")
    shares = {
        str(index): _share_from_dict(raw_share, f"plan.shares.{index}")
        for index, raw_share in dict_field(raw, "shares", "plan").items()
    }
    limited = get_field(raw, "limited", "plan")
    if not isinstance(limited, bool):
        raise fail("plan.limited", "a bool", limited)
    return RunPlan(
        run_id=str_field(raw, "run_id", "plan"),
        model=_optional_str(raw, "model", "plan"),
        url_authorization=_optional_str(raw, "url_authorization", "plan"),
        proxy_note=_optional_str(raw, "proxy_note", "plan"),
        blocked=_optional_str(raw, "blocked", "plan"),
        users_per_worker=int_field(raw, "users_per_worker", "plan"),
        workers=int_field(raw, "workers", "plan"),
        limited=limited,
        shares=shares,
        started_at_unix=_float_or_zero(raw, "started_at_unix", "plan"),
        planned_after_s=_float_or_zero(raw, "planned_after_s", "plan"),
    )


def _share_dict(share: WorkerShare) -> dict[str, Any]:
    return {name: getattr(share, name) for name in _SHARE_FIELDS}


def _share_from_dict(raw_share: object, path: str) -> WorkerShare:
    if not isinstance(raw_share, dict):
        raise fail(path, "a dict", raw_share)
    check_keys(raw_share, set(_SHARE_FIELDS), path)
    quota = get_field(raw_share, "quota_requests", path)
    concurrency = get_field(raw_share, "concurrency", path)
    return WorkerShare(
        rank=int_field(raw_share, "rank", path),
        quota_requests=None if quota is None else checked_count(quota, f"{path}.quota_requests"),
        warmup_requests=int_field(raw_share, "warmup_requests", path),
        rate_per_s=_rate(raw_share, path),
        concurrency=None if concurrency is None else checked_count(concurrency, f"{path}.concurrency", positive=True),
    )


@dataclass(frozen=True, slots=True)
class ShareMessage:
    """One worker's own share of a run, sent to that worker alone before Locust's spawn message.

    The plan that every worker receives (in Locust's spawn message) holds no
    shares, so what the master sends each worker does not grow with the
    number of workers.

    Attributes:
        run_id: the run the share belongs to.
        share: this worker's part of the run.
    """

    run_id: str
    share: WorkerShare


def share_to_wire(message: ShareMessage) -> dict[str, Any]:
    """Encode a ``ShareMessage`` (plain primitives, msgpack- and JSON-safe)."""
    return {"v": ENVELOPE_VERSION, "run_id": message.run_id, "share": _share_dict(message.share)}


def share_from_wire(payload: object) -> ShareMessage:
    """Decode ``share_to_wire``'s output.

    Raises:
        WireFormatError: wrong version or shape (the message names the field).
    """
    raw = envelope(payload, "share")
    check_keys(raw, {"v", "run_id", "share"}, "share")
    return ShareMessage(
        run_id=str_field(raw, "run_id", "share"),
        share=_share_from_dict(get_field(raw, "share", "share"), "share.share"),
    )


def _rate(raw: dict[str, Any], path: str) -> float | None:
    value = get_field(raw, "rate_per_s", path)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:  # inf: unlimited rate
        return float(value)
    raise fail(f"{path}.rate_per_s", "a positive number, inf or None", value)


def _optional_str(raw: dict[str, Any], key: str, path: str) -> str | None:
    value = get_field(raw, key, path)
    if value is not None and not isinstance(value, str):
        raise fail(f"{path}.{key}", "a string or None", value)
    return value


def _float_or_zero(raw: dict[str, Any], key: str, path: str) -> float:
    """An optional number field (absent or None: 0.0, what older peers mean by leaving it out)."""
    return (optional_float(raw, key, path) if key in raw else None) or 0.0
