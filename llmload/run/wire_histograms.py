"""Histograms on the wire, both ways: version 1's delta-encoded bucket lists and version 2's packed bucket arrays.

The shapes are ``llmload.run.wire``'s (its docstring). A version-2 decode
checks a whole endpoint's bucket arrays at once (``decode_packed_histograms``,
the master's hot path) and falls back to one histogram at a time
(``decode_packed``) to name what is wrong.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from llmload.aggregate.histogram import MAX_INDEX, MIN_INDEX, LatencyHistogram
from llmload.aggregate.stats import STATS_SCHEMA, EndpointStats
from llmload.errors import WireFormatError
from llmload.run.wire_fields import (
    MISMATCH_HINT,
    check_keys,
    checked_count,
    fail,
    get_field,
    int_field,
    list_field,
    optional_float,
)

# numpy is imported only by the decode of packed bucket arrays (a master's path): a single process or a
# worker encodes without it (~10 MiB resident, see llmload.aggregate.histogram).
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["decode_listed_histograms", "decode_packed", "decode_packed_histograms", "encode_listed", "encode_packed"]

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


def encode_packed(hist: LatencyHistogram) -> dict[str, Any]:
    indexes, counts = hist.arrays()
    return {
        "idx": _packed("i", indexes),
        "cnt": _packed(_count_typecode(max(counts, default=0)), counts),
        "zero": hist.zero_count,
        "sum_ns": hist.sum_ns,
        "min": hist.min,
        "max": hist.max,
    }


def encode_listed(hist: LatencyHistogram) -> dict[str, Any]:
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


_HIST_RULES = {r.wire_name: r for r in STATS_SCHEMA if r.wire_group == "hist"}
_HISTOGRAM_FIELDS = {"idx", "cnt", "zero", "sum_ns", "min", "max"}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hist_rule(wire_name: str, path: str) -> str:
    """The ``EndpointStats`` attribute of the histogram named ``wire_name`` on the wire."""
    rule = _HIST_RULES.get(wire_name)
    if rule is None:
        raise fail(f"{path}.hist", f"keyed by {list(_HIST_RULES)}", wire_name)
    return rule.name


def decode_listed_histograms(s: EndpointStats, raw_hists: dict[str, Any], path: str) -> None:
    """Version 1: each histogram's buckets as lists, checked one by one."""
    for wire_name, raw_hist in raw_hists.items():
        setattr(s, _hist_rule(wire_name, path), _decode_histogram(raw_hist, f"{path}.hist.{wire_name}"))


# counts of 8 bytes are read one histogram at a time (``decode_packed``)
_COUNT_DTYPES = {1: "<u1", 2: "<u2", 4: "<u4"}
_INDEX_DTYPE = "<i4"


