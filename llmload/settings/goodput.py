"""Service-level objectives (``--slo``) and the per-request goodput test.

Goodput follows vLLM ``benchmark_serving --goodput`` and DistServe: the rate
of requests that met *every* objective. Here objectives are in seconds
(``--slo ttft=0.5,tpot=0.05,e2e=10``) and apply per request:

- ``ttft``: time to first token (``RequestRecord.ttft_s``) <= limit;
- ``tpot``: time per output token after the first (``RequestRecord.tpot_s``) <= limit;
- ``e2e``: send to end of reply (``RequestRecord.e2e_s``) <= limit.

A failed request never meets an objective. A successful request whose metric
is undefined (TPOT of a one-token reply) cannot violate that objective and
counts as meeting it; vLLM counts its TPOT as 0 for the same reason.

This module imports only ``llmload.errors`` so that ``llmload.settings.config`` can
parse ``--slo`` into an ``SLO`` value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from llmload.errors import ConfigError

__all__ = ["SLO", "SLO_METRICS", "MeasuredRequest", "parse_slo"]

SLO_METRICS = ("ttft", "tpot", "e2e")
"""Objective names accepted by ``--slo``, in report order."""

_EXAMPLE = "--slo ttft=0.5,tpot=0.05,e2e=10"


class MeasuredRequest(Protocol):
    """What an SLO check reads from a request (``llmload.request.record.RequestRecord`` has it)."""

    @property
    def ok(self) -> bool:
        """True when the request succeeded."""
        ...

    @property
    def ttft_s(self) -> float | None:
        """Seconds from send to the first token; None if unknown."""
        ...

    @property
    def tpot_s(self) -> float | None:
        """Seconds per output token after the first; None if undefined."""
        ...

    @property
    def e2e_s(self) -> float | None:
        """Seconds from send to the end of the reply; None if it never completed."""
        ...


@dataclass(frozen=True, slots=True)
class SLO:
    """Per-request latency limits in seconds; None = no objective on that metric.

    At least one limit is set (``parse_slo`` guarantees it).
    """

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met_by(self, request: MeasuredRequest) -> bool:
        """Return True when ``request`` succeeded and met every objective.

        An undefined metric of a successful request (None) does not violate
        its objective.
        """
        if not request.ok:
            return False
        for limit, value in (
            (self.ttft_s, request.ttft_s),
            (self.tpot_s, request.tpot_s),
            (self.e2e_s, request.e2e_s),
        ):
            if limit is not None and value is not None and value > limit:
                return False
        return True

    def as_dict(self) -> dict[str, float]:
        """The objectives that are set, keyed by metric name with an ``_s`` suffix (for results)."""
        pairs = (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s), ("e2e_s", self.e2e_s))
        return {name: limit for name, limit in pairs if limit is not None}


def parse_slo(raw: str) -> SLO:
    """Parse ``ttft=0.5,tpot=0.05,e2e=10`` (seconds; any subset, each name once).

    Raises:
        ConfigError: an unknown name, a repeated name, a value that is not a
            positive finite number, or no objective at all; the message names
            the part and gives an accepted example.
    """
    limits: dict[str, float] = {}
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if not parts:
        raise ConfigError(f"--slo needs at least one objective, got {raw!r}; pass e.g. {_EXAMPLE}")
    for part in parts:
        name, sep, value_text = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in SLO_METRICS:
            raise ConfigError(
                f"--slo part {part!r} is not NAME=SECONDS with NAME one of {', '.join(SLO_METRICS)}; "
                f"pass e.g. {_EXAMPLE}"
            )
        if name in limits:
            raise ConfigError(f"--slo sets {name} twice in {raw!r}; give each objective once")
        try:
            value = float(value_text)
        except ValueError:
            value = math.nan
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(
                f"--slo {name} must be a positive number of seconds, got {value_text.strip()!r}; pass e.g. {_EXAMPLE}"
            )
        limits[name] = value
    return SLO(ttft_s=limits.get("ttft"), tpot_s=limits.get("tpot"), e2e_s=limits.get("e2e"))
