"""``llmload selfcheck``: how far this machine's client figures are from the truth, and how many streams a core holds.

The command starts ``llmload sim`` with a fixed TTFT and ITL, then runs
llmload twice against it at the user's ``--users`` and ``--processes``: a
*burst* (every user sends one request at once, the hardest moment for a
client's loop) and a *steady* load (several requests per user). Per phase it
reports:

- the client's TTFT error: client − truth, mean and P99. The truth is a
  packet capture of loopback (``llmload.capture``) when ``tcpdump`` runs with
  the rights to capture (root or ``CAP_NET_RAW``), each request paired with
  its own packets; else the simulator's TTFT histogram (request bytes'
  kernel receive stamp → first token written), compared as distributions
  (the mean exactly, the P99 to the 1 ms bucket). With a capture, the requests
  whose error exceeds their own lag (``read_lag_max_s``, or ``send_lag_s`` when larger) + 1 ms are
  counted (``uncovered_requests``): 0 means the lags bounded every error. The simulator's TTFT omits
  the loopback transit and its own write, so client − simulator is an upper
  bound of the client's error.
- the read lag (``client.read_lag_s`` P99 and max) and the requests read
  more than ``client.request_lag_limit_s`` late, and whether the run was
  flagged ``client_saturated``;
- CPU per chunk: CPU seconds of the client's processes (user + system, from
  the children's ``getrusage``) during the phase minus those of a one-request
  run of the same shape (start-up, shut-down), per streamed chunk.

From the steady phase: *streams per core* = ``STREAM_CORE_SHARE`` × ITL /
CPU per chunk, the streams one client core keeps read within the 2 ms read
lag limit (each stream costs one chunk's CPU per ITL; the share leaves room
for bursts, since the lag climbs steeply as the loop nears a full core), and
the ``--processes`` that ``--users`` need by that figure (at least one more
than the run's when the steady phase was flagged). ``steady_held`` says
whether the steady phase itself stayed within the limits.
"""

from __future__ import annotations

import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "STREAM_CORE_SHARE",
    "SelfcheckSpec",
    "format_report",
    "run_selfcheck",
    "streams_per_core",
]

STREAM_CORE_SHARE = 0.7
"""Share of one core the estimate of streams per core lets the client's loop use (the rest absorbs bursts)."""

_SIM_TTFT = "llmload_sim_time_to_first_token_seconds"
_LOCUSTFILE = Path(__file__).resolve().parent / "locustfiles" / "completions.py"
_RUN_TIMEOUT_S = 600.0
_PROMPT = "Write one short paragraph about lighthouses."
_COVER_SLACK_S = 0.001  # a pair's error may exceed its own read lag by this much (clocks read apart, the send)


@dataclass(frozen=True, slots=True)
class SelfcheckSpec:
    """What to check: the load shape and the simulator's timing.

    Attributes:
        users: simulated users (closed loop), split over ``processes``.
        processes: local Locust worker processes (1: one process, no master).
        ttft_ms: the simulator's TTFT (a fixed queue delay; no prefill cost).
        itl_ms: the simulator's decode step, one token per chunk per stream.
        max_tokens: tokens per reply (``--ignore-eos``: every reply that long).
        burst_requests: requests of the burst phase (default: one per user).
        steady_requests: requests of the steady phase.
        capture: try a packet capture (tcpdump) for the truth when possible.
    """

    users: int = 256
    processes: int = 1
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    max_tokens: int = 128
    burst_requests: int | None = None
    steady_requests: int | None = None
    capture: bool = True

    def check(self) -> None:
        """Raise ``ValueError`` naming the option and the fix when a value cannot run."""
        if self.users < 1:
            raise ValueError(f"--users must be at least 1, got {self.users}")
        if self.processes < 1 or self.processes > self.users:
            raise ValueError(f"--processes must be between 1 and --users ({self.users}), got {self.processes}")
        if not self.itl_ms > 0 or not self.ttft_ms >= 0:
            raise ValueError(f"--itl must be > 0 and --ttft >= 0 (ms), got {self.itl_ms:g} and {self.ttft_ms:g}")
        if self.max_tokens < 2:
            raise ValueError(f"--max-tokens must be at least 2 (TTFT and ITL), got {self.max_tokens}")

    @property
    def burst(self) -> int:
        """Requests of the burst phase."""
        return self.burst_requests if self.burst_requests is not None else self.users

    @property
    def steady(self) -> int:
        """Requests of the steady phase."""
        return self.steady_requests if self.steady_requests is not None else self.users * 6


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """Figures of one phase (seconds unless named otherwise; None: unknown); ``cpu_s`` includes start-up."""

    name: str
    users: int
    requests: int
    failed: int
    chunks: int
    truth: str
    client_ttft_mean_s: float | None
    client_ttft_p99_s: float | None
    truth_ttft_mean_s: float | None
    truth_ttft_p99_s: float | None
    ttft_error_mean_s: float | None
    ttft_error_p99_s: float | None
    ttft_error_max_s: float | None
    paired_requests: int | None
    uncovered_requests: int | None
    read_lag_p99_s: float | None
    read_lag_max_s: float | None
    lagged_requests: int
    client_saturated: bool
    cpu_s: float
    cpu_us_per_chunk: float | None
    notes: list[str] = field(default_factory=list)