def decode_packed_histograms(s: EndpointStats, raw_hists: dict[str, Any], path: str) -> None:
    """Version 2: every histogram of one endpoint checked together, as whole arrays (the master's hot path).

    The usual histogram (buckets in ascending index order, as every v2 worker
    sends them; 1-4 byte counts; float min/max) has its parts checked in
    Python without building a path, then all of the endpoint's bucket
    arrays at once: one array of indexes (strictly increasing within each
    histogram, all from ``MIN_INDEX`` to ``MAX_INDEX``), one of counts (all > 0; read from one buffer per count
    width), summed per histogram in one call.
    The histograms share those arrays (``LatencyHistogram.from_checked_arrays``).
    Anything else (and a failed whole-array check) goes through
    ``decode_packed``, one by one, which accepts or rejects exactly as
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
        setattr(s, name, decode_packed(raw, f"{path}.hist.{wire_name}"))
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
    if not counts.all() or not _increasing_within(indexes, starts) or not _within_range(indexes):
        for name, wire_name, raw, _ in kept:
            setattr(s, name, decode_packed(raw, f"{path}.hist.{wire_name}"))
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


def _within_range(indexes: npt.NDArray[np.int64]) -> bool:
    """True when every index is a bucket a histogram holds (``MIN_INDEX`` to ``MAX_INDEX``), in two passes in C."""
    return int(indexes.min()) >= MIN_INDEX and int(indexes.max()) <= MAX_INDEX


# A corrupted report's bucket indexes are refused before anything is built from them: the master's merge allocates
# one counter per bucket between a histogram's smallest and largest index (``LatencyHistogram._sum_arrays``).
_IN_RANGE = f"bucket indexes from {MIN_INDEX} to {MAX_INDEX}"


def _increasing_within(indexes: npt.NDArray[np.int64], starts: list[int]) -> bool:
    """True when ``indexes`` strictly increase within each run ``[starts[k], starts[k + 1])``."""
    steps = indexes[1:] - indexes[:-1]
    if len(starts) > 2:
        steps[[start - 1 for start in starts[1:-1]]] = 1  # from one histogram's last index to the next's first
    return not len(steps) or int(steps.min()) > 0


def _decode_histogram(raw: object, path: str) -> LatencyHistogram:
    if not isinstance(raw, dict):
        raise fail(path, "a dict", raw)
    check_keys(raw, _HISTOGRAM_FIELDS, path)
    deltas = list_field(raw, "idx", path)
    counts = list_field(raw, "cnt", path)
    if len(deltas) != len(counts):
        raise fail(f"{path}.cnt", f"as long as idx ({len(deltas)})", len(counts))
    buckets: list[tuple[int, int]] = []
    index = 0
    for i, (delta, count) in enumerate(zip(deltas, counts, strict=True)):
        if not _is_int(delta) or (i > 0 and delta <= 0):
            raise fail(f"{path}.idx[{i}]", "an integer (increasing after the first)", delta)
        index += delta
        if not MIN_INDEX <= index <= MAX_INDEX:
            raise fail(f"{path}.idx[{i}]", f"a step to a bucket index from {MIN_INDEX} to {MAX_INDEX}", delta)
        buckets.append((index, checked_count(count, f"{path}.cnt[{i}]", positive=True)))
    return _built(LatencyHistogram.from_buckets, raw, path, buckets=buckets)


def _built(make: Callable[..., LatencyHistogram], raw: dict[str, Any], path: str, **buckets: Any) -> LatencyHistogram:
    """``make(**buckets)`` with the histogram's scalar fields; its ValueError as a WireFormatError naming ``path``."""
    try:
        return make(
            **buckets,
            zero_count=int_field(raw, "zero", path),
            sum_ns=int_field(raw, "sum_ns", path),
            min_s=optional_float(raw, "min", path),
            max_s=optional_float(raw, "max", path),
        )
    except ValueError as exc:
        raise WireFormatError(f"llmload worker payload: {path}: {exc}; {MISMATCH_HINT}") from exc


def _unpacked(raw: dict[str, Any], key: str, path: str, typecode: str) -> array[int]:
    value = get_field(raw, key, path)
    if not isinstance(value, bytes):
        raise fail(f"{path}.{key}", "bytes (a packed little-endian array)", type(value).__name__)
    out = array(typecode)
    if len(value) % out.itemsize:
        raise fail(f"{path}.{key}", f"a whole number of {out.itemsize}-byte items", f"{len(value)} bytes")
    out.frombytes(value)
    if not _LITTLE:
        out.byteswap()
    return out


def decode_packed(raw: object, path: str) -> LatencyHistogram:
    """A version-2 histogram: packed arrays checked as wholes; messages are built only on error."""
    if not isinstance(raw, dict):
        raise fail(path, "a dict", raw)
    check_keys(raw, _HISTOGRAM_FIELDS, path)
    indexes = _unpacked(raw, "idx", path, "i")
    if indexes:
        low, high = min(indexes), max(indexes)
        if low < MIN_INDEX or high > MAX_INDEX:
            raise fail(f"{path}.idx", _IN_RANGE, low if low < MIN_INDEX else high)
    cnt = get_field(raw, "cnt", path)
    width = len(cnt) // len(indexes) if isinstance(cnt, bytes) and indexes else 1
    counts = _unpacked(raw, "cnt", path, _COUNT_TYPECODES.get(width, "B"))
    return _built(LatencyHistogram.from_arrays, raw, path, indexes=indexes, counts=counts)
