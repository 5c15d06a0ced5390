"""Versioned worker → master payload for ``LLMStats`` (msgpack- and JSON-safe).

Workers put ``report_to_wire(report)`` under the ``"llmload"`` key of Locust's
``report_to_master`` data; the master calls ``report_from_wire`` and merges. The
payload holds only ``dict`` (string keys), ``list``, ``int``, ``float``,
``str``, ``bytes`` (version 2's packed bucket arrays; msgpack ``bin``) and
``None``. Version 2 (what workers send) is version 1 with packed histograms::

    H = {"idx": bytes, "cnt": bytes, "zero": 0, "sum_ns": 123456789, "min": 0.01, "max": 0.2}

where ``idx`` is the bucket indexes as little-endian int32 and ``cnt`` their
counts as little-endian unsigned integers of the narrowest width that holds
the largest (1, 2, 4 or 8 bytes: the width is ``len(cnt) / len(idx)``). The master checks them as whole arrays (lengths,
smallest count, distinct indexes) without a Python loop per bucket. A master
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

import math
import sys
from array import array
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import Enum
from itertools import accumulate
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.series import IntervalSeries
from llmload.aggregate.stats import STATS_SCHEMA, EndpointStats, ErrorGroup, LLMStats, StatsKey, bound_labels
from llmload.aggregate.stats_schema import Merge

# numpy is imported only by the decode of packed bucket arrays (a master's path): a single process or a
# worker encodes without it (~10 MiB resident, see llmload.aggregate.histogram).
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
from llmload.errors import WireFormatError
from llmload.run.plan import RunPlan, WorkerShare

__all__ = [
    "ENVELOPE_VERSION",
    "REPORT_VERSION",
    "WIRE_VERSION",
    "SendsWire",
    "ShareMessage",
    "WorkerReport",
    "from_wire",
    "plan_from_wire",
    "plan_to_wire",
    "report_from_wire",
    "report_run_id",
    "report_to_wire",
    "share_from_wire",
    "share_to_wire",
    "to_wire",
]

WIRE_VERSION = 2
_READS = (1, 2)  # payload versions this master merges (older workers' reports too)
REPORT_VERSION = 2
"""Version of the report envelope: version 2 carries each request once (in ``series``; totals are derived)."""

_E = TypeVar("_E", bound=Enum)
_T = TypeVar("_T")
_MISMATCH_HINT = "install the same llmload version on the master and every worker"


# ── encoding ──────────────────────────────────────────────────────────────
def to_wire(stats: LLMStats, *, version: int = WIRE_VERSION) -> dict[str, Any]:
    """Encode ``stats`` as a payload of plain primitives (does not modify ``stats``).

    ``version`` 1 is the older form (histogram buckets as lists), kept so tests
    can play an older worker.
    """
    encode = _encode_packed if version >= 2 else _encode_histogram
    return {"v": version, "endpoints": [_encode_endpoint(key, s, encode) for key, s in stats.items()]}


_LITTLE = sys.byteorder == "little"


def _packed(typecode: str, values: list[int]) -> bytes:
    packed = array(typecode, values)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def _count_typecode(largest: int) -> str:
    """The narrowest unsigned array type that holds ``largest`` (1, 2, 4 or 8 bytes)."""
    for typecode in "BHI":
        if largest < 1 << (8 * array(typecode).itemsize):
            return typecode
    return "Q"


_COUNT_TYPECODES = {array(t).itemsize: t for t in "BHIQ"}


def _encode_packed(hist: LatencyHistogram) -> dict[str, Any]:
    indexes, counts = hist.arrays()
    return {
        "idx": _packed("i", indexes),
        "cnt": _packed(_count_typecode(max(counts, default=0)), counts),
        "zero": hist.zero_count,
        "sum_ns": hist.sum_ns,
        "min": hist.min,
        "max": hist.max,
    }


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
        raise WireFormatError(f"llmload worker payload must be a dict, got {type(payload).__name__}; {_MISMATCH_HINT}")
    version = payload.get("v")
    if version not in _READS or isinstance(version, bool):
        if isinstance(version, int) and not isinstance(version, bool) and version > WIRE_VERSION:
            fix = "upgrade llmload on the master to the workers' version"
        else:
            fix = "upgrade llmload on the workers to the master's version"
        raise WireFormatError(
            f"llmload worker payload has version {version!r}, this master speaks v1-v{WIRE_VERSION}; {fix}"
        )
    _check_keys(payload, _PAYLOAD_KEYS, "payload")
    endpoints = _list(payload, "endpoints", "payload")
    decode = _decode_packed_histograms if version >= 2 else _decode_listed_histograms
    items = [_decode_endpoint(raw, f"endpoints[{i}]", decode) for i, raw in enumerate(endpoints)]
    return LLMStats.from_endpoints(items, adopt=True)  # decoded here, used nowhere else


_PAYLOAD_KEYS = frozenset({"v", "endpoints"})
_SERIES_ITEM_KEYS = frozenset({"i", "stats"})


def _fail(path: str, expected: str, value: object) -> WireFormatError:
    return WireFormatError(f"llmload worker payload: {path} must be {expected}, got {value!r}; {_MISMATCH_HINT}")


def _check_keys(raw: dict[str, Any], allowed: AbstractSet[str], path: str) -> None:
    if raw.keys() <= allowed:  # the usual case, checked in C without building a set
        return
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


_MISSING = object()


def _int_field(raw: dict[str, Any], key: str, path: str) -> int:
    value = raw.get(key)
    if type(value) is int and value >= 0:  # the usual case, checked without building the error path
        return value
    return _count(_get(raw, key, path), f"{path}.{key}")


def _str_field(raw: dict[str, Any], key: str, path: str) -> str:
    value = _get(raw, key, path)
    if not isinstance(value, str):
        raise _fail(f"{path}.{key}", "a string", value)
    return value


def _optional_float(raw: dict[str, Any], key: str, path: str) -> float | None:
    value = raw.get(key, _MISSING)
    if type(value) is float and math.isfinite(value):  # the usual case, checked without building the error path
        return value
    value = _get(raw, key, path)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _fail(f"{path}.{key}", "a finite number or None", value)
    return float(value)


def _float_or_zero(raw: dict[str, Any], key: str, path: str) -> float:
    """An optional number field (absent or None: 0.0, what older peers mean by leaving it out)."""
    return (_optional_float(raw, key, path) if key in raw else None) or 0.0


def _enum_counts(raw: dict[str, Any], key: str, path: str, members: dict[str, Enum]) -> dict[Enum, int]:
    """A wire map of counts keyed by the ``.value`` of enum members (``members``: value -> member)."""
    out: dict[Enum, int] = {}
    for name, n in _dict(raw, key, path).items():
        member = members.get(name) if type(name) is str else None
        if member is None:
            raise _fail(f"{path}.{key}", "keyed by known names", name)
        count = n if type(n) is int and n >= 0 else _count(n, f"{path}.{key}.{name}")
        if count:
            out[member] = count
    return out


_TOP_RULES = tuple(r for r in STATS_SCHEMA if r.wire_group is None)
_MEMBERS = {r.name: {m.value: m for m in r.keys} for r in _TOP_RULES if r.keys is not None}
_COUNTER_RULES = {r.wire_name: r for r in STATS_SCHEMA if r.wire_group == "counters"}
_HIST_RULES = {r.wire_name: r for r in STATS_SCHEMA if r.wire_group == "hist"}
_LABEL_RULES = {r.wire_name: r for r in STATS_SCHEMA if r.wire_group == "labels"}
_ENDPOINT_FIELDS = {"endpoint", "model", "counters", "hist", "labels"} | {r.wire_name for r in _TOP_RULES}
_HISTOGRAM_FIELDS = {"idx", "cnt", "zero", "sum_ns", "min", "max"}
_ERROR_FIELDS = {"category", "count", "status", "samples"}
_MAX_LABEL_CHARS = 64


def _decode_endpoint(
    raw: object, path: str, decode_histograms: Callable[[EndpointStats, dict[str, Any], str], None]
) -> tuple[StatsKey, EndpointStats]:
    if not isinstance(raw, dict):
        raise _fail(path, "a dict", raw)
    _check_keys(raw, _ENDPOINT_FIELDS, path)
    key = (_str_field(raw, "endpoint", path), _str_field(raw, "model", path))
    s = EndpointStats()
    for rule in _TOP_RULES:
        name, wire_name = rule.name, rule.wire_name
        if rule.merge is Merge.SUM:
            setattr(s, name, _int_field(raw, wire_name, path))
        elif rule.merge is Merge.COUNTS:
            setattr(s, name, _enum_counts(raw, wire_name, path, _MEMBERS[name]))
        elif rule.merge is Merge.ERRORS:
            _decode_errors(s, _list(raw, wire_name, path), f"{path}.{wire_name}")
        else:
            setattr(s, name, _optional_float(raw, wire_name, path))
    counters = raw.get("counters", {})
    if not isinstance(counters, dict):
        raise _fail(f"{path}.counters", "a dict", counters)
    for wire_name, value in counters.items():
        counter_rule = _COUNTER_RULES.get(wire_name)
        if counter_rule is None:
            raise _fail(f"{path}.counters", f"keyed by {list(_COUNTER_RULES)}", wire_name)
        ok = type(value) is int and value >= 0  # the usual case, checked without building the error path
        setattr(s, counter_rule.name, value if ok else _count(value, f"{path}.counters.{wire_name}"))
    decode_histograms(s, _dict(raw, "hist", path), path)
    _decode_labels(s, raw.get("labels", {}), f"{path}.labels")
    s.bound_errors()
    return key, s


def _decode_labels(s: EndpointStats, raw: object, path: str) -> None:
    if not isinstance(raw, dict):
        raise _fail(path, "a dict", raw)
    for wire_name, raw_counts in raw.items():
        rule = _LABEL_RULES.get(wire_name)
        if rule is None:
            raise _fail(path, f"keyed by {list(_LABEL_RULES)}", wire_name)
        if not isinstance(raw_counts, dict):
            raise _fail(f"{path}.{wire_name}", "a dict", raw_counts)
        out: dict[str, int] = {}
        for label, n in raw_counts.items():
            if not isinstance(label, str) or not label or len(label) > _MAX_LABEL_CHARS:
                raise _fail(f"{path}.{wire_name}", f"keyed by labels of 1-{_MAX_LABEL_CHARS} characters", label)
            count = _count(n, f"{path}.{wire_name}.{label}")
            if count:
                out[label] = count
        bound_labels(out)
        setattr(s, rule.name, out)


def _decode_errors(s: EndpointStats, raw_groups: list[Any], path: str) -> None:
    for i, raw_group in enumerate(raw_groups):
        category, group = _decode_error(raw_group, f"{path}[{i}]")
        if category in s.errors:
            raise _fail(f"{path}[{i}].category", "unique", category)
        s.errors[category] = group


def _hist_rule(wire_name: str, path: str) -> str:
    """The ``EndpointStats`` attribute of the histogram named ``wire_name`` on the wire."""
    rule = _HIST_RULES.get(wire_name)
    if rule is None:
        raise _fail(f"{path}.hist", f"keyed by {list(_HIST_RULES)}", wire_name)
    return rule.name


def _decode_listed_histograms(s: EndpointStats, raw_hists: dict[str, Any], path: str) -> None:
    """Version 1: each histogram's buckets as lists, checked one by one."""
    for wire_name, raw_hist in raw_hists.items():
        setattr(s, _hist_rule(wire_name, path), _decode_histogram(raw_hist, f"{path}.hist.{wire_name}"))


