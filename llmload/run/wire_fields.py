"""The field readers every wire decoder checks a payload with (``llmload.run.wire`` and its siblings).

Each reader returns the field's value or raises ``WireFormatError`` naming the
field's path (``report.series[0].stats.endpoints[1].hist.ttft_s.idx``) and
saying what to do (``MISMATCH_HINT``); the usual case is checked without
building that path. ``envelope`` checks the version of a plan, share or
report envelope.
"""

from __future__ import annotations

import math
from collections.abc import Set as AbstractSet
from typing import Any

from llmload.errors import WireFormatError

__all__ = [
    "ENVELOPE_VERSION",
    "MISMATCH_HINT",
    "check_keys",
    "checked_count",
    "dict_field",
    "envelope",
    "fail",
    "get_field",
    "int_field",
    "list_field",
    "optional_float",
    "str_field",
]

MISMATCH_HINT = "install the same llmload version on the master and every worker"
ENVELOPE_VERSION = 1
"""Version of the plan and report envelopes (reports without ``"v"`` are read as version 1)."""


def fail(path: str, expected: str, value: object) -> WireFormatError:
    return WireFormatError(f"llmload worker payload: {path} must be {expected}, got {value!r}; {MISMATCH_HINT}")


def check_keys(raw: dict[str, Any], allowed: AbstractSet[str], path: str) -> None:
    if raw.keys() <= allowed:  # the usual case, checked in C without building a set
        return
    unknown = set(raw) - allowed
    if unknown:
        raise WireFormatError(
            f"llmload worker payload: unknown fields {sorted(map(str, unknown))} in {path}; {MISMATCH_HINT}"
        )


def get_field(raw: dict[str, Any], key: str, path: str) -> object:
    if key not in raw:
        raise WireFormatError(f"llmload worker payload: {path}.{key} is missing; {MISMATCH_HINT}")
    return raw[key]


def dict_field(raw: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = get_field(raw, key, path)
    if not isinstance(value, dict):
        raise fail(f"{path}.{key}", "a dict", value)
    return value


def list_field(raw: dict[str, Any], key: str, path: str) -> list[Any]:
    value = get_field(raw, key, path)
    if not isinstance(value, list):
        raise fail(f"{path}.{key}", "a list", value)
    return value


def checked_count(value: object, path: str, *, positive: bool = False) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= (1 if positive else 0):
        return value
    raise fail(path, "a positive integer" if positive else "an integer >= 0", value)


_MISSING = object()


def int_field(raw: dict[str, Any], key: str, path: str) -> int:
    value = raw.get(key)
    if type(value) is int and value >= 0:  # the usual case, checked without building the error path
        return value
    return checked_count(get_field(raw, key, path), f"{path}.{key}")


def str_field(raw: dict[str, Any], key: str, path: str) -> str:
    value = get_field(raw, key, path)
    if not isinstance(value, str):
        raise fail(f"{path}.{key}", "a string", value)
    return value


def optional_float(raw: dict[str, Any], key: str, path: str) -> float | None:
    value = raw.get(key, _MISSING)
    if type(value) is float and math.isfinite(value):  # the usual case, checked without building the error path
        return value
    value = get_field(raw, key, path)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise fail(f"{path}.{key}", "a finite number or None", value)
    return float(value)


def envelope(
    payload: object,
    what: str,
    default_version: int | None = ENVELOPE_VERSION,
    accepts: tuple[int, ...] = (ENVELOPE_VERSION,),
) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise WireFormatError(f"llmload {what} must be a dict, got {type(payload).__name__}; {MISMATCH_HINT}")
    version = payload.get("v", default_version)
    if version not in accepts or isinstance(version, bool):
        newer = isinstance(version, int) and not isinstance(version, bool) and version > max(accepts)
        side = "this process" if newer else "the process that sent it"
        speaks = f"v{accepts[0]}" if len(accepts) == 1 else f"v{accepts[0]}-v{accepts[-1]}"
        raise WireFormatError(
            f"llmload {what} has version {version!r}, this process speaks {speaks}; "
            f"upgrade llmload on {side} ({MISMATCH_HINT})"
        )
    return payload
