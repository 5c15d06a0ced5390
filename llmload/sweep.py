"""Sweeps: one run per concurrency or rate step, and where the deployment saturates.

``llmload sweep --sweep users=1,8,64,256 -- -f locustfiles/chat.py -H URL -t 60s``
runs Locust once per step (``-u N -r N``, or ``--request-rate R``) and writes
one results section per step. A rate sweep also needs enough users to keep
its highest rate (``rate_sweep_users``): it sets them itself, or refuses a
``-u`` that is too small; a step whose schedule still lagged is marked
``client_limited`` and left out of the knee. The *knee* is the first step after which more
load stops paying: output tok/s rises by less than ``min_gain`` (5%) over the
previous step, or TTFT p99 climbs past ``ttft_p99_limit_s``. This follows the
usual saturation reading of throughput-latency curves (e.g. vLLM's and
genai-bench's concurrency sweeps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.errors import ConfigError
from llmload.settings.config import parse_rate

__all__ = [
    "DEFAULT_MAX_E2E_S",
    "MIN_RATE_SWEEP_USERS",
    "SweepSpec",
    "find_knee",
    "parse_sweep",
    "rate_sweep_users",
    "remove_step_files",
    "step_file",
    "step_section",
    "step_text",
    "sweep_document",
    "sweep_table",
]

DEFAULT_MAX_E2E_S = 10.0
"""Longest mean request time (s) a rate sweep's users must absorb at the highest finite rate (``--max-e2e``)."""
MIN_RATE_SWEEP_USERS = 64
"""Users a rate sweep sets at least (also the concurrency of an ``inf``-only sweep)."""


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """What to vary: ``users`` (closed loop) or ``rate`` (open loop, req/s), and the steps in order."""

    kind: str
    steps: tuple[float, ...]

    def locust_args(self, step: float) -> list[str]:
        """The Locust arguments that set one step (a rate sweep's users come from ``rate_sweep_users``)."""
        if self.kind == "users":
            n = str(int(step))
            return ["-u", n, "-r", n]
        return ["--request-rate", step_text(step)]

    @property
    def max_finite_rate(self) -> float | None:
        """The highest finite step of a rate sweep; None for users sweeps or ``inf`` only."""
        finite = [step for step in self.steps if not math.isinf(step)]
        return max(finite) if self.kind == "rate" and finite else None


def rate_sweep_users(spec: SweepSpec, locust_args: Sequence[str], max_e2e_s: float = DEFAULT_MAX_E2E_S) -> list[str]:
    """The arguments that give a rate sweep enough users to keep every step's schedule.

    A user keeps one request in flight, so R req/s of requests that take T s
    need R x T users (Little's law); with fewer, the sweep measures the client
    instead of the server. Without ``-u`` in ``locust_args`` this returns
    ``-u N -r N`` with N = ceil(highest finite rate x ``max_e2e_s``), at
    least ``MIN_RATE_SWEEP_USERS`` (and ``-r N`` alone when only ``-r`` is
    missing, so every user is running within a second). Users sweeps get no
    arguments.

    Raises:
        ConfigError: ``-u`` is given and below N (the message names N), or
            ``max_e2e_s`` is not a positive number.
    """
    if spec.kind != "rate":
        return []
    if not 0 < max_e2e_s < math.inf:
        raise ConfigError(f"--max-e2e must be a positive number of seconds, got {max_e2e_s!r}; e.g. --max-e2e 10")
    top = spec.max_finite_rate
    needed = max(MIN_RATE_SWEEP_USERS, math.ceil(top * max_e2e_s) if top is not None else 0)
    given = _option_value(locust_args, ("-u", "--users"))
    extra: list[str] = []
    if given is None:
        extra += ["-u", str(needed)]
    elif not given.isdigit() or int(given) < needed:
        raise ConfigError(
            f"--sweep {spec.kind}={','.join(step_text(s) for s in spec.steps)}: -u {given} is too few users: keeping "
            f"{top or 0:g} req/s of requests that take up to {max_e2e_s:g} s (--max-e2e) needs {needed} users in "
            f"flight. Pass -u {needed} or more, omit -u (the sweep then sets -u {needed}), or lower --max-e2e "
            "if your requests are shorter"
        )
    if _option_value(locust_args, ("-r", "--spawn-rate")) is None:
        extra += ["-r", given if given is not None else str(needed)]
    return extra


