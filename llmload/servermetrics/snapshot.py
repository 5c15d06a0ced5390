"""One scrape: Prometheus text → the common vocabulary (``parse_snapshot``), and histogram bucket arithmetic."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_fd_to_metric_families

from llmload.errors import ServerMetricsError
from llmload.servermetrics.names import (
    HISTOGRAMS,
    MEAN_GAUGES,
    MODEL_LABEL,
    NAMES,
    SCALE,
    ServerKind,
    canonical,
    detect,
    family_of,
    llm_looking,
    mapped_families,
    mapped_histograms,
)

__all__ = ["MAX_UNMAPPED", "BucketCounts", "QuantileEstimate", "ServerSnapshot", "parse_snapshot"]

MAX_UNMAPPED = 50
"""Most unmapped LLM-looking families listed per snapshot (a page of a few hundred families stays readable)."""


@dataclass(frozen=True, slots=True)
class BucketCounts:
    """A histogram as scraped: cumulative counts per upper bound (seconds), plus sum and count.

    ``upper_bounds`` ends with ``inf`` when the server sent a ``+Inf`` bucket;
    empty for a summary (then only the mean is known).
    """

    upper_bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    def minus(self, earlier: BucketCounts) -> BucketCounts | None:
        """This minus ``earlier``; None when the histogram was reset in between (or its buckets changed)."""
        if earlier.upper_bounds != self.upper_bounds or self.count < earlier.count:
            return None
        cumulative = tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True))
        if any(c < 0 for c in cumulative):
            return None
        return BucketCounts(self.upper_bounds, cumulative, self.sum - earlier.sum, self.count - earlier.count)

    def plus(self, other: BucketCounts) -> BucketCounts:
        """Bucket-wise sum; ``other``'s buckets replace these when the two differ (a server restart)."""
        if other.upper_bounds != self.upper_bounds:
            return other
        cumulative = tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True))
        return BucketCounts(self.upper_bounds, cumulative, self.sum + other.sum, self.count + other.count)

    def mean(self) -> float | None:
        """Mean in seconds; None without observations."""
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile by linear interpolation within its bucket (Prometheus' ``histogram_quantile``).

        A quantile in the ``+Inf`` bucket is the highest finite bound. None
        without observations or buckets.
        """
        if self.count <= 0 or not self.upper_bounds:
            return None
        rank = q * self.cumulative[-1]
        lower, below = 0.0, 0.0
        for bound, cum in zip(self.upper_bounds, self.cumulative, strict=True):
            if cum >= rank and cum > below:
                if math.isinf(bound):
                    return lower
                return lower + (bound - lower) * (rank - below) / (cum - below)
            lower, below = bound, cum
        return lower

    def estimate(self, q: float) -> QuantileEstimate | None:
        """The ``q``-quantile with the range a histogram can support for it; None without observations.

        The rule: the true quantile lies in its bucket ``(lower, upper]``, and
        (latencies being non-negative) never above ``mean / (1 − q)``: no
        distribution with that mean has more than a share 1 − q of it above
        that (Markov). So ``upper`` is the smaller of the bucket's bound and
        that cap (never below ``lower``; None for the ``+Inf`` bucket without
        a cap), and ``value`` is the interpolated quantile held within
        ``[lower, upper]``. A wide range marks the value as an estimate.
        """
        value = self.quantile(q)
        if value is None:
            return None
        rank = q * self.cumulative[-1]
        lower, below, upper = 0.0, 0.0, math.inf
        for bound, cum in zip(self.upper_bounds, self.cumulative, strict=True):
            if cum >= rank and cum > below:
                upper = bound
                break
            lower, below = bound, cum
        mean = self.mean()
        if mean is not None and q < 1.0:
            upper = min(upper, max(lower, mean / (1.0 - q)))
        value = min(max(value, lower), upper)
        return QuantileEstimate(value, lower, None if math.isinf(upper) else upper)


@dataclass(frozen=True, slots=True)
class QuantileEstimate:
    """A server histogram quantile (seconds) and the range its buckets and mean allow (``BucketCounts.estimate``).

    ``upper`` is None when the quantile fell in the ``+Inf`` bucket and the mean gives no cap.
    """

    value: float
    lower: float
    upper: float | None

    @property
    def width(self) -> float | None:
        """``upper − lower``: how finely the histogram resolves the quantile; None when unbounded."""
        return None if self.upper is None else self.upper - self.lower


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """One scrape of one endpoint, in the common vocabulary.

    Attributes:
        kind: who published it.
        values: common gauge and counter names → value (base units; ratios 0..1).
        histograms: common histogram names → bucket counts.
        names: common name → the raw name it was read from (as the server spelled it).
        raw: every sample name (buckets excluded; one spelling per family) → value, summed over the kept series.
        notes: what the reader should know (e.g. no series for ``--model``).
        unmapped: LLM-looking families (``names.llm_looking``) that no mapping reads, as spelled on
            the page, sorted, at most ``MAX_UNMAPPED``.
    """

    kind: ServerKind
    values: Mapping[str, float]
    histograms: Mapping[str, BucketCounts]
    names: Mapping[str, str]
    raw: Mapping[str, float]
    notes: tuple[str, ...] = ()
    unmapped: tuple[str, ...] = ()


def _not_prometheus(text: str) -> str:
    """What a body that the Prometheus text parser refused looks like, as one sentence with the fix."""
    head = text.lstrip()[:1]
    fix = "is it the /metrics path?"
    if head in ("{", "["):
        return f"the answer is JSON, not the Prometheus text format: {fix}"
    if head == "<":
        return f"the answer is an HTML page, not the Prometheus text format: {fix}"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"the answer is not the Prometheus text format (it began {first[:60]!r}): {fix}"


def _read_bucket(line: str, read: frozenset[str], seen: dict[str, bool]) -> bool:
    """False for a ``_bucket`` sample line of a histogram no mapping reads (``names.mapped_histograms``).

    Such lines are most of a server's page (the simulator's: 1,190 of 1,802; vLLM's
    tens of unmapped histograms) and nothing reads them: the family's ``_sum`` and
    ``_count`` (which ``raw`` and ``unmapped`` use) are kept.
    """
    end = line.find("{")
    name = line[: end if end >= 0 else line.find(" ")]
    if not name.endswith("_bucket"):
        return True
    kept = seen.get(name)
    if kept is None:
        kept = seen[name] = canonical(name)[: -len("_bucket")] in read
    return kept


def _lines(text: str, pause: Callable[[], None] | None) -> Iterator[str]:
    """The lines of ``text`` the snapshot reads (newlines kept, as a file gives them); ``pause()`` before each."""
    read, seen = mapped_histograms(), dict[str, bool]()
    for line in io.StringIO(text):
        if pause is not None:
            pause()
        if line.startswith("#") or _read_bucket(line, read, seen):
            yield line


def parse_snapshot(text: str, model: str | None = None, *, pause: Callable[[], None] | None = None) -> ServerSnapshot:
    """Parse one Prometheus text exposition and map it onto the common vocabulary.

    Args:
        text: the body of ``GET /metrics``.
        model: served model name; series labelled ``model_name`` with another
            value are left out (when some series carry this one).
        pause: called before each line is parsed, so that a caller on an event loop
            can let other work run (a 100-200 KB page, as vLLM and the simulator
            publish, takes prometheus_client's parser tens of milliseconds).

    Raises:
        ServerMetricsError: the text is not Prometheus text, or has no sample at all.
    """
    try:
        lines: Iterable[str] = _lines(text, pause)
        samples = [s for family in text_fd_to_metric_families(lines) for s in family.samples]  # type: ignore[arg-type]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ServerMetricsError(_not_prometheus(text)) from exc
    if not samples:
        raise ServerMetricsError("no metric samples in the answer; point --server-metrics at a /metrics URL")
    notes: list[str] = []
    labelled = {s.labels[MODEL_LABEL] for s in samples if MODEL_LABEL in s.labels}
    if model and labelled and model in labelled:
        samples = [s for s in samples if s.labels.get(MODEL_LABEL, model) == model]
    elif model and labelled:
        notes.append(f"no series labelled {MODEL_LABEL}={model!r} (found {sorted(labelled)}); all were kept")
    sent = dict.fromkeys(s.name for s in samples)  # distinct names, in page order
    canonical_of = {name: canonical(name) for name in sent}
    spelled = _spellings(canonical_of)
    kind = detect(spelled)
    raw: dict[str, list[float]] = {}  # by canonical name, one spelling per family (see _spellings)
    buckets: dict[str, dict[float, float]] = {}
    for s in samples:
        name = canonical_of[s.name]
        if spelled[name] != s.name:
            continue  # the same family in another spelling: read once
        if name.endswith("_bucket") and "le" in s.labels:
            per_le = buckets.setdefault(name[: -len("_bucket")], {})
            le = float(s.labels["le"])
            per_le[le] = per_le.get(le, 0.0) + s.value
        elif "quantile" not in s.labels and math.isfinite(s.value):  # a NaN gauge is "no value", not a number
            raw.setdefault(name, []).append(s.value)
    values: dict[str, float] = {}
    histograms: dict[str, BucketCounts] = {}
    names: dict[str, str] = {}
    for common, candidates in NAMES[kind].items():
        for name in candidates:
            if common in HISTOGRAMS:
                hist = _histogram(name, buckets, raw)
                if hist is not None:
                    histograms[common], names[common] = hist, _spelled_family(name, spelled)
                    break
            elif name in raw:
                series = raw[name]
                total = math.fsum(series) * SCALE.get(name, 1.0)
                values[common] = total / len(series) if common in MEAN_GAUGES else total
                names[common] = spelled[name]
                break
    summed = {spelled[name]: math.fsum(v) for name, v in raw.items()}
    return ServerSnapshot(kind, values, histograms, names, summed, tuple(notes), _unmapped(spelled))


def _spellings(canonical_of: Mapping[str, str]) -> dict[str, str]:
    """Canonical sample name → the one spelling read for it: the canonical one if sent, else the first seen."""
    out: dict[str, str] = {}
    for name, key in canonical_of.items():
        if key not in out or name == key:
            out[key] = name
    return out


def _spelled_family(family: str, spelled: Mapping[str, str]) -> str:
    """A histogram's family name as the page spells it (read from its ``_count`` sample)."""
    count = spelled.get(f"{family}_count")
    return family if count is None else count[: -len("_count")]


def _unmapped(spelled: Mapping[str, str]) -> tuple[str, ...]:
    known = mapped_families()
    families = {family_of(key): family_of(name) for key, name in spelled.items()}
    found = sorted(name for key, name in families.items() if key not in known and llm_looking(name))
    return tuple(found[:MAX_UNMAPPED])


def _histogram(name: str, buckets: dict[str, dict[float, float]], raw: dict[str, list[float]]) -> BucketCounts | None:
    if f"{name}_count" not in raw:
        return None
    per_le = buckets.get(name, {})
    bounds = tuple(sorted(per_le))
    return BucketCounts(
        upper_bounds=bounds,
        cumulative=tuple(per_le[b] for b in bounds),
        sum=math.fsum(raw.get(f"{name}_sum", [])),
        count=math.fsum(raw[f"{name}_count"]),
    )