def streams_per_core(cpu_us_per_chunk: float | None, itl_ms: float) -> int | None:
    """Streams one core keeps read in time: ``STREAM_CORE_SHARE`` x ITL / CPU per chunk; None if unknown."""
    if not cpu_us_per_chunk or cpu_us_per_chunk <= 0:
        return None
    return max(1, math.floor(STREAM_CORE_SHARE * itl_ms * 1000.0 / cpu_us_per_chunk))


# ── processes ───────────────────────────────────────────────────────────────
@contextmanager
def _simulator(spec: SelfcheckSpec, log: Path) -> Iterator[str]:
    """Run ``llmload sim`` with the spec's timing; yield its URL; stop it at the end."""
    args = [
        "--max-num-seqs", str(max(1024, spec.users)), "--queue-delay-ms", f"{spec.ttft_ms:g}",
        "--decode-step-ms", f"{spec.itl_ms:g}", "--decode-ms-per-seq", "0", "--prefill-base-ms", "0",
        "--prefill-ms-per-token", "0", "--max-catch-up-steps", "64",
    ]  # fmt: skip
    with log.open("w") as err:
        sim = subprocess.Popen(
            [sys.executable, "-m", "llmload.sim", "--port", "0", *args], stdout=subprocess.PIPE, stderr=err, text=True
        )
    try:
        assert sim.stdout is not None
        line = sim.stdout.readline().strip()
        if "http://" not in line:
            raise RuntimeError(f"the simulator did not start (said {line!r}; log {log})")
        yield line[line.index("http://") :]
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def _client_argv(spec: SelfcheckSpec, url: str, *, users: int, requests: int, max_tokens: int, out: Path) -> list[str]:
    argv = [
        sys.executable, "-m", "locust", "-f", str(_LOCUSTFILE), "--headless", "--only-summary",
        "--loglevel", "WARNING", "-H", url, "-u", str(users), "-r", str(users), "-t", f"{_RUN_TIMEOUT_S:.0f}s",
        "--num-requests", str(requests), "--max-tokens", str(max_tokens), "--ignore-eos", "--prompt", _PROMPT,
        "--results-json", str(out / "results.json"), "--requests-log", str(out / "requests.jsonl"),
        "--prometheus-port", "0",
    ]  # fmt: skip
    if spec.processes > 1:
        port = _free_port()
        argv += ["--processes", str(spec.processes), "--master-bind-host", "127.0.0.1"]
        argv += ["--master-bind-port", port, "--master-port", port]
    return argv


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_client(argv: Sequence[str], log: Path) -> float:
    """Run one client to its end; return the CPU seconds of it and the processes it waited for."""
    before = _children_cpu_s()
    with log.open("w") as err:
        code = subprocess.call(argv, stdout=subprocess.DEVNULL, stderr=err, timeout=_RUN_TIMEOUT_S + 60)
    if code not in (0, 1):  # 1: some requests failed, still measured
        tail = log.read_text(encoding="utf-8", errors="replace")[-1500:]
        raise RuntimeError(f"the client exited {code}; log {log}:\n{tail}")
    return _children_cpu_s() - before