def _option_value(args: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The value of the last ``-u N`` / ``-uN`` / ``--users N`` / ``--users=N`` among ``args``; None if absent."""
    value = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif name.startswith("--") and arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            elif not name.startswith("--") and arg.startswith(name) and len(arg) > len(name):
                value = arg[len(name) :]
    return value


def step_text(step: float | str) -> str:
    """A step as written in files and messages: ``64``, ``5``, ``0.5`` or ``inf``."""
    if isinstance(step, str):
        return step
    return "inf" if math.isinf(step) else f"{step:g}"


def step_file(results_json: Path, kind: str, step: float) -> Path:
    """The step's own results file beside the combined one: ``STEM.KIND-STEP.json`` (``sweep.rate-inf.json``)."""
    return results_json.with_name(f"{results_json.stem}.{kind}-{step_text(step)}.json")


def remove_step_files(results_json: Path) -> list[Path]:
    """Delete every step file an earlier sweep left beside ``results_json``; return what was deleted."""
    removed = sorted(
        path for kind in ("users", "rate") for path in results_json.parent.glob(f"{results_json.stem}.{kind}-*.json")
    )
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def step_section(step: float, results: dict[str, Any]) -> dict[str, Any]:
    """One step of the combined file: its value, whether the client limited it, then its results file's keys.

    The value is the step as given (users, or req/s), ``"inf"`` for an unlimited rate.

    ``client_limited`` is True when the step's open-loop schedule really
    lagged (``load.rate_shortfall``): its throughput is the load generator's,
    not the server's, and the knee ignores it.
    """
    load = results.get("load") or {}
    # JSON has no infinity; a users step is a whole number of users
    value: float | str = "inf" if math.isinf(step) else int(step) if step.is_integer() else step
    return {"step": value, "client_limited": bool(load.get("rate_shortfall")), **results}


def sweep_document(
    spec: SweepSpec, steps: Sequence[dict[str, Any]], *, ttft_p99_limit_s: float | None
) -> dict[str, Any]:
    """The combined sweep file: the kind, every step, and the knee over the steps the client did not limit."""
    measured = [section for section in steps if not section.get("client_limited")]
    return {
        "sweep": spec.kind,
        "steps": list(steps),
        "knee": find_knee(measured, ttft_p99_limit_s=ttft_p99_limit_s),
    }


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
            ``throughput.output_tokens_per_s`` and ``latency.ttft_s.p99``; a step with no
            output tokens (embeddings only) is read by ``throughput.inputs_per_s``.
        min_gain: relative output tok/s (inputs/s) gain below which the previous step is the knee.
        ttft_p99_limit_s: TTFT p99 (seconds) above which the previous step is the knee.
    """
    for i in range(1, len(steps)):
        before, after = steps[i - 1], steps[i]
        (tok_before, what), (tok_after, _) = _knee_rate(before), _knee_rate(after)
        ttft_p99 = after["latency"]["ttft_s"]["p99"]
        if ttft_p99_limit_s is not None and ttft_p99 is not None and ttft_p99 > ttft_p99_limit_s:
            return {
                "step": before["step"],
                "reason": (
                    f"TTFT p99 {ttft_p99:.3f} s at step {step_text(after['step'])} exceeds {ttft_p99_limit_s:g} s"
                ),
            }
        if tok_before > 0 and tok_after < tok_before * (1 + min_gain):
            return {
                "step": before["step"],
                "reason": (
                    f"{what} rose only {tok_after / tok_before - 1:+.1%} from step {step_text(before['step'])} "
                    f"to {step_text(after['step'])} (< {min_gain:.0%})"
                ),
            }
    return None


def _knee_rate(section: dict[str, Any]) -> tuple[float, str]:
    """The figure the knee follows: output tok/s, or inputs/s when nothing was generated (embeddings)."""
    thr = section["throughput"]
    if thr.get("output_tokens_per_s") is None and thr.get("inputs_per_s") is not None:
        return thr["inputs_per_s"], "inputs/s"
    return thr.get("output_tokens_per_s") or 0.0, "output tok/s"


def sweep_table(kind: str, steps: Sequence[dict[str, Any]]) -> list[str]:
    """The table printed after a sweep: one line per step, a header first.

    Every step shows its completed req/s, output tok/s, TTFT p99 and E2E p50
    (ms). A rate sweep also shows each step's target rate (``inf`` for an
    unlimited step) and the rate it achieved (``load.achieved_rate_per_s``:
    requests sent per second), so a step that did not keep its schedule is
    visible in the table, not only in its warning. Unknown figures are ``n/a``.
    """
    rate = kind == "rate"
    head = f"{'step':>8}" + (f" {'target/s':>9} {'sent/s':>9}" if rate else "")
    lines = [f"{head} {'req/s':>9} {'out tok/s':>10} {'TTFT p99 ms':>12} {'E2E p50 ms':>11}"]
    for section in steps:
        thr, lat, load = section["throughput"], section["latency"], section.get("load") or {}
        line = f"{step_text(section['step']):>8}"
        if rate:
            target = "inf" if load.get("unlimited_rate") else _cell(load.get("target_rate_per_s"), ".2f")
            line += f" {target:>9} {_cell(load.get('achieved_rate_per_s'), '.2f'):>9}"
        line += (
            f" {_cell(thr['requests_per_s'], '.2f'):>9} {_cell(thr['output_tokens_per_s'], '.1f'):>10}"
            f" {_cell(lat['ttft_s']['p99'], '.1f', 1e3):>12} {_cell(lat['e2e_s']['p50'], '.1f', 1e3):>11}"
        )
        lines.append(line + ("  (client-limited)" if section.get("client_limited") else ""))
    return lines


def _cell(value: float | None, spec: str, scale: float = 1.0) -> str:
    """A table figure, or ``n/a`` when unknown (never 0)."""
    return "n/a" if value is None else f"{value * scale:{spec}}"
