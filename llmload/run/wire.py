"""Versioned worker → master payload for ``LLMStats`` (msgpack- and JSON-safe).

Workers put ``report_to_wire(report)`` (``llmload.run.wire_reports``) under the
``"llmload"`` key of Locust's ``report_to_master`` data; the master calls
``report_from_wire`` and merges. The statistics' payload is this module's
(``to_wire``, ``from_wire``); its histograms are ``llmload.run.wire_histograms``',
every field is read by ``llmload.run.wire_fields``, and the plan and shares
travel as ``llmload.run.wire_plans``' envelopes. The payload holds only
``dict`` (string keys), ``list``, ``int``, ``float``, ``str``, ``bytes``
(version 2's packed bucket arrays; msgpack ``bin``) and ``None``. Version 2
(what workers send) is version 1 with packed histograms::

    H = {"idx": bytes, "cnt": bytes, "zero": 0, "sum_ns": 123456789, "min": 0.01, "max": 0.2}

where ``idx`` is the bucket indexes as little-endian int32 and ``cnt`` their
counts as little-endian unsigned integers of the narrowest width that holds
the largest (1, 2, 4 or 8 bytes: the width is ``len(cnt) / len(idx)``). The master checks them as whole arrays (lengths,
smallest count, distinct indexes, indexes within ``MIN_INDEX`` to ``MAX_INDEX`` of
``llmload.aggregate.histogram``) without a Python loop per bucket. A master
merges version 1 and 2 payloads; a payload newer than the master is refused
with a message that says to upgrade the master. Shape of version 1::

    {"v": 1, "endpoints": [
        {"endpoint": "chat", "model": "m",
         "outcomes": {"ok": 9, "timeout": 1},            # Outcome values
         "prompt_tokens_sum": 90, "completion_tokens_sum": 1800,
         "prompt_sources": {"server": 9},                  # TokenSource values
         "completion_sources": {"server": 9},
         "completion_tokens_by_source": {"server": 1800},
         "requested_prompt_tokens_sum": 0, "requested_prompt_tokens_count": 0,
         "itl_kinds": {"token": 9},                        # ITLKind values
         "counters": {"slo_met_requests": 9, ...},         # optional: counter() fields
         "hist": {"ttft_s": H, ...},                       # empty histograms omitted
         "labels": {"finish_reasons": {"stop": 9}},        # optional: labels() fields, empty omitted
         "errors": [{"category": "timeout: read idle", "count": 1,
                     "status": None, "samples": ["..."]}],
         "first_send_unix": 1700000000.0, "last_end_unix": 1700000003.5}]}

    H = {"idx": [first index, then deltas...], "cnt": [...], "zero": 0,
         "sum_ns": 123456789, "min": 0.01, "max": 0.2}

Bucket indexes are delta-encoded (mostly small positive ints, one byte each in
msgpack). The bucket mapping constants of ``llmload.aggregate.histogram`` are part of
version 1. ``counters`` (goodput and token-count comparisons) is
optional, absent names count 0, so workers of the first v1 release still merge.
The same holds for the client histograms ``read_lag_s`` and ``connect_s`` and
the ``unstamped_reads`` counter added later, and for the optional ``labels``
map (string-keyed counts such as finish reasons): older workers merge into a newer
master; a master older than its workers rejects the names it does not know
(the error names the field: upgrade the master).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import STATS_SCHEMA, EndpointStats, ErrorGroup, LLMStats, StatsKey, bound_labels
from llmload.aggregate.stats_schema import Merge
from llmload.errors import WireFormatError
from llmload.run.wire_fields import (
    MISMATCH_HINT,
    check_keys,
    checked_count,
    dict_field,
    fail,
    get_field,
    int_field,
    list_field,
    optional_float,
    str_field,
)
from llmload.run.wire_histograms import (
    decode_listed_histograms,
    decode_packed_histograms,
    encode_listed,
    encode_packed,
)

__all__ = ["WIRE_VERSION", "from_wire", "to_wire"]

WIRE_VERSION = 2
_READS = (1, 2)  # payload versions this master merges (older workers' reports too)

_E = TypeVar("_E", bound=Enum)
_T = TypeVar("_T")


# ── encoding ──────────────────────────────────────────────────────────────
def to_wire(stats: LLMStats, *, version: int = WIRE_VERSION) -> dict[str, Any]:
    """Encode ``stats`` as a payload of plain primitives (does not modify ``stats``).

    ``version`` 1 is the older form (histogram buckets as lists), kept so tests
    can play an older worker.
    """
    encode = encode_packed if version >= 2 else encode_listed
    return {"v": version, "endpoints": [_encode_endpoint(key, s, encode) for key, s in stats.items()]}


def _encode_counts(counts: dict[_E, int]) -> dict[str, int]:
    return {key.value: n for key, n in counts.items()}


def _encode_endpoint(
    key: StatsKey, s: EndpointStats, encode_histogram: Callable[[LatencyHistogram], dict[str, Any]]
) -> dict[str, Any]:
    out: dict[str, Any] = {"endpoint": key[0], "model": key[1]}
    groups: dict[str, dict[str, Any]] = {"counters": {}, "hist": {}}
    out.update(groups)
    labels = {r.wire_name: dict(v) for r in _LABEL_RULES.values() if (v := getattr(s, r.name))}
    if labels:  # optional, like counters: a master of an older release still reads workers that saw none
        out["labels"] = labels
    for rule in STATS_SCHEMA:
        value = getattr(s, rule.name)
        merge = rule.merge
        if merge is Merge.SUM:
            if rule.wire_group is None:
                out[rule.wire_name] = value
            elif value:
                groups[rule.wire_group][rule.wire_name] = value
        elif merge is Merge.COUNTS:
            out[rule.wire_name] = _encode_counts(value)
        elif merge is Merge.HISTOGRAM:
            if value.count:
                groups["hist"][rule.wire_name] = encode_histogram(value)
        elif merge is Merge.ERRORS:
            out[rule.wire_name] = [g.as_dict(c) for c, g in sorted(value.items())]
        elif merge is Merge.LABELS:
            pass  # in the optional "labels" map above
        else:
            out[rule.wire_name] = value
    return out


# ── decoding ──────────────────────────────────────────────────────────────
def from_wire(payload: object) -> LLMStats:
    """Decode a payload made by ``to_wire`` (possibly by another process).

    Raises:
        WireFormatError: the version is not 1 (the message says which side to
            upgrade) or the shape is wrong (the message names the field).
    """
    if not isinstance(payload, dict):
        raise WireFormatError(f"llmload worker payload must be a dict, got {type(payload).__name__}; {MISMATCH_HINT}")
    version = payload.get("v")
    if version not in _READS or isinstance(version, bool):
        if isinstance(version, int) and not isinstance(version, bool) and version > WIRE_VERSION:
            fix = "upgrade llmload on the master to the workers' version"
        else:
            fix = "upgrade llmload on the workers to the master's version"
        raise WireFormatError(
            f"llmload worker payload has version {version!r}, this master speaks v1-v{WIRE_VERSION}; {fix}"
        )
    check_keys(payload, _PAYLOAD_KEYS, "payload")
    endpoints = list_field(payload, "endpoints", "payload")
    decode = decode_packed_histograms if version >= 2 else decode_listed_histograms
    items = [_decode_endpoint(raw, f"endpoints[{i}]", decode) for i, raw in enumerate(endpoints)]
    return LLMStats.from_endpoints(items, adopt=True)  # decoded here, used nowhere else


_PAYLOAD_KEYS = frozenset({"v", "endpoints"})


def _enum_counts(raw: dict[str, Any], key: str, path: str, members: dict[str, Enum]) -> dict[Enum, int]:
    """A wire map of counts keyed by the ``.value`` of enum members (``members``: value -> member)."""
    out: dict[Enum, int] = {}
    for name, n in dict_field(raw, key, path).items():
        member = members.get(name) if type(name) is str else None
        if member is None:
            raise fail(f"{path}.{key}", "keyed by known names", name)
        count = n if type(n) is int and n >= 0 else checked_count(n, f"{path}.{key}.{name}")
        if count:
            out[member] = count
    return out


_TOP_RULES = tuple(r for r in STATS_SCHEMA if r.wire_group is None)
_MEMBERS = {r.name: {m.value: m for m in r.keys} for r in _TOP_RULES if r.keys is not None}
_COUNTER_RULES = {r.wire_name: r for r in STATS_SCHEMA if r.wire_group == "counters"}
_LABEL_RULES = {r.wire_name: r for r in STATS_SCHEMA if r.wire_group == "labels"}
_ENDPOINT_FIELDS = {"endpoint", "model", "counters", "hist", "labels"} | {r.wire_name for r in _TOP_RULES}
_ERROR_FIELDS = {"category", "count", "status", "samples"}
_MAX_LABEL_CHARS = 64


def _decode_endpoint(
    raw: object, path: str, decode_histograms: Callable[[EndpointStats, dict[str, Any], str], None]
) -> tuple[StatsKey, EndpointStats]:
    if not isinstance(raw, dict):
        raise fail(path, "a dict", raw)
    check_keys(raw, _ENDPOINT_FIELDS, path)
    key = (str_field(raw, "endpoint", path), str_field(raw, "model", path))
    s = EndpointStats()
    for rule in _TOP_RULES:
        name, wire_name = rule.name, rule.wire_name
        if rule.merge is Merge.SUM:
            setattr(s, name, int_field(raw, wire_name, path))
        elif rule.merge is Merge.COUNTS:
            setattr(s, name, _enum_counts(raw, wire_name, path, _MEMBERS[name]))
        elif rule.merge is Merge.ERRORS:
            _decode_errors(s, list_field(raw, wire_name, path), f"{path}.{wire_name}")
        else:
            setattr(s, name, optional_float(raw, wire_name, path))
    counters = raw.get("counters", {})
    if not isinstance(counters, dict):
        raise fail(f"{path}.counters", "a dict", counters)
    for wire_name, value in counters.items():
        counter_rule = _COUNTER_RULES.get(wire_name)
        if counter_rule is None:
            raise fail(f"{path}.counters", f"keyed by {list(_COUNTER_RULES)}", wire_name)
        ok = type(value) is int and value >= 0  # the usual case, checked without building the error path
        setattr(s, counter_rule.name, value if ok else checked_count(value, f"{path}.counters.{wire_name}"))
    decode_histograms(s, dict_field(raw, "hist", path), path)
    _decode_labels(s, raw.get("labels", {}), f"{path}.labels")
    s.bound_errors()
    return key, s


def _decode_labels(s: EndpointStats, raw: object, path: str) -> None:
    if not isinstance(raw, dict):
        raise fail(path, "a dict", raw)
    for wire_name, raw_counts in raw.items():
        rule = _LABEL_RULES.get(wire_name)
        if rule is None:
            raise fail(path, f"keyed by {list(_LABEL_RULES)}", wire_name)
        if not isinstance(raw_counts, dict):
            raise fail(f"{path}.{wire_name}", "a dict", raw_counts)
        out: dict[str, int] = {}
        for label, n in raw_counts.items():
            if not isinstance(label, str) or not label or len(label) > _MAX_LABEL_CHARS:
                raise fail(f"{path}.{wire_name}", f"keyed by labels of 1-{_MAX_LABEL_CHARS} characters", label)
            count = checked_count(n, f"{path}.{wire_name}.{label}")
            if count:
                out[label] = count
        bound_labels(out)
        setattr(s, rule.name, out)


def _decode_errors(s: EndpointStats, raw_groups: list[Any], path: str) -> None:
    for i, raw_group in enumerate(raw_groups):
        category, group = _decode_error(raw_group, f"{path}[{i}]")
        if category in s.errors:
            raise fail(f"{path}[{i}].category", "unique", category)
        s.errors[category] = group


def _decode_error(raw: object, path: str) -> tuple[str, ErrorGroup]:
    if not isinstance(raw, dict):
        raise fail(path, "a dict", raw)
    check_keys(raw, _ERROR_FIELDS, path)
    status = get_field(raw, "status", path)
    if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
        raise fail(f"{path}.status", "an integer or None", status)
    group = ErrorGroup(
        count=checked_count(get_field(raw, "count", path), f"{path}.count", positive=True), status=status
    )
    for j, message in enumerate(list_field(raw, "samples", path)):
        if not isinstance(message, str):
            raise fail(f"{path}.samples[{j}]", "a string", message)
        group.add_sample(message)
    return str_field(raw, "category", path), group