def _scrape(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = f"{sample.name}@{sample.labels['le']}" if "le" in sample.labels else sample.name
            out[key] = out.get(key, 0.0) + sample.value
    return out


def _sim_ttft(before: dict[str, float], after: dict[str, float]) -> tuple[float | None, float | None]:
    """The simulator's TTFT mean and P99 (upper edge of its 1 ms bucket) over the phase."""
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    count = delta.get(f"{_SIM_TTFT}_count", 0.0)
    if not count:
        return None, None
    mean = delta[f"{_SIM_TTFT}_sum"] / count
    edges = sorted((float(k.split("@", 1)[1]), v) for k, v in delta.items() if k.startswith(f"{_SIM_TTFT}_bucket@"))
    p99 = next((edge for edge, cumulative in edges if cumulative >= 0.99 * count), None)
    return mean, p99


def _quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# ── phases ──────────────────────────────────────────────────────────────────
def _phase(
    spec: SelfcheckSpec, name: str, url: str, requests: int, *, base_cpu_s: float, work: Path, port: int
) -> PhaseResult:
    from llmload.capture import Capture, capture_available, pair_requests

    out = work / name
    out.mkdir()
    argv = _client_argv(spec, url, users=spec.users, requests=requests, max_tokens=spec.max_tokens, out=out)
    notes: list[str] = []
    capture = Capture(out / "capture.pcap", port) if spec.capture and capture_available() else None
    before = _scrape(url)
    if capture is not None:
        try:
            capture.start()
        except RuntimeError as exc:
            notes.append(f"{exc}: truth is the simulator's histogram")
            capture = None
    try:
        cpu_s = _run_client(argv, out / "client.log")
    finally:
        if capture is not None:
            capture.stop()
    after = _scrape(url)
    results = json.loads((out / "results.json").read_text())
    client = results.get("client") or {}
    lag = client.get("read_lag_s") or {}
    ttft = results["latency"]["ttft_s"]
    chunks = results["tokens"]["completion"] or 0
    cpu_work_s = cpu_s - base_cpu_s
    if cpu_work_s <= 0:
        notes.append(
            f"the phase's CPU ({cpu_s:.2f} s) is within the noise of the client's start-up ({base_cpu_s:.2f} s): "
            "CPU per chunk unknown; use more users or --max-tokens"
        )
    truth = "simulator"
    truth_mean, truth_p99 = _sim_ttft(before, after)
    error_mean = None if ttft["mean"] is None or truth_mean is None else ttft["mean"] - truth_mean
    error_p99 = None if ttft["p99"] is None or truth_p99 is None else ttft["p99"] - truth_p99
    error_max: float | None = None
    paired: int | None = None
    uncovered: int | None = None
    if capture is not None:
        pairs = pair_requests(capture.path, port, sorted(out.glob("requests*.jsonl")))
        if pairs.errors_s:
            truth = "capture"
            paired = len(pairs.errors_s)
            truth_mean = sum(pairs.wire_ttft_s) / paired
            truth_p99 = _quantile(pairs.wire_ttft_s, 0.99)
            error_mean = sum(pairs.errors_s) / paired
            error_p99 = _quantile(pairs.errors_s, 0.99)
            error_max = max(pairs.errors_s)
            uncovered = sum(
                abs(error) > (lag or 0.0) + _COVER_SLACK_S
                for error, lag in zip(pairs.errors_s, pairs.lag_s, strict=True)
            )
        notes.extend(pairs.notes)
    elif spec.capture and not capture_available():
        notes.append("no packet capture (tcpdump missing or no capture rights): truth is the simulator's histogram")
    return PhaseResult(
        name=name,
        users=spec.users,
        requests=results["requests"]["total"],
        failed=results["requests"]["failed"],
        chunks=chunks,
        truth=truth,
        client_ttft_mean_s=ttft["mean"],
        client_ttft_p99_s=ttft["p99"],
        truth_ttft_mean_s=truth_mean,
        truth_ttft_p99_s=truth_p99,
        ttft_error_mean_s=error_mean,
        ttft_error_p99_s=error_p99,
        ttft_error_max_s=error_max,
        paired_requests=paired,
        uncovered_requests=uncovered,
        read_lag_p99_s=lag.get("p99"),
        read_lag_max_s=lag.get("max"),
        lagged_requests=client.get("lagged_requests") or 0,
        client_saturated=bool(results.get("client_saturated")),
        cpu_s=cpu_s,
        cpu_us_per_chunk=cpu_work_s / chunks * 1e6 if chunks and cpu_work_s > 0 else None,
        notes=notes,
    )


def run_selfcheck(spec: SelfcheckSpec, work_dir: Path | None = None) -> dict[str, Any]:
    """Run the simulator, a base run, the burst and the steady phase; return the report document.

    Raises:
        ValueError: a spec value cannot run (``SelfcheckSpec.check``).
        RuntimeError: the simulator or a client run failed (the message names the log).
    """
    spec.check()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmload-selfcheck-") as tmp:
        work = work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        with _simulator(spec, work / "sim.log") as url:
            port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
            base = work / "base"
            base.mkdir()
            base_cpu_s = _run_client(
                _client_argv(spec, url, users=spec.processes, requests=spec.processes, max_tokens=2, out=base),
                base / "client.log",
            )
            phases = [
                _phase(spec, "burst", url, spec.burst, base_cpu_s=base_cpu_s, work=work, port=port),
                _phase(spec, "steady", url, spec.steady, base_cpu_s=base_cpu_s, work=work, port=port),
            ]
    steady = phases[-1]
    per_core = streams_per_core(steady.cpu_us_per_chunk, spec.itl_ms)
    held = not steady.client_saturated and steady.lagged_requests == 0
    needed = None if per_core is None else math.ceil(spec.users / per_core)
    if not held and needed is not None:
        needed = max(needed, spec.processes + 1)  # measured: this many processes did not hold these users
    return {
        "spec": asdict(spec),
        "machine": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
        "phases": [asdict(p) for p in phases],
        "streams_per_core": per_core,
        "stream_core_share": STREAM_CORE_SHARE,
        "processes_for_users": needed,
        "steady_held": held,
        "elapsed_s": time.monotonic() - started,
    }


# ── output ──────────────────────────────────────────────────────────────────
def _ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1e3:+.2f}" if signed else f"{value * 1e3:.2f}"


