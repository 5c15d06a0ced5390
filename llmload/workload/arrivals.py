"""Open-loop arrival schedules: absolute send times for ``--request-rate``.

Each process follows its own schedule of *absolute* offsets from one
monotonic start, so sleeping late for one request never shifts the next ones
(relative sleeps drift below the target rate, as reported in vLLM #21104). Offsets are
cumulative sums of seeded inter-arrival gaps:

- ``constant``: every gap is 1/rate.
- ``poisson``: exponential gaps with mean 1/rate (a Poisson process).
- ``gamma``: gamma gaps with shape ``burstiness`` and mean 1/rate; shape 1 is
  Poisson, below 1 burstier, above 1 more regular (vLLM's ``--burstiness``).

``rate = inf`` makes every request eligible at offset 0.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import Enum

from llmload.errors import ConfigError

__all__ = ["Arrival", "ArrivalSchedule"]


class Arrival(Enum):
    """Inter-arrival distribution."""

    POISSON = "poisson"
    CONSTANT = "constant"
    GAMMA = "gamma"


@dataclass
class ArrivalSchedule:
    """Seeded absolute arrival offsets (seconds from the schedule start) at ``rate`` requests/s.

    Attributes:
        rate: requests per second for this process (``inf``: all at offset 0).
        arrival: the gap distribution.
        burstiness: gamma shape (only for ``GAMMA``); 1.0 = Poisson.
        seed: RNG seed; the same seed gives the same schedule.
    """

    rate: float
    arrival: Arrival = Arrival.POISSON
    burstiness: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ConfigError(f"request rate must be > 0 or inf, got {self.rate!r}")
        if not self.burstiness > 0 or math.isinf(self.burstiness):
            raise ConfigError(f"--burstiness must be a finite number > 0, got {self.burstiness!r}; pass e.g. 0.5")
        self._rng = random.Random(self.seed)
        self._offset_s = 0.0

    def next_offset_s(self) -> float:
        """Return the next arrival's offset in seconds: 0 for the first, then one gap later each."""
        if math.isinf(self.rate):
            return 0.0
        offset = self._offset_s
        self._offset_s += self._gap_s()
        return offset

    @property
    def next_due_offset_s(self) -> float:
        """Offset of the next arrival nobody has taken yet (0 for ``inf``)."""
        return 0.0 if math.isinf(self.rate) else self._offset_s

    def _gap_s(self) -> float:
        mean = 1.0 / self.rate
        if self.arrival is Arrival.CONSTANT:
            return mean
        if self.arrival is Arrival.POISSON:
            return self._rng.expovariate(self.rate)
        return self._rng.gammavariate(self.burstiness, mean / self.burstiness)
