"""Sweeps: one run per concurrency or rate step, and where the deployment saturates.

``llmload sweep --sweep users=1,8,64,256 -- -f locustfiles/chat.py -H URL -t 60s``
runs Locust once per step (``-u N -r N``, or ``--request-rate R``) and writes
one results section per step. The *knee* is the first step after which more
load stops paying: output tok/s rises by less than ``min_gain`` (5%) over the
previous step, or TTFT p99 climbs past ``ttft_p99_limit_s``. This follows the
usual saturation reading of throughput-latency curves (e.g. vLLM's and
genai-bench's concurrency sweeps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmload.config import parse_rate
from llmload.errors import ConfigError

__all__ = ["SweepSpec", "find_knee", "parse_sweep"]


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """What to vary: ``users`` (closed loop) or ``rate`` (open loop, req/s), and the steps in order."""

    kind: str
    steps: tuple[float, ...]

    def locust_args(self, step: float) -> list[str]:
        """The Locust arguments that set one step."""
        if self.kind == "users":
            n = str(int(step))
            return ["-u", n, "-r", n]
        return ["--request-rate", "inf" if step == float("inf") else f"{step:g}"]


def parse_sweep(raw: str) -> SweepSpec:
    """Parse ``users=1,8,64`` or ``rate=5,10,inf``.

    Raises:
        ConfigError: unknown kind, empty list, non-positive or unordered steps.
    """
    kind, sep, values = raw.partition("=")
    kind = kind.strip()
    if not sep or kind not in ("users", "rate") or not values.strip():
        raise ConfigError(f"--sweep must look like users=1,8,64 or rate=5,10,20, got {raw!r}")
    steps: list[float] = []
    for raw_item in values.split(","):
        item = raw_item.strip()
        if kind == "users":
            if not item.isdigit() or int(item) <= 0:
                raise ConfigError(f"--sweep users= takes positive integers, got {item!r}; e.g. users=1,8,64")
            steps.append(float(int(item)))
        else:
            steps.append(parse_rate(item))
    if list(steps) != sorted(steps) or len(set(steps)) != len(steps):
        raise ConfigError(f"--sweep steps must increase, got {values!r}")
    return SweepSpec(kind, tuple(steps))


def find_knee(
    steps: Sequence[dict[str, Any]], *, min_gain: float = 0.05, ttft_p99_limit_s: float | None = None
) -> dict[str, Any] | None:
    """Return the knee step and why, or None when throughput kept rising within limits.

    Args:
        steps: results sections in sweep order, each with ``step`` and the results file keys
            ``throughput.output_tokens_per_s`` and ``latency.ttft_s.p99``.
        min_gain: relative output tok/s gain below which the previous step is the knee.
        ttft_p99_limit_s: TTFT p99 (seconds) above which the previous step is the knee.
    """
    for i in range(1, len(steps)):
        before, after = steps[i - 1], steps[i]
        tok_before = before["throughput"]["output_tokens_per_s"] or 0.0
        tok_after = after["throughput"]["output_tokens_per_s"] or 0.0
        ttft_p99 = after["latency"]["ttft_s"]["p99"]
        if ttft_p99_limit_s is not None and ttft_p99 is not None and ttft_p99 > ttft_p99_limit_s:
            return {
                "step": before["step"],
                "reason": f"TTFT p99 {ttft_p99:.3f} s at step {after['step']:g} exceeds {ttft_p99_limit_s:g} s",
            }
        if tok_before > 0 and tok_after < tok_before * (1 + min_gain):
            return {
                "step": before["step"],
                "reason": (
                    f"output tok/s rose only {tok_after / tok_before - 1:+.1%} from step {before['step']:g} "
                    f"to {after['step']:g} (< {min_gain:.0%})"
                ),
            }
    return None