# counts of 8 bytes are read one histogram at a time (``_decode_packed``)
_COUNT_DTYPES = {1: "<u1", 2: "<u2", 4: "<u4"}
_INDEX_DTYPE = "<i4"


def _decode_packed_histograms(s: EndpointStats, raw_hists: dict[str, Any], path: str) -> None:
    """Version 2: every histogram of one endpoint checked together, as whole arrays (the master's hot path).

    The usual histogram (buckets in ascending index order, as every v2 worker
    sends them; 1-4 byte counts; float min/max) has its parts checked in
    Python without building a path, then all of the endpoint's bucket
    arrays at once: one array of indexes (strictly increasing within each
    histogram), one of counts (all > 0; read from one buffer per count
    width), summed per histogram in one call.
    The histograms share those arrays (``LatencyHistogram.from_checked_arrays``).
    Anything else (and a failed whole-array check) goes through
    ``_decode_packed``, one by one, which accepts or rejects exactly as
    before and names what is wrong.
    """
    by_width: dict[int, list[tuple[str, str, dict[str, Any], int]]] = {}
    for wire_name, raw in raw_hists.items():
        name = _hist_rule(wire_name, path)
        if type(raw) is dict and raw.keys() <= _HISTOGRAM_FIELDS:
            idx, cnt, low, high = raw.get("idx"), raw.get("cnt"), raw.get("min"), raw.get("max")
            zero, sum_ns = raw.get("zero"), raw.get("sum_ns")
            if (
                type(idx) is bytes
                and type(cnt) is bytes
                and type(zero) is int
                and type(sum_ns) is int
                and type(low) is float
                and type(high) is float
                and zero >= 0
                and sum_ns >= 0
                and 0.0 <= low <= high < math.inf
            ):
                n = len(idx) >> 2
                width = len(cnt) // n if n and not len(idx) & 3 else 0
                if width in _COUNT_DTYPES and len(cnt) == n * width:
                    by_width.setdefault(width, []).append((name, wire_name, raw, n))
                    continue
        setattr(s, name, _decode_packed(raw, f"{path}.hist.{wire_name}"))
    if not by_width:
        return
    # The histograms in order of count width: each width's counts are read from one joined buffer.
    import numpy as np  # lazy: see the note at the imports

    kept = [item for width in sorted(by_width) for item in by_width[width]]
    indexes = np.frombuffer(b"".join([raw["idx"] for _, _, raw, _ in kept]), _INDEX_DTYPE).astype(np.int64)
    count_parts = [
        np.frombuffer(b"".join([raw["cnt"] for _, _, raw, _ in by_width[width]]), _COUNT_DTYPES[width])
        for width in sorted(by_width)
    ]
    counts = np.concatenate(count_parts, dtype=np.int64)
    starts = [0, *accumulate(n for _, _, _, n in kept)]
    if not counts.all() or not _increasing_within(indexes, starts):
        for name, wire_name, raw, _ in kept:
            setattr(s, name, _decode_packed(raw, f"{path}.hist.{wire_name}"))
        return
    # Counts of at most 4 bytes each: a sum overflows int64 only past 2**31 buckets (an 8 GB message).
    bucketed = np.add.reduceat(counts, starts[:-1]).tolist()
    for k, (name, _, raw, _) in enumerate(kept):
        start, end = starts[k], starts[k + 1]
        zero = raw["zero"]
        hist = LatencyHistogram.from_checked_arrays(
            indexes[start:end],
            counts[start:end],
            zero_count=zero,
            count=bucketed[k] + zero,
            sum_ns=raw["sum_ns"],
            min_s=raw["min"],
            max_s=raw["max"],
        )
        setattr(s, name, hist)


