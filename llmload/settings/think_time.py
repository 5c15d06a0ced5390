"""``--think-time``: the pause between a session's turns, fixed or drawn from a distribution.

``--think-time`` syntax (seconds):

- ``S``: always S, e.g. ``2`` or ``0.5``;
- ``exp:MEAN``: exponential with that mean (a user who reads at a random pace);
- ``uniform:MIN:MAX``: uniform between MIN and MAX;
- ``normal:MEAN:SD``: normal, negative draws taken as 0.

"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from llmload.errors import ConfigError

__all__ = ["ThinkTime", "parse_think_time"]

_KINDS = ("fixed", "exp", "uniform", "normal")
_EXAMPLES = "e.g. 2, exp:2, uniform:1:3 or normal:2:0.5"


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """A think-time distribution in seconds (see the module docstring).

    Attributes:
        kind: ``fixed``, ``exp``, ``uniform`` or ``normal``.
        a: the fixed value, the mean, or the lower bound.
        b: the upper bound (uniform) or the standard deviation (normal); 0 otherwise.
    """

    kind: str = "fixed"
    a: float = 0.0
    b: float = 0.0

    def draw(self, rng: random.Random) -> float:
        """One think time, seconds >= 0."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return max(0.0, rng.gauss(self.a, self.b))

    def describe(self) -> str:
        """The value as the option is written."""
        if self.kind == "fixed":
            return f"{self.a:g}"
        if self.kind == "exp":
            return f"exp:{self.a:g}"
        return f"{self.kind}:{self.a:g}:{self.b:g}"


def parse_think_time(flag: str, raw: str) -> ThinkTime:
    """Parse a ``--think-time`` value.

    Raises:
        ConfigError: naming the value and the accepted forms.
    """
    parts = raw.strip().split(":")
    kind = "fixed" if len(parts) == 1 else parts[0].strip().lower()
    numbers = parts if kind == "fixed" else parts[1:]
    try:
        values = [float(p) for p in numbers]
    except ValueError:
        values = []
    arity = {"fixed": 1, "exp": 1, "uniform": 2, "normal": 2}
    if (
        kind not in _KINDS
        or len(values) != arity[kind]
        or not all(math.isfinite(v) and v >= 0 for v in values)
        or (kind == "uniform" and values[0] > values[1])
    ):
        raise ConfigError(f"{flag} must be seconds >= 0 or a distribution ({_EXAMPLES}), got {raw!r}")
    return ThinkTime(kind, values[0], values[1] if len(values) > 1 else 0.0)
