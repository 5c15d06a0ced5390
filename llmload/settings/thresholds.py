"""``--abort-on`` thresholds: the expression grammar and their evaluation over time-series rows.

Grammar (spaces allowed anywhere between the parts, any case)::

    METRIC OP VALUE [for DURATION]

- ``METRIC``: one of ``METRICS``, read from each interval's total row
  (``llmload.exporters.timeseries``): ``error_ratio`` (failed / finished),
  ``throttled_ratio`` (429/503 / finished), ``ttft_p50`` … ``e2e_p99``
  (TTFT, ITL, TPOT, E2E at p50, p90, p99, over the interval's successes),
  ``output_tok_s`` (output tokens per second), ``total_tok_s``, ``req_s``
  (successful requests per second).
- ``OP``: ``>``, ``>=``, ``<`` or ``<=``.
- ``VALUE``: latencies need a unit, ``s`` or ``ms`` (``10s``, ``500ms``);
  ratios are a number from 0 to 1 or a percentage (``0.05``, ``5%``); rates
  are a plain number.
- ``for DURATION``: how long the condition must hold without a break, as
  ``90s``, ``5m``, ``1h`` or ``1h30m`` (units ``ms``, ``s``, ``m``, ``h``).
  Default: one interval. It is rounded up to whole intervals.

Evaluation (``ThresholdWatch``): each completed interval's total row either
holds the condition, does not, or leaves the metric unknown (no request
finished in it; for latencies, none succeeded). Like a Prometheus alert's
``for``, an interval that does not hold *or* is unknown restarts the count,
so a threshold fires only on evidence. Rates are 0 (known) in an interval
where nothing finished, so ``req_s<1 for 2m`` catches a server that hangs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmload.errors import ConfigError

__all__ = ["METRICS", "Breach", "Threshold", "ThresholdWatch", "parse_threshold", "parse_thresholds"]

_EXAMPLES = '"error_ratio>0.05 for 5m", "ttft_p99>10s for 10m", "output_tok_s<100 for 2m"'

_LATENCY = {
    f"{prefix}_{p}": f"{prefix}_{p}_s" for prefix in ("ttft", "itl", "tpot", "e2e") for p in ("p50", "p90", "p99")
}
_RATES = {"output_tok_s": "output_tokens_per_s", "total_tok_s": "total_tokens_per_s", "req_s": "requests_per_s"}
_RATIOS = ("error_ratio", "throttled_ratio")

METRICS: tuple[str, ...] = (*_RATIOS, *_LATENCY, *_RATES)
"""Metric names ``--abort-on`` accepts."""

_OPS = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}
_EXPR = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=|>|<|==|=|!=)?\s*(.*?)\s*$", re.IGNORECASE)
_FOR = re.compile(r"\s+for\s+|\s+for$", re.IGNORECASE)
_VALUE = re.compile(r"^([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(ms|s|%)?$", re.IGNORECASE)
_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)\s*(ms|h|m|s)", re.IGNORECASE)
_DURATION_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class Threshold:
    """One parsed ``--abort-on`` expression.

    Attributes:
        text: the expression as given (stripped), quoted in logs and results.
        metric: one of ``METRICS``.
        op: ``>``, ``>=``, ``<`` or ``<=``.
        value: the limit in the row's unit (seconds for latencies, 0..1 for ratios, per second for rates).
        for_s: how long the condition must hold, in seconds; None = one interval.
    """

    text: str
    metric: str
    op: str
    value: float
    for_s: float | None = None

    @property
    def column(self) -> str | None:
        """The time-series column the metric is read from (e.g. ``ttft_p99_s``); None for a ratio of two columns."""
        return _LATENCY.get(self.metric) or _RATES.get(self.metric)

    def read(self, row: Mapping[str, Any]) -> float | None:
        """The metric's value in a total row; None when unknown (nothing finished or, for latencies, succeeded)."""
        if self.metric in _RATIOS:
            finished = int(row.get("succeeded") or 0) + int(row.get("failed") or 0)
            if finished == 0:
                return None
            part = row.get("failed" if self.metric == "error_ratio" else "throttled") or 0
            return float(part) / finished
        value = row.get(_LATENCY.get(self.metric) or _RATES[self.metric])
        return None if value is None else float(value)

    def holds(self, value: float | None) -> bool:
        """True when ``value`` is known and meets the condition."""
        return value is not None and bool(_OPS[self.op](value, self.value))

    def intervals(self, interval_s: float) -> int:
        """How many consecutive intervals of ``interval_s`` seconds the condition must hold (at least 1)."""
        if self.for_s is None:
            return 1
        return max(1, math.ceil(self.for_s / interval_s - 1e-9))


