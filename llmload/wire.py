"""Versioned worker → master payload for ``LLMStats`` (msgpack- and JSON-safe).

Workers put ``to_wire(delta)`` under the ``"llmload"`` key of Locust's
``report_to_master`` data; the master calls ``from_wire`` and merges. The
payload holds only ``dict`` (string keys), ``list``, ``int``, ``float``,
``str`` and ``None``. Shape of version 1::

    {"v": 1, "endpoints": [
        {"endpoint": "chat", "model": "m",
         "outcomes": {"ok": 9, "timeout": 1},            # Outcome values
         "prompt_tokens_sum": 90, "completion_tokens_sum": 1800,
         "prompt_sources": {"server": 9},                  # TokenSource values
         "completion_sources": {"server": 9},
         "completion_tokens_by_source": {"server": 1800},
         "requested_prompt_tokens_sum": 0, "requested_prompt_tokens_count": 0,
         "itl_kinds": {"token": 9},                        # ITLKind values
         "counters": {"slo_met_requests": 9, ...},         # optional, see _COUNTERS
         "hist": {"ttft_s": H, ...},                       # empty histograms omitted
         "errors": [{"category": "timeout: read idle", "count": 1,
                     "status": None, "samples": ["..."]}],
         "first_send_unix": 1700000000.0, "last_end_unix": 1700000003.5}]}

    H = {"idx": [first index, then deltas...], "cnt": [...], "zero": 0,
         "sum_ns": 123456789, "min": 0.01, "max": 0.2}

Bucket indexes are delta-encoded (mostly small positive ints, one byte each in
msgpack). The bucket mapping constants of ``llmload.histogram`` are part of
version 1. ``counters`` (goodput and token-count comparisons, issue 3) is
optional, absent names count 0, so workers of the first v1 release still merge.
The same holds for the client histograms ``read_lag_s`` and ``connect_s`` and
the ``unstamped_reads`` counter added later: older workers merge into a newer
master; a master older than its workers rejects the names it does not know
(the error names the field: upgrade the master).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

from llmload.errors import WireFormatError
from llmload.histogram import LatencyHistogram
from llmload.record import ITLKind, Outcome, TokenSource
from llmload.stats import HISTOGRAM_NAMES, EndpointStats, ErrorGroup, LLMStats, StatsKey

__all__ = ["WIRE_VERSION", "from_wire", "to_wire"]

WIRE_VERSION = 1

_E = TypeVar("_E", bound=Enum)
_T = TypeVar("_T")
_MISMATCH_HINT = "install the same llmload version on the master and every worker"


# ── encoding ──────────────────────────────────────────────────────────────
def to_wire(stats: LLMStats) -> dict[str, Any]:
    """Encode ``stats`` as a version-1 payload of plain primitives (does not modify ``stats``)."""
    return {"v": WIRE_VERSION, "endpoints": [_encode_endpoint(key, s) for key, s in stats.items()]}


def _encode_counts(counts: dict[_E, int]) -> dict[str, int]:
    return {key.value: n for key, n in counts.items()}


def _encode_histogram(hist: LatencyHistogram) -> dict[str, Any]:
    indexes: list[int] = []
    counts: list[int] = []
    previous = 0
    for index, count in hist.buckets():
        indexes.append(index - previous)
        counts.append(count)
        previous = index
    return {
        "idx": indexes,
        "cnt": counts,
        "zero": hist.zero_count,
        "sum_ns": hist.sum_ns,
        "min": hist.min,
        "max": hist.max,
    }


def _encode_endpoint(key: StatsKey, s: EndpointStats) -> dict[str, Any]:
    return {
        "endpoint": key[0],
        "model": key[1],
        "outcomes": _encode_counts(s.requests_by_outcome),
        "prompt_tokens_sum": s.prompt_tokens_sum,
        "completion_tokens_sum": s.completion_tokens_sum,
        "prompt_sources": _encode_counts(s.prompt_source_requests),
        "completion_sources": _encode_counts(s.completion_source_requests),
        "completion_tokens_by_source": _encode_counts(s.completion_tokens_by_source),
        "requested_prompt_tokens_sum": s.requested_prompt_tokens_sum,
        "requested_prompt_tokens_count": s.requested_prompt_tokens_count,
        "itl_kinds": _encode_counts(s.itl_kind_requests),
        "counters": {name: getattr(s, name) for name in _COUNTERS if getattr(s, name)},
        "hist": {name: _encode_histogram(h) for name, h in s.histograms().items() if h.count},
        "errors": [g.as_dict(c) for c, g in sorted(s.errors.items())],
        "first_send_unix": s.first_send_unix,
        "last_end_unix": s.last_end_unix,
        "last_send_unix": s.last_send_unix,
    }


# ── decoding ──────────────────────────────────────────────────────────────
def from_wire(payload: object) -> LLMStats:
    """Decode a payload made by ``to_wire`` (possibly by another process).

    Raises:
        WireFormatError: the version is not 1 (the message says which side to
            upgrade) or the shape is wrong (the message names the field).
    """
    if not isinstance(payload, dict):
        raise WireFormatError(f"llmload worker payload must be a dict, got {type(payload).__name__}; {_MISMATCH_HINT}")
    version = payload.get("v")
    if version != WIRE_VERSION or isinstance(version, bool):
        if isinstance(version, int) and not isinstance(version, bool) and version > WIRE_VERSION:
            fix = "upgrade llmload on the master to the workers' version"
        else:
            fix = "upgrade llmload on the workers to the master's version"
        raise WireFormatError(
            f"llmload worker payload has version {version!r}, this master speaks v{WIRE_VERSION}; {fix}"
        )
    _check_keys(payload, {"v", "endpoints"}, "payload")
    endpoints = _list(payload, "endpoints", "payload")
    items = [_decode_endpoint(raw, f"endpoints[{i}]") for i, raw in enumerate(endpoints)]
    return LLMStats.from_endpoints(items)


def _fail(path: str, expected: str, value: object) -> WireFormatError:
    return WireFormatError(f"llmload worker payload: {path} must be {expected}, got {value!r}; {_MISMATCH_HINT}")


def _check_keys(raw: dict[str, Any], allowed: set[str], path: str) -> None:
    unknown = set(raw) - allowed
    if unknown:
        raise WireFormatError(
            f"llmload worker payload: unknown fields {sorted(map(str, unknown))} in {path}; {_MISMATCH_HINT}"
        )


def _get(raw: dict[str, Any], key: str, path: str) -> object:
    if key not in raw:
        raise WireFormatError(f"llmload worker payload: {path}.{key} is missing; {_MISMATCH_HINT}")
    return raw[key]


def _dict(raw: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = _get(raw, key, path)
    if not isinstance(value, dict):
        raise _fail(f"{path}.{key}", "a dict", value)
    return value


def _list(raw: dict[str, Any], key: str, path: str) -> list[Any]:
    value = _get(raw, key, path)
    if not isinstance(value, list):
        raise _fail(f"{path}.{key}", "a list", value)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: object, path: str, *, positive: bool = False) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= (1 if positive else 0):
        return value
    raise _fail(path, "a positive integer" if positive else "an integer >= 0", value)


def _int_field(raw: dict[str, Any], key: str, path: str) -> int:
    return _count(_get(raw, key, path), f"{path}.{key}")


def _str_field(raw: dict[str, Any], key: str, path: str) -> str:
    value = _get(raw, key, path)
    if not isinstance(value, str):
        raise _fail(f"{path}.{key}", "a string", value)
    return value


def _optional_float(raw: dict[str, Any], key: str, path: str) -> float | None:
    value = _get(raw, key, path)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _fail(f"{path}.{key}", "a finite number or None", value)
    return float(value)


def _enum_counts(raw: dict[str, Any], key: str, path: str, parse: Callable[[str], _T]) -> dict[_T, int]:
    out: dict[_T, int] = {}
    for name, n in _dict(raw, key, path).items():
        try:
            member = parse(name)
        except ValueError:
            raise _fail(f"{path}.{key}", "keyed by known names", name) from None
        count = _count(n, f"{path}.{key}.{name}")
        if count:
            out[member] = count
    return out


_ENDPOINT_FIELDS = {
    "endpoint",
    "model",
    "outcomes",
    "prompt_tokens_sum",
    "completion_tokens_sum",
    "prompt_sources",
    "completion_sources",
    "completion_tokens_by_source",
    "requested_prompt_tokens_sum",
    "requested_prompt_tokens_count",
    "itl_kinds",
    "counters",
    "hist",
    "errors",
    "first_send_unix",
    "last_end_unix",
    "last_send_unix",
}
_COUNTERS = (
    "unstamped_reads",
    "slo_met_requests",
    "tokenizer_compared_requests",
    "tokenizer_disagreed_requests",
    "tokenizer_abs_diff_tokens",
    "requested_compared_requests",
    "requested_compared_tokens",
    "requested_abs_diff_tokens",
)
"""Integer ``EndpointStats`` fields sent under ``counters`` (zero values omitted)."""
_HISTOGRAM_FIELDS = {"idx", "cnt", "zero", "sum_ns", "min", "max"}
_ERROR_FIELDS = {"category", "count", "status", "samples"}


def _decode_endpoint(raw: object, path: str) -> tuple[StatsKey, EndpointStats]:
    if not isinstance(raw, dict):
        raise _fail(path, "a dict", raw)
    _check_keys(raw, _ENDPOINT_FIELDS, path)
    key = (_str_field(raw, "endpoint", path), _str_field(raw, "model", path))
    s = EndpointStats(
        requests_by_outcome=_enum_counts(raw, "outcomes", path, Outcome),
        prompt_tokens_sum=_int_field(raw, "prompt_tokens_sum", path),
        completion_tokens_sum=_int_field(raw, "completion_tokens_sum", path),
        prompt_source_requests=_enum_counts(raw, "prompt_sources", path, TokenSource),
        completion_source_requests=_enum_counts(raw, "completion_sources", path, TokenSource),
        completion_tokens_by_source=_enum_counts(raw, "completion_tokens_by_source", path, TokenSource),
        requested_prompt_tokens_sum=_int_field(raw, "requested_prompt_tokens_sum", path),
        requested_prompt_tokens_count=_int_field(raw, "requested_prompt_tokens_count", path),
        itl_kind_requests=_enum_counts(raw, "itl_kinds", path, ITLKind),
        first_send_unix=_optional_float(raw, "first_send_unix", path),
        last_end_unix=_optional_float(raw, "last_end_unix", path),
        last_send_unix=_optional_float(raw, "last_send_unix", path),
    )
    counters = raw.get("counters", {})
    if not isinstance(counters, dict):
        raise _fail(f"{path}.counters", "a dict", counters)
    for name, value in counters.items():
        if name not in _COUNTERS:
            raise _fail(f"{path}.counters", f"keyed by {list(_COUNTERS)}", name)
        setattr(s, name, _count(value, f"{path}.counters.{name}"))
    hists = _dict(raw, "hist", path)
    for name, raw_hist in hists.items():
        if name not in HISTOGRAM_NAMES:
            raise _fail(f"{path}.hist", f"keyed by {list(HISTOGRAM_NAMES)}", name)
        setattr(s, name, _decode_histogram(raw_hist, f"{path}.hist.{name}"))
    for i, raw_group in enumerate(_list(raw, "errors", path)):
        category, group = _decode_error(raw_group, f"{path}.errors[{i}]")
        if category in s.errors:
            raise _fail(f"{path}.errors[{i}].category", "unique", category)
        s.errors[category] = group
    s.bound_errors()
    return key, s


def _decode_histogram(raw: object, path: str) -> LatencyHistogram:
    if not isinstance(raw, dict):
        raise _fail(path, "a dict", raw)
    _check_keys(raw, _HISTOGRAM_FIELDS, path)
    deltas = _list(raw, "idx", path)
    counts = _list(raw, "cnt", path)
    if len(deltas) != len(counts):
        raise _fail(f"{path}.cnt", f"as long as idx ({len(deltas)})", len(counts))
    buckets: list[tuple[int, int]] = []
    index = 0
    for i, (delta, count) in enumerate(zip(deltas, counts, strict=True)):
        if not _is_int(delta) or (i > 0 and delta <= 0):
            raise _fail(f"{path}.idx[{i}]", "an integer (increasing after the first)", delta)
        index += delta
        buckets.append((index, _count(count, f"{path}.cnt[{i}]", positive=True)))
    try:
        return LatencyHistogram.from_buckets(
            buckets=buckets,
            zero_count=_int_field(raw, "zero", path),
            sum_ns=_int_field(raw, "sum_ns", path),
            min_s=_optional_float(raw, "min", path),
            max_s=_optional_float(raw, "max", path),
        )
    except ValueError as exc:
        raise WireFormatError(f"llmload worker payload: {path}: {exc}; {_MISMATCH_HINT}") from exc


def _decode_error(raw: object, path: str) -> tuple[str, ErrorGroup]:
    if not isinstance(raw, dict):
        raise _fail(path, "a dict", raw)
    _check_keys(raw, _ERROR_FIELDS, path)
    status = _get(raw, "status", path)
    if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
        raise _fail(f"{path}.status", "an integer or None", status)
    group = ErrorGroup(count=_count(_get(raw, "count", path), f"{path}.count", positive=True), status=status)
    for j, message in enumerate(_list(raw, "samples", path)):
        if not isinstance(message, str):
            raise _fail(f"{path}.samples[{j}]", "a string", message)
        group.add_sample(message)
    return _str_field(raw, "category", path), group
