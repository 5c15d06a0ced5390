"""One declaration per statistics field: how it merges and where it travels on the wire.

``EndpointStats`` declares each field with one of the helpers below
(``counter``, ``counts``, ``histogram``, ``earliest``, ``latest``,
``error_table``, ``labels``). ``schema_of`` reads those declarations back as
``FieldRule``s; ``EndpointStats.merge_in`` and ``llmload.run.wire`` loop over
them, so a new field merges, crosses the wire and is covered by the merge-law
and round-trip property tests without further edits. Only the per-request
hot path (``EndpointStats.add``) is written out by hand.

Wire placement (version 1 of ``llmload.run.wire``): fields of the first v1
release are required top-level keys (``top=True``); fields added since travel
in the optional ``counters`` (integers, zero omitted), ``hist`` (histograms,
empty omitted) or ``labels`` (string-keyed counts, empty omitted) maps, so
workers of an older release still merge into a newer master.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from llmload.aggregate.histogram import LatencyHistogram

__all__ = [
    "FieldRule",
    "Merge",
    "counter",
    "counts",
    "earliest",
    "error_table",
    "histogram",
    "labels",
    "latest",
    "schema_of",
]

_RULE = "llmload_rule"


class Merge(Enum):
    """How two values of one field combine (each is associative and commutative)."""

    SUM = "sum"
    """int: a + b; identity 0."""
    COUNTS = "counts"
    """dict key -> int: summed per key; zero entries never stored; identity {}."""
    HISTOGRAM = "histogram"
    """LatencyHistogram: bucket-wise merge; identity the empty histogram."""
    EARLIEST = "earliest"
    """float | None: the smaller; None (nothing seen) is the identity."""
    LATEST = "latest"
    """float | None: the larger; None is the identity."""
    ERRORS = "errors"
    """dict category -> ErrorGroup: merged per category, then bounded (``EndpointStats.bound_errors``)."""
    LABELS = "labels"
    """dict str label -> int: summed per label, then bounded (``bound_labels`` in ``llmload.aggregate.stats``)."""


@dataclass(frozen=True, slots=True)
class FieldRule:
    """The merge rule and wire placement of one ``EndpointStats`` field.

    Attributes:
        name: the attribute name.
        merge: how two values combine.
        wire_name: the key on the wire (the attribute name unless renamed).
        wire_group: None for a required top-level key; ``"counters"``,
            ``"hist"`` or ``"labels"`` for the optional maps (default values omitted).
        keys: for ``COUNTS``, the enum whose ``.value`` keys the wire map.
        group: for ``HISTOGRAM``, ``"latency"`` (results ``latency``) or
            ``"client"`` (results ``client``).
    """

    name: str
    merge: Merge
    wire_name: str
    wire_group: str | None = None
    keys: type[Enum] | None = None
    group: str | None = None


def _declare(default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING, **rule: Any) -> Any:
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={_RULE: rule})
    return dataclasses.field(default=default, metadata={_RULE: rule})


def counter(*, top: bool = False) -> Any:
    """An int that adds up (default 0); on the wire under ``counters`` unless ``top`` (v1's first fields)."""
    return _declare(0, merge=Merge.SUM, wire_group=None if top else "counters")


def counts(keys: type[Enum], *, wire: str) -> Any:
    """A dict from ``keys`` members to ints that add up per key; a required wire map named ``wire``."""
    return _declare(factory=dict, merge=Merge.COUNTS, keys=keys, wire_name=wire)


def histogram(group: str) -> Any:
    """A ``LatencyHistogram`` in ``group`` ("latency" or "client"); on the wire under ``hist``."""
    if group not in ("latency", "client"):
        raise ValueError(f"histogram group must be 'latency' or 'client', got {group!r}")
    return _declare(factory=LatencyHistogram.empty, merge=Merge.HISTOGRAM, wire_group="hist", group=group)


def labels() -> Any:
    """A dict from bounded string labels to ints that add up per label; on the wire under ``labels`` (empty omitted)."""
    return _declare(factory=dict, merge=Merge.LABELS, wire_group="labels")


def earliest() -> Any:
    """A wall-clock stamp, the earliest seen (None: nothing seen); a required top-level wire key."""
    return _declare(None, merge=Merge.EARLIEST)


def latest() -> Any:
    """A wall-clock stamp, the latest seen (None: nothing seen); a required top-level wire key."""
    return _declare(None, merge=Merge.LATEST)


def error_table() -> Any:
    """The bounded failures-by-category table; a required top-level wire list."""
    return _declare(factory=dict, merge=Merge.ERRORS)


def schema_of(cls: type[Any]) -> tuple[FieldRule, ...]:
    """Return the ``FieldRule`` of every field of dataclass ``cls``, in declaration order.

    Raises:
        TypeError: a field was declared without one of this module's helpers
            (it would be silently left out of merges and the wire).
    """
    rules = []
    for f in dataclasses.fields(cls):
        rule = f.metadata.get(_RULE)
        if rule is None:
            raise TypeError(
                f"{cls.__name__}.{f.name} has no merge rule; declare it with llmload.aggregate.stats_schema "
                "(counter, counts, histogram, earliest, latest, error_table or labels)"
            )
        declared = dict(rule)
        rules.append(FieldRule(name=f.name, wire_name=declared.pop("wire_name", f.name), **declared))
    return tuple(rules)