def _refuse(flag: str, raw: str, why: str, fix: str, *, more: bool = False) -> ConfigError:
    examples = f" (more: {_EXAMPLES})" if more else ""
    return ConfigError(f"{flag} {raw!r}: {why}; pass e.g. {flag} {fix!r}{examples}")


def _duration_fix(text: str) -> str:
    """``text`` if it is a valid duration, else a valid one close to it (for a suggested fix)."""
    compact = text.replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if compact and "".join(n + u for n, u in parts) == compact:
        return compact
    return f"{compact}s" if re.fullmatch(r"[0-9]*\.?[0-9]+", compact) else "5m"


def _duration_s(flag: str, raw: str, condition: str, text: str) -> float:
    """``90s``, ``5m``, ``1h30m`` … in seconds (> 0); ``condition`` is the part before ``for`` (for the fix)."""
    compact = text.replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        hint = f"{compact}s" if re.fullmatch(r"[0-9]*\.?[0-9]+", compact) else "5m"
        why = f"the duration after 'for' must be like 90s, 5m or 1h30m, got {text!r}"
        raise _refuse(flag, raw, why, f"{condition} for {hint}")
    seconds = sum(float(n) * _DURATION_S[u.lower()] for n, u in parts)
    if not 0 < seconds < math.inf:
        raise _refuse(flag, raw, f"the duration after 'for' must be more than 0, got {text!r}", f"{condition} for 5m")
    return seconds


def _value(flag: str, raw: str, metric: str, text: str, *, head: str, tail: str) -> float:
    """The limit in the row's unit, checked against the metric's kind (``head``, ``tail``: around it, for fixes)."""
    match = _VALUE.match(text)
    if match is None:
        negative = _VALUE.match(text.lstrip()[1:]) if text.lstrip().startswith("-") else None
        why = f"the value {text!r} " + ("is negative" if negative else "is not a number (with a unit for latencies)")
        raise _refuse(flag, raw, why, _example(metric))
    number, unit = float(match.group(1)), (match.group(2) or "").lower()
    if not math.isfinite(number):
        raise _refuse(
            flag, raw, f"the value {text!r} is not a finite number: the threshold could never fire", _example(metric)
        )
    if metric in _LATENCY:
        if unit not in ("s", "ms"):
            raise _refuse(flag, raw, f"{metric} is a latency: give its unit, s or ms", f"{head}{text}s{tail}")
        return number / 1000 if unit == "ms" else number
    if metric in _RATIOS:
        if unit == "%":
            number /= 100
        elif unit:
            raise _refuse(flag, raw, f"{metric} is a ratio: a number from 0 to 1 or a percentage", f"{head}0.05{tail}")
        if not 0 <= number <= 1:
            raise _refuse(
                flag, raw, f"{metric} is a ratio from 0 to 1 (or 0% to 100%), got {text!r}", f"{head}0.05{tail}"
            )
        return number
    if unit:
        raise _refuse(flag, raw, f"{metric} is a rate per second: a plain number, no unit", f"{head}{number:g}{tail}")
    return number


def _example(metric: str) -> str:
    if metric in _LATENCY:
        return f"{metric}>10s for 10m"
    if metric in _RATIOS:
        return f"{metric}>0.05 for 5m"
    return f"{metric}<100 for 2m"