def _increasing_within(indexes: npt.NDArray[np.int64], starts: list[int]) -> bool:
    """True when ``indexes`` strictly increase within each run ``[starts[k], starts[k + 1])``."""
    steps = indexes[1:] - indexes[:-1]
    if len(starts) > 2:
        steps[[start - 1 for start in starts[1:-1]]] = 1  # from one histogram's last index to the next's first
    return not len(steps) or int(steps.min()) > 0


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


def _unpacked(raw: dict[str, Any], key: str, path: str, typecode: str) -> array[int]:
    value = _get(raw, key, path)
    if not isinstance(value, bytes):
        raise _fail(f"{path}.{key}", "bytes (a packed little-endian array)", type(value).__name__)
    out = array(typecode)
    if len(value) % out.itemsize:
        raise _fail(f"{path}.{key}", f"a whole number of {out.itemsize}-byte items", f"{len(value)} bytes")
    out.frombytes(value)
    if not _LITTLE:
        out.byteswap()
    return out


def _decode_packed(raw: object, path: str) -> LatencyHistogram:
    """A version-2 histogram: packed arrays checked as wholes; messages are built only on error."""
    if not isinstance(raw, dict):
        raise _fail(path, "a dict", raw)
    _check_keys(raw, _HISTOGRAM_FIELDS, path)
    indexes = _unpacked(raw, "idx", path, "i")
    cnt = _get(raw, "cnt", path)
    width = len(cnt) // len(indexes) if isinstance(cnt, bytes) and indexes else 1
    counts = _unpacked(raw, "cnt", path, _COUNT_TYPECODES.get(width, "B"))
    try:
        return LatencyHistogram.from_arrays(
            indexes=indexes,
            counts=counts,
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


# ── master/worker envelopes ───────────────────────────────────────────────
ENVELOPE_VERSION = 1
"""Version of the plan and report envelopes (reports without ``"v"`` are read as version 1)."""


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
    raw = _envelope(payload, "report", accepts=(1, REPORT_VERSION))
    _check_keys(raw, _REPORT_KEYS, "report")
    cpu = _optional_float(raw, "cpu_saturated_s", "report") if "cpu_saturated_s" in raw else None
    in_flight = raw.get("in_flight", 0)
    raw_sends = raw.get("sends", {})
    if not isinstance(raw_sends, dict):
        raise _fail("report.sends", "a dict", raw_sends)
    sends = _sends_from_wire(raw_sends)
    series = _series_from_wire(raw.get("series", []))
    if "stats" in raw:  # version 1: the totals travel beside the series
        stats = from_wire(raw["stats"])
    elif raw.get("v", 1) == 1:
        raise WireFormatError(f"llmload worker payload: report.stats is missing; {_MISMATCH_HINT}")
    else:
        stats = _derived_total(series)
    return WorkerReport(
        run_id=_str_field(raw, "run_id", "report"),
        stats=stats,
        cpu_saturated_s=cpu or 0.0,
        in_flight=_count(in_flight, "report.in_flight"),
        sends=sends,
        series=series,
        clock_offset_s=_optional_float(raw, "clock_offset_s", "report") if "clock_offset_s" in raw else None,
        rss_bytes=None if raw.get("rss_bytes") is None else _count(raw["rss_bytes"], "report.rss_bytes"),
        taken_at_unix=_optional_float(raw, "taken_at_unix", "report") if "taken_at_unix" in raw else None,
    )


def _derived_total(series: IntervalSeries) -> LLMStats:
    """The report's totals from its series; a one-interval report shares that interval's statistics (read-only)."""
    items = list(series.items())
    if len(items) == 1:
        return items[0][1]
    return series.total()


def _series_from_wire(raw: object) -> IntervalSeries:
    if not isinstance(raw, list):
        raise _fail("report.series", "a list", raw)
    series = IntervalSeries.empty()
    for n, item in enumerate(raw):
        path = f"report.series[{n}]"
        if not isinstance(item, dict):
            raise _fail(path, "a dict", item)
        _check_keys(item, _SERIES_ITEM_KEYS, path)
        series.adopt(_int_field(item, "i", path), from_wire(_get(item, "stats", path)))
    return series


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
    raw = _envelope(payload, "plan", default_version=None)
    _check_keys(raw, _PLAN_KEYS, "plan")
    shares = {
        str(index): _share_from_dict(raw_share, f"plan.shares.{index}")
        for index, raw_share in _dict(raw, "shares", "plan").items()
    }
    limited = _get(raw, "limited", "plan")
    if not isinstance(limited, bool):
        raise _fail("plan.limited", "a bool", limited)
    return RunPlan(
        run_id=_str_field(raw, "run_id", "plan"),
        model=_optional_str(raw, "model", "plan"),
        url_authorization=_optional_str(raw, "url_authorization", "plan"),
        proxy_note=_optional_str(raw, "proxy_note", "plan"),
        blocked=_optional_str(raw, "blocked", "plan"),
        users_per_worker=_int_field(raw, "users_per_worker", "plan"),
        workers=_int_field(raw, "workers", "plan"),
        limited=limited,
        shares=shares,
        started_at_unix=_float_or_zero(raw, "started_at_unix", "plan"),
        planned_after_s=_float_or_zero(raw, "planned_after_s", "plan"),
    )


def _share_dict(share: WorkerShare) -> dict[str, Any]:
    return {name: getattr(share, name) for name in _SHARE_FIELDS}


def _share_from_dict(raw_share: object, path: str) -> WorkerShare:
    if not isinstance(raw_share, dict):
        raise _fail(path, "a dict", raw_share)
    _check_keys(raw_share, set(_SHARE_FIELDS), path)
    quota = _get(raw_share, "quota_requests", path)
    concurrency = _get(raw_share, "concurrency", path)
    return WorkerShare(
        rank=_int_field(raw_share, "rank", path),
        quota_requests=None if quota is None else _count(quota, f"{path}.quota_requests"),
        warmup_requests=_int_field(raw_share, "warmup_requests", path),
        rate_per_s=_rate(raw_share, path),
        concurrency=None if concurrency is None else _count(concurrency, f"{path}.concurrency", positive=True),
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
    raw = _envelope(payload, "share")
    _check_keys(raw, {"v", "run_id", "share"}, "share")
    return ShareMessage(
        run_id=_str_field(raw, "run_id", "share"), share=_share_from_dict(_get(raw, "share", "share"), "share.share")
    )


def _envelope(
    payload: object,
    what: str,
    default_version: int | None = ENVELOPE_VERSION,
    accepts: tuple[int, ...] = (ENVELOPE_VERSION,),
) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise WireFormatError(f"llmload {what} must be a dict, got {type(payload).__name__}; {_MISMATCH_HINT}")
    version = payload.get("v", default_version)
    if version not in accepts or isinstance(version, bool):
        newer = isinstance(version, int) and not isinstance(version, bool) and version > max(accepts)
        side = "this process" if newer else "the process that sent it"
        speaks = f"v{accepts[0]}" if len(accepts) == 1 else f"v{accepts[0]}-v{accepts[-1]}"
        raise WireFormatError(
            f"llmload {what} has version {version!r}, this process speaks {speaks}; "
            f"upgrade llmload on {side} ({_MISMATCH_HINT})"
        )
    return payload


def _rate(raw: dict[str, Any], path: str) -> float | None:
    value = _get(raw, "rate_per_s", path)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:  # inf: unlimited rate
        return float(value)
    raise _fail(f"{path}.rate_per_s", "a positive number, inf or None", value)


def _optional_str(raw: dict[str, Any], key: str, path: str) -> str | None:
    value = _get(raw, key, path)
    if value is not None and not isinstance(value, str):
        raise _fail(f"{path}.{key}", "a string or None", value)
    return value