def format_report(report: dict[str, Any]) -> str:
    """The report as lines for a terminal."""
    spec = report["spec"]
    lines = [
        f"llmload selfcheck: {spec['users']} users, {spec['processes']} process(es), simulator TTFT "
        f"{spec['ttft_ms']:g} ms, ITL {spec['itl_ms']:g} ms, {spec['max_tokens']} tokens per reply; "
        f"{report['machine']['cpus']} CPUs, load average {report['machine']['load_average_1m']:.2f}",
    ]
    for p in report["phases"]:
        paired = f", {p['paired_requests']} requests paired" if p["paired_requests"] else ""
        lines.append(f"-- {p['name']}: {p['requests']} requests ({p['failed']} failed), truth: {p['truth']}{paired}")
        lines.append(
            f"   TTFT client {_ms(p['client_ttft_mean_s'])} / truth {_ms(p['truth_ttft_mean_s'])} ms mean; "
            f"client - truth mean {_ms(p['ttft_error_mean_s'], True)}, P99 {_ms(p['ttft_error_p99_s'], True)}"
            + (f", max {_ms(p['ttft_error_max_s'], True)}" if p["ttft_error_max_s"] is not None else "")
            + " ms"
        )
        cpu = "n/a" if p["cpu_us_per_chunk"] is None else f"{p['cpu_us_per_chunk']:.1f}"
        lines.append(
            f"   read lag P99 {_ms(p['read_lag_p99_s'])} / max {_ms(p['read_lag_max_s'])} ms; "
            f"requests maybe > 10 ms off: {p['lagged_requests']}; client_saturated: "
            f"{str(p['client_saturated']).lower()}; CPU {cpu} us/chunk"
        )
        if p.get("uncovered_requests") is not None:
            lines.append(
                f"   requests off by more than their own read lag + 1 ms: {p['uncovered_requests']} "
                f"of {p['paired_requests']} (the lag bounds the error when this is 0)"
            )
        lines.extend(f"   note: {note}" for note in p["notes"])
    per_core = report["streams_per_core"]
    if per_core is None:
        lines.append("streams per core: unknown (the steady phase gave no CPU per chunk; the burst is too short)")
    else:
        estimate = math.ceil(spec["users"] / per_core) if per_core else None
        measured = (
            f" (the estimate alone says {estimate}; {spec['processes']} did not hold them here, see below)"
            if not report["steady_held"] and estimate is not None and estimate != report["processes_for_users"]
            else ""
        )
        lines.append(
            f"streams per core at ITL {spec['itl_ms']:g} ms: about {per_core} "
            f"(≈ {report['stream_core_share']:g} x ITL / CPU per chunk); {spec['users']} users need "
            f"--processes {report['processes_for_users']} or more (one core each){measured}"
        )
    if report["steady_held"]:
        lines.append("steady phase held within the limits")
    else:
        per_process = spec["users"] / spec["processes"]
        lines.append(
            f"WARNING: the steady phase was flagged (read lag or CPU): with {per_process:g} users per process, "
            "events piled up behind late reads here and their times may be off, whatever the CPU estimate says "
            "(it assumes the client gets its cores; a busy machine does not give them; and reads that come late "
            "carry several events each, so CPU per chunk is lower than keeping up costs): use more --processes, "
            "or rerun on a quieter machine"
        )
    return "\n".join(lines)