def parse_threshold(raw: str, flag: str = "--abort-on") -> Threshold:
    """Parse one expression (module docstring: the grammar).

    Raises:
        ConfigError: naming the flag, the expression, what is wrong and an example fix.
    """
    text = raw.strip()
    condition, *rest = _FOR.split(text, maxsplit=1)
    match = _EXPR.match(condition)
    if match is None or not text:
        raise _refuse(flag, raw, "expected METRIC OP VALUE [for DURATION]", "error_ratio>0.05 for 5m", more=True)
    metric, op, value_text = match.group(1).lower(), match.group(2), match.group(3)
    if metric not in METRICS:
        raise _refuse(
            flag, raw, f"unknown metric {metric!r}; known: {', '.join(METRICS)}", "error_ratio>0.05 for 5m", more=True
        )
    if op is None:
        raise _refuse(flag, raw, "no comparison; use >, >=, < or <=", _example(metric))
    if op not in _OPS:
        raise _refuse(flag, raw, f"comparison {op!r} is not one of >, >=, <, <=", _example(metric))
    if not value_text:
        raise _refuse(flag, raw, f"no value after {op!r}", _example(metric))
    tail = f" for {_duration_fix(rest[0].strip())}" if rest else ""
    value = _value(flag, raw, metric, value_text, head=f"{metric}{op}", tail=tail)
    for_s = None
    if rest:
        for_s = _duration_s(flag, raw, condition.strip(), rest[0].strip())
    return Threshold(text=text, metric=metric, op=op, value=value, for_s=for_s)


def parse_thresholds(flag: str, value: str) -> tuple[Threshold, ...]:
    """The option parser: one expression per line (the option repeated gives several lines).

    Raises:
        ConfigError: for the first bad expression (``parse_threshold``).
    """
    return tuple(parse_threshold(line, flag) for line in value.splitlines() if line.strip())


@dataclass(frozen=True, slots=True)
class Breach:
    """A threshold that fired: the results' ``aborted`` section (``as_dict``).

    Attributes:
        threshold: the expression as given.
        at_s: end of the interval that completed the window, seconds since the run's start.
        from_s: start of the window's first interval.
        values: the metric's value in each interval of the window, oldest first (the row's unit).
    """

    threshold: str
    at_s: float
    from_s: float
    values: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        """``{"threshold", "at_s", "from_s", "values"}`` (JSON-ready)."""
        return {"threshold": self.threshold, "at_s": self.at_s, "from_s": self.from_s, "values": list(self.values)}


@dataclass
class _Streak:
    values: list[float] = field(default_factory=list)
    from_s: float = 0.0


class ThresholdWatch:
    """Evaluates thresholds over the total rows of consecutive completed intervals (pure; fed in order).

    Each threshold keeps its current streak of intervals that held; the first
    threshold whose streak reaches ``Threshold.intervals`` gives a ``Breach``.
    """

    def __init__(self, thresholds: Iterable[Threshold], interval_s: float) -> None:
        """Watch ``thresholds`` over rows of ``interval_s`` seconds.

        Raises:
            ValueError: ``interval_s`` is not a positive finite number.
        """
        if not 0 < interval_s < math.inf:
            raise ValueError(f"interval must be a positive number of seconds, got {interval_s!r}")
        self.thresholds = tuple(thresholds)
        self.interval_s = interval_s
        self._streaks = [_Streak() for _ in self.thresholds]

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> Breach | None:
        """Feed rows of completed intervals (per-key rows are skipped); the first breach, or None.

        Rows must come in interval order, each interval once.
        """
        for row in rows:
            if row.get("endpoint") is not None:
                continue
            for threshold, streak in zip(self.thresholds, self._streaks, strict=True):
                value = threshold.read(row)
                if not threshold.holds(value):
                    streak.values.clear()
                    continue
                assert value is not None
                if not streak.values:
                    streak.from_s = float(row["t"])
                streak.values.append(value)
                if len(streak.values) >= threshold.intervals(self.interval_s):
                    at_s = float(row["t"]) + float(row["interval_s"])
                    return Breach(threshold.text, at_s, streak.from_s, tuple(streak.values))
        return None
