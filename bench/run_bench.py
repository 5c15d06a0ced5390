"""`make bench`: llmload beside a plain Locust locustfile, both against `llmload sim` (figures, not a test).

    python bench/run_bench.py [A B C D ...] [--requests-scale F] [--markdown] [--repo PATH] [--sim-repo PATH] [--wire]
                              [--prompt-tokens N] [--server-cmd CMD] [--rounds N]

Scenarios (max_tokens 128, ignore_eos, the same ≈ 100-token prompt, sim ``--max-num-seqs 1024``):

    A  steady      256 users, 2,000 requests, sim TTFT ≈ 50 ms, ITL 10 ms
    B  saturating  1,024 users, 2,000 requests, sim TTFT ≈ 0, ITL 1 ms
                   (+ a memory row: llmload with ``--tokenizer`` on a tiny local tokenizer.json)
    C  seed burst  300 requests, ``-u 1024 -r 1024``, one process, sim TTFT ≈ 50 ms, ITL 10 ms
    D  burst × 2   C with ``--processes 2`` for both clients, nothing pinned

In A–C the simulator runs on core 1 and the client on core 0 (``taskset``).
The clients run one after another, never together, each against a fresh
simulator process. The plain client is ``bench/plain_locustfile.py``.

``--prompt-tokens N``: both clients send a prompt of N words instead (the
≈ 100-token prompt's words repeated; the simulator counts about 1.15 tokens
per word, its count is printed; its context is raised to fit), e.g. 28000
for ≈ 32k-token prompts: llmload reads
it from a one-line ``--dataset`` file, the plain client from
``PLAIN_PROMPT_FILE`` (too long for a command line).

``--server-cmd CMD``: serve with another program instead of ``llmload sim``
(``{port}`` in CMD becomes a free port; pinned like the simulator), e.g. a
faster stub server, to tell the client's error from a busy simulator's. Its
own TTFT/ITL flags apply; without the simulator's ``/metrics`` page
the server columns read n/a, and the wire is the only truth (use ``--wire``).

Per client run:

- CPU µs/chunk: (CPU seconds, user + sys, of the load run − those of a run
  of one request with max_tokens 1 by the same client: start-up and
  shut-down) / chunks. CPU comes from ``wait4`` on the client process. In D
  it is the whole tree: the master's ``wait4`` covers the workers it reaped
  itself; this script is a child subreaper (Linux ``prctl``), so workers the
  master left running are re-parented here and reaped with ``wait4`` too.
- chunks: text chunks streamed (the simulator sends one token per chunk):
  llmload's ``tokens.completion``, the plain client's count of text events;
  cross-checked against the simulator's ``llmload_sim_completion_tokens_total``
  delta (which also counts llmload's two-token preflight probe).
- chunks/s: chunks / load-phase wall seconds (first request sent → last
  request ended, as each client reports it).
- peak RSS: ``ru_maxrss`` of the client process; in D the sum over master and
  workers of each process's peak (``VmHWM``, sampled every 0.5 s; pages the
  forked workers share copy-on-write count once per process).
- TTFT mean client / server, mean error: client mean − the simulator's mean
  (its histogram sum / count, delta over the load run), exact.
- TTFT p99 error: client p99 − server p99, the server's from 1 ms buckets
  (upper bucket edge): distribution quantiles, not per-request pairs.
  llmload's p99 is its own histogram's estimate, the plain client's the
  nearest rank. The plain client's TTFT includes each user's connection
  set-up on its first request; llmload's starts once the connection is ready
  (it reports set-up as ``client.connect_s``). The simulator's clock starts
  when the request's bytes reached its kernel.
- read lag p99: llmload's ``client.read_lag_s.p99`` when its results carry it.

``--rounds N``: run each scenario's clients N times, the order swapped every
round (llmload first, then plain first, ...), and print each round's CPU ratio
(llmload / plain, both of that round) with their median and range. On a shared
machine one client's run can be slowed by a neighbour while the other's is
not: plain Locust's own CPU per chunk has varied by a fifth between runs
minutes apart, so one round's ratio is one draw, and the median of several is
the figure to compare.

``--wire`` (root and ``tcpdump``): every load run is also captured on
loopback (``llmload.capture``, tcpdump pinned to the simulator's core), and a
second table compares each client with the wire: client − wire TTFT as
distributions (mean, p99) for both clients; for llmload, per request too
(its ``--requests-log`` paired with the capture by send order): client − wire
mean / p99 / max, requests more than 10 ms off, how many of those the run's
read lag flagged (``client.lagged_requests``, ``client_saturated``), and
first-token lateness (the client's arrival time − the wire's). The plain
client's lateness is not paired (its timer starts before it connects, so its
sends cannot be matched to the wire's).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import resource
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil
from benchlib import REPO, pin, private_master_port, start_sim
from prometheus_client.parser import text_string_to_metric_families

from llmload.capture import Capture, capture_available, pair_requests, wire_requests

PLAIN_LOCUSTFILE = Path(__file__).resolve().parent / "plain_locustfile.py"
MAX_TOKENS = 128
PROMPT = (
    "You are a careful technical writer. Summarise, in plain words and short sentences, how a lighthouse "
    "keeper on a remote island spends one winter week: the daily checks of the lamp and the lens, the log "
    "book entries, the weather reports sent to the mainland by radio, the supply boat that comes when the "
    "sea allows, the repairs after a storm, and the long evenings spent reading by the stove."
)  # ≈ 100 tokens, sent by both clients
TTFT = "llmload_sim_time_to_first_token_seconds"
SIM_TOKENS = "llmload_sim_completion_tokens_total"
SIM_PROMPT_TOKENS = "llmload_sim_prompt_tokens_total"
RUN_TIMEOUT_S = 900.0  # locust's own -t is 600 s
BASE_TIMEOUT_S = 180.0
SAMPLE_S = 0.5

_NO_PREFILL = ("--decode-ms-per-seq", "0", "--prefill-base-ms", "0", "--prefill-ms-per-token", "0")
SIM_TTFT_50 = ("--max-num-seqs", "1024", "--queue-delay-ms", "40", "--decode-step-ms", "10", *_NO_PREFILL)
# ITL 1 ms for 1,024 streams is ~1M tokens/s, more than one simulator core writes chunk by chunk:
# late steps are made up (tokens written together), so the client, not the simulator, is what saturates.
SIM_FAST = (
    "--max-num-seqs", "1024", "--queue-delay-ms", "0", "--decode-step-ms", "1", "--max-catch-up-steps", "64",
    *_NO_PREFILL,
)  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    """One load shape: users, requests and simulator timing; ``pinned`` puts sim/client on cores 1/0."""

    key: str
    title: str
    users: int
    requests: int
    sim_args: tuple[str, ...]
    processes: int = 1
    pinned: bool = True


SCENARIOS = {
    "A": Scenario("A", "A steady, 256 users, ITL 10 ms", 256, 2000, SIM_TTFT_50),
    "B": Scenario("B", "B saturating, 1,024 users, ITL 1 ms", 1024, 2000, SIM_FAST),
    "C": Scenario("C", "C seed burst, 1,024 users", 1024, 300, SIM_TTFT_50),
    "D": Scenario("D", "D burst, 2 processes, unpinned", 1024, 300, SIM_TTFT_50, processes=2, pinned=False),
}


@dataclass(frozen=True)
class Usage:
    """Resources of one client run: CPU seconds (user + sys) and peak RSS in MiB."""

    cpu_s: float
    peak_rss_mib: float


@dataclass(frozen=True)
class ClientResult:
    """What a client reported: counts, load-phase wall seconds, TTFT and read lag in seconds."""

    requests: int
    failures: int
    chunks: int
    wall_s: float
    ttft_mean_s: float | None
    ttft_p99_s: float | None
    read_lag_p99_s: float | None
    lagged_requests: int | None = None
    client_saturated: bool | None = None


@dataclass(frozen=True)
class WireFigures:
    """A client run against the capture (s): wire TTFT distribution, and llmload's per-request pairs."""

    wire_ttft_mean_s: float | None
    wire_ttft_p99_s: float | None
    paired: int = 0
    error_mean_s: float | None = None
    error_p99_s: float | None = None
    error_max_s: float | None = None
    off_10ms: int = 0
    uncovered: int = 0
    late_mean_s: float | None = None
    late_p99_s: float | None = None


@dataclass(frozen=True)
class Row:
    """One line of the table: a scenario × client run and its derived figures."""

    scenario: str
    client: str
    usage: Usage
    base_cpu_s: float
    result: ClientResult
    sim_chunks: float
    server_ttft_mean_s: float | None
    server_ttft_p99_s: float | None
    wire: WireFigures | None = None
    round: int = 1  # which round of --rounds

    @property
    def label(self) -> str:
        """The client's name in the tables, with the round after the first (``--rounds``)."""
        return self.client if self.round == 1 else f"{self.client} #{self.round}"

    @property
    def cpu_us_per_chunk(self) -> float | None:
        """Client CPU µs per chunk, start-up and shut-down excluded."""
        if not self.result.chunks:
            return None
        return (self.usage.cpu_s - self.base_cpu_s) / self.result.chunks * 1e6


# ── measurement ──────────────────────────────────────────────────────────────
def scrape(url: str) -> dict[str, float]:
    """Return {sample name: value summed over labels}, and {"<name>@le": cumulative count} for buckets.

    A server without a Prometheus page (``--server-cmd``) gives ``{}``: its server columns read n/a.
    """
    out: dict[str, float] = {}
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = sample.name
                if "le" in sample.labels:
                    key = f"{sample.name}@{sample.labels['le']}"
                out[key] = out.get(key, 0.0) + sample.value
    except (OSError, ValueError):
        return {}
    return out


def _server_quantile(metrics: dict[str, float], name: str, q: float) -> float | None:
    """Upper edge (s) of the first bucket whose cumulative count reaches q (1 ms resolution below 100 ms)."""
    total = metrics.get(f"{name}_count", 0.0)
    edges = sorted(
        (float(key.split("@", 1)[1]), value) for key, value in metrics.items() if key.startswith(f"{name}_bucket@")
    )
    for edge, cumulative in edges:
        if total and cumulative >= q * total:
            return edge
    return None


def start_server_cmd(command: str, *, core: int | None, stderr: IO[str]) -> tuple[str, subprocess.Popen[str]]:
    """Start ``command`` (a shell command whose ``{port}`` is replaced by a free loopback port); wait for it.

    The server is ready when ``GET /v1/models`` answers (at most 30 s); its URL is
    ``http://127.0.0.1:PORT``. Raises SystemExit when it exits or never answers.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [*(pin(core) if core is not None else []), *shlex.split(command.replace("{port}", str(port)))]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"--server-cmd exited with {proc.returncode} before answering: {command}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return url, proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"--server-cmd did not answer GET {url}/v1/models within 30 s: {command}")


def become_subreaper() -> bool:
    """Make orphaned descendants (Locust workers outliving their master) re-parent to this process (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _vm_hwm_kib(pid: int) -> int | None:
    """Peak resident set size (KiB) of a live process, from /proc/PID/status."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def _sample_tree(root: int, hwm: dict[int, int]) -> None:
    """Record the peak RSS (KiB) so far of ``root`` and every descendant into ``hwm``."""
    try:
        pids = [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]
    except psutil.Error:
        return
    for pid in pids:
        kib = _vm_hwm_kib(pid)
        if kib is not None:
            hwm[pid] = max(hwm.get(pid, 0), kib)


def _reap(pid: int, deadline: float) -> resource.struct_rusage | None:
    """``wait4`` a re-parented worker until ``deadline`` (killing it then); None if another process reaped it."""
    while True:
        try:
            done, _status, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return usage
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = math.inf
        time.sleep(0.05)


def run_measured(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float, log: Path) -> Usage:
    """Run one client process (tree) to its end within ``timeout_s``; return its CPU and peak RSS."""
    with log.open("w") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    hwm: dict[int, int] = {}
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"client timed out after {timeout_s:.0f} s: {' '.join(argv)}; log {log}")
            _sample_tree(proc.pid, hwm)
            time.sleep(SAMPLE_S if len(hwm) > 1 else 0.05)
        cpu_s = usage.ru_utime + usage.ru_stime
        rss_kib = usage.ru_maxrss
        workers = [pid for pid in hwm if pid != proc.pid]
        for worker in workers:
            reaped = _reap(worker, time.monotonic() + 30)
            if reaped is not None:
                cpu_s += reaped.ru_utime + reaped.ru_stime
        if workers:
            rss_kib = sum(hwm.values())
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            os.waitpid(proc.pid, 0)
            proc.returncode = -signal.SIGKILL
    if proc.returncode != 0:
        tail = log.read_text()[-2000:]
        raise SystemExit(f"client exited {proc.returncode}: {' '.join(argv)}\n{tail}")
    return Usage(cpu_s=cpu_s, peak_rss_mib=rss_kib / 1024)


# ── the two clients ──────────────────────────────────────────────────────────
def client_command(
    client: str,
    sc: Scenario,
    url: str,
    *,
    users: int,
    requests: int,
    max_tokens: int,
    out: Path,
    extra: tuple[str, ...],
    prompt_file: Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """argv and environment for one run of ``client`` ("llmload" or "plain"); ``prompt_file``: a long prompt."""
    argv = [*(pin(0) if sc.pinned else []), sys.executable, "-m", "locust", "--headless", "--only-summary"]
    argv += ["-H", url, "-u", str(users), "-r", str(users), "-t", "600s", "--loglevel", "WARNING"]
    if sc.processes > 1:
        argv += ["--processes", str(sc.processes), *private_master_port()]
    env = dict(os.environ)
    if client == "plain":
        argv += ["-f", str(PLAIN_LOCUSTFILE)]
        env |= {
            "PLAIN_NUM_REQUESTS": str(requests),
            "PLAIN_MAX_TOKENS": str(max_tokens),
            "PLAIN_OUT": str(out),
            "PLAIN_PROMPT": PROMPT,
        }
        if prompt_file is not None:
            env["PLAIN_PROMPT_FILE"] = str(prompt_file)
        return argv, env
    argv += ["-f", "locustfiles/completions.py", "--num-requests", str(requests), "--ignore-eos"]
    if prompt_file is None:
        argv += ["--prompt", PROMPT]
    else:
        dataset = prompt_file.with_suffix(".jsonl")
        dataset.write_text(json.dumps({"prompt": prompt_file.read_text()}) + "\n")
        argv += ["--dataset", str(dataset)]
    argv += ["--max-tokens", str(max_tokens), "--results-json", str(out), "--prometheus-port", "0"]
    return [*argv, *extra], env


def read_result(client: str, out: Path) -> ClientResult:
    """Parse the results file of a finished run (llmload's results JSON or the plain locustfile's)."""
    data: dict[str, Any] = json.loads(out.read_text())
    if client == "plain":
        ttfts = sorted(data["ttft_s"])
        first, last = data["first_send_unix"], data["last_end_unix"]
        return ClientResult(
            requests=data["requests"],
            failures=data["failures"],
            chunks=data["chunks"],
            wall_s=(last - first) if first is not None and last is not None else math.nan,
            ttft_mean_s=sum(ttfts) / len(ttfts) if ttfts else None,
            ttft_p99_s=ttfts[math.ceil(0.99 * len(ttfts)) - 1] if ttfts else None,  # nearest rank
            read_lag_p99_s=None,
        )
    ttft = data["latency"]["ttft_s"] or {}
    lag = ((data.get("client") or {}).get("read_lag_s") or {}).get("p99")
    return ClientResult(
        requests=data["requests"]["total"],
        failures=data["requests"]["failed"],
        chunks=data["tokens"]["completion"] or 0,
        wall_s=data["duration_s"] or math.nan,
        ttft_mean_s=ttft.get("mean"),
        ttft_p99_s=ttft.get("p99"),
        read_lag_p99_s=lag,
        lagged_requests=(data.get("client") or {}).get("lagged_requests"),
        client_saturated=data.get("client_saturated"),
    )


def _nearest_rank(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None


def wire_figures(pcap: Path, port: int, requests_log: Path | None) -> WireFigures:
    """The capture's TTFTs and, with a requests log, llmload's per-request pairs against them."""
    ttfts = [t for w in wire_requests(pcap, port) if (t := w.ttft_s) is not None]
    base = WireFigures(
        wire_ttft_mean_s=sum(ttfts) / len(ttfts) if ttfts else None, wire_ttft_p99_s=_nearest_rank(ttfts, 0.99)
    )
    logs = sorted(requests_log.parent.glob(f"{requests_log.stem}*{requests_log.suffix}")) if requests_log else []
    if not logs:  # with --processes each worker writes its own, .w<index> before the extension
        return base
    pairs = pair_requests(pcap, port, logs)
    for note in pairs.notes:
        print(f"    wire: {note}", flush=True)
    errors = pairs.errors_s
    if not errors:
        return base
    return WireFigures(
        wire_ttft_mean_s=base.wire_ttft_mean_s,
        wire_ttft_p99_s=base.wire_ttft_p99_s,
        paired=len(errors),
        error_mean_s=sum(errors) / len(errors),
        error_p99_s=_nearest_rank(errors, 0.99),
        error_max_s=max(errors),
        off_10ms=sum(abs(e) > 0.010 for e in errors),
        # off by more than 1 ms beyond the request's own read lag: an error the lag did not bound
        uncovered=sum(abs(e) > (lag or 0.0) + 0.001 for e, lag in zip(errors, pairs.lag_s, strict=True)),
        late_mean_s=sum(pairs.late_s) / len(pairs.late_s),
        late_p99_s=_nearest_rank(pairs.late_s, 0.99),
    )


class Bench:
    """Runs scenarios for both clients; remembers each client's start-up/shut-down CPU."""

    def __init__(
        self,
        repo: Path,
        tmp: Path,
        scale: float,
        sim_repo: Path | None = None,
        *,
        wire: bool = False,
        prompt_file: Path | None = None,
        sim_extra: tuple[str, ...] = (),
        server_cmd: str | None = None,
    ) -> None:
        self.repo, self.tmp, self.scale, self.wire, self.prompt_file = repo, tmp, scale, wire, prompt_file
        self.sim_extra, self.server_cmd = sim_extra, server_cmd
        self.sim_repo = sim_repo or repo
        self.base_cpu: dict[tuple[str, int, bool, tuple[str, ...]], float] = {}

    def run(self, sc: Scenario, client: str, label: str, extra: tuple[str, ...] = (), round_: int = 1) -> Row:
        """One client run against a fresh simulator: base run (once per client shape), then the load run."""
        requests = max(sc.processes, round(sc.requests * self.scale))
        stem = self.tmp / f"{sc.key}-{label}-{round_}".replace(" ", "_")
        with Path(f"{stem}-sim.log").open("w") as sim_log:
            core = 1 if sc.pinned else None
            if self.server_cmd is not None:
                url, sim = start_server_cmd(self.server_cmd, core=core, stderr=sim_log)
            else:
                url, sim = start_sim(*sc.sim_args, *self.sim_extra, core=core, cwd=self.sim_repo, stderr=sim_log)
        try:
            key = (client, sc.processes, sc.pinned, extra)
            if key not in self.base_cpu:
                base_out = Path(f"{stem}-base.json")
                argv, env = client_command(
                    client,
                    sc,
                    url,
                    users=sc.processes,
                    requests=sc.processes,
                    max_tokens=1,
                    out=base_out,
                    extra=extra,
                    prompt_file=self.prompt_file,
                )
                base = run_measured(
                    argv, cwd=self.repo, env=env, timeout_s=BASE_TIMEOUT_S, log=Path(f"{stem}-base.log")
                )
                self.base_cpu[key] = base.cpu_s
            out = Path(f"{stem}.json")
            argv, env = client_command(
                client,
                sc,
                url,
                users=sc.users,
                requests=requests,
                max_tokens=MAX_TOKENS,
                out=out,
                extra=extra,
                prompt_file=self.prompt_file,
            )
            requests_log = Path(f"{stem}-requests.jsonl")
            if self.wire and client == "llmload":
                argv += ["--requests-log", str(requests_log)]
            port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
            capture = Capture(Path(f"{stem}.pcap"), port, prefix=tuple(pin(1))) if self.wire else None
            before = scrape(url)
            if capture is not None:
                capture.start()
            try:
                usage = run_measured(argv, cwd=self.repo, env=env, timeout_s=RUN_TIMEOUT_S, log=Path(f"{stem}.log"))
            finally:
                if capture is not None:
                    capture.stop()
            after = scrape(url)
            wire = None
            if capture is not None:
                wire = wire_figures(capture.path, port, requests_log if client == "llmload" else None)
        finally:
            sim.terminate()
            try:
                sim.wait(15)
            except subprocess.TimeoutExpired:
                sim.kill()
                sim.wait(5)
            if "failed" in (sim_errors := Path(f"{stem}-sim.log").read_text()):
                print(f"  simulator: {sim_errors.strip()}", file=sys.stderr)
        delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
        count = delta.get(f"{TTFT}_count", 0.0)
        if self.prompt_file is not None and count:
            print(f"  prompt: {delta.get(SIM_PROMPT_TOKENS, 0.0) / count:,.0f} tokens per request (simulator)")
        row = Row(
            scenario=sc.key,
            client=label,
            usage=usage,
            base_cpu_s=self.base_cpu[key],
            result=read_result(client, out),
            sim_chunks=delta.get(SIM_TOKENS, math.nan),
            server_ttft_mean_s=delta[f"{TTFT}_sum"] / count if count else None,
            server_ttft_p99_s=_server_quantile(delta, TTFT, 0.99),
            wire=wire,
            round=round_,
        )
        r = row.result
        which = f"{label} (round {round_})" if round_ > 1 else label
        print(
            f"  {sc.key} {which}: {r.requests} requests ({r.failures} failed), chunks {r.chunks} (sim Δ"
            f" {row.sim_chunks:.0f}), CPU {usage.cpu_s:.2f} s − base {row.base_cpu_s:.2f} s, load wall"
            f" {r.wall_s:.1f} s",
            flush=True,
        )
        return row


def long_prompt(words: int) -> str:
    """``words`` words: those of ``PROMPT`` repeated (the simulator counts about one token per word)."""
    base = PROMPT.split()
    return " ".join(base[i % len(base)] for i in range(words))


def tiny_tokenizer_json(directory: Path) -> Path | None:
    """Train the tests' tiny BPE tokenizer (offline, ``tokenizers``) and save it as ``tokenizer.json``."""
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        return None
    sentences = ["Hello world", "the quick brown fox jumps over the lazy dog", "a world of tokens and words"] * 20
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        sentences, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False)
    )
    path = directory / "tokenizer.json"
    tokenizer.save(str(path))
    return path


# ── output ───────────────────────────────────────────────────────────────────
HEADERS = [
    "scenario",
    "client",
    "CPU µs/chunk",
    "chunks/s",
    "peak RSS MiB",
    "TTFT mean client / server ms",
    "TTFT mean error ms",
    "TTFT p99 error ms",
    "read lag p99 ms",
]


def _ms(value: float | None, fmt: str = ".2f") -> str:
    return "n/a" if value is None else f"{value * 1e3:{fmt}}"


def _diff_ms(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{(a - b) * 1e3:+.2f}"


def table_cells(row: Row) -> list[str]:
    """The table's cells for one run."""
    r = row.result
    cpu = row.cpu_us_per_chunk
    return [
        SCENARIOS[row.scenario].title,
        row.label,
        "n/a" if cpu is None else f"{cpu:.2f}",
        f"{r.chunks / r.wall_s:,.0f}" if r.wall_s > 0 else "n/a",
        f"{row.usage.peak_rss_mib:.0f}",
        f"{_ms(r.ttft_mean_s)} / {_ms(row.server_ttft_mean_s)}",
        _diff_ms(r.ttft_mean_s, row.server_ttft_mean_s),
        _diff_ms(r.ttft_p99_s, row.server_ttft_p99_s),
        _ms(r.read_lag_p99_s),
    ]


WIRE_HEADERS = [
    "scenario",
    "client",
    "TTFT mean / p99 client ms",
    "wire ms",
    "client − wire mean / p99 ms",
    "paired client − wire mean / p99 / max ms",
    "> 10 ms off",
    "off > own lag + 1 ms",
    "lagged / flagged",
    "first token late mean / p99 ms",
]


def wire_cells(row: Row) -> list[str]:
    """The wire table's cells for one run."""
    r, w = row.result, row.wire
    assert w is not None
    paired = (
        f"{_diff_ms(w.error_mean_s, 0.0)} / {_diff_ms(w.error_p99_s, 0.0)} / {_diff_ms(w.error_max_s, 0.0)}"
        f" ({w.paired})"
        if w.paired
        else "n/a"
    )
    flagged = "n/a" if r.client_saturated is None else f"{r.lagged_requests} / {'yes' if r.client_saturated else 'no'}"
    return [
        SCENARIOS[row.scenario].title,
        row.label,
        f"{_ms(r.ttft_mean_s)} / {_ms(r.ttft_p99_s)}",
        f"{_ms(w.wire_ttft_mean_s)} / {_ms(w.wire_ttft_p99_s)}",
        f"{_diff_ms(r.ttft_mean_s, w.wire_ttft_mean_s)} / {_diff_ms(r.ttft_p99_s, w.wire_ttft_p99_s)}",
        paired,
        str(w.off_10ms) if w.paired else "n/a",
        str(w.uncovered) if w.paired else "n/a",
        flagged,
        f"{_diff_ms(w.late_mean_s, 0.0)} / {_diff_ms(w.late_p99_s, 0.0)}" if w.paired else "n/a",
    ]


def render(rows: list[list[str]], markdown: bool, headers: list[str] = HEADERS) -> str:
    """A markdown table, or the same columns padded to line up in a terminal."""
    if markdown:
        lines = [
            "| " + " | ".join(headers) + " |",
            "|" + "|".join(["---", "---"] + ["---:"] * (len(headers) - 2)) + "|",
        ]
        return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])
    widths = [max(len(cells[i]) for cells in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        for cells in [headers, *rows]
    )


def ratio_lines(rows: list[Row], keys: list[str]) -> list[str]:
    """Per scenario and llmload row: CPU per chunk and peak RSS over plain Locust's of the same round.

    One round: its two ratios. Several: each round's CPU ratio, their median
    and range, and the median RSS ratio.
    """
    by = {(row.scenario, row.client, row.round): row for row in rows}
    rounds = max((row.round for row in rows), default=1)
    lines: list[str] = []
    for key in keys:
        for label in ("llmload", "llmload --tokenizer"):
            cpu: list[float] = []
            rss: list[float] = []
            for round_ in range(1, rounds + 1):
                mine, plain = by.get((key, label, round_)), by.get((key, "plain Locust", round_))
                if mine and plain and mine.cpu_us_per_chunk and plain.cpu_us_per_chunk:
                    cpu.append(mine.cpu_us_per_chunk / plain.cpu_us_per_chunk)
                    rss.append(mine.usage.peak_rss_mib / plain.usage.peak_rss_mib)
            if not cpu:
                continue
            if len(cpu) == 1:
                lines.append(f"{key}: {label} / plain: CPU per chunk {cpu[0]:.2f}x, peak RSS {rss[0]:.2f}x")
                continue
            each = " ".join(f"{ratio:.2f}" for ratio in cpu)
            lines.append(
                f"{key}: {label} / plain, {len(cpu)} rounds: CPU per chunk median {statistics.median(cpu):.2f}x"
                f" ({min(cpu):.2f}-{max(cpu):.2f}x; by round {each}), peak RSS median {statistics.median(rss):.2f}x"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"any of {' '.join(SCENARIOS)}; default: all")
    parser.add_argument("--requests-scale", type=float, default=1.0, help="multiply request counts (0.1: smoke run)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--repo", type=Path, default=REPO, help="llmload checkout to measure (run with its venv)")
    parser.add_argument(
        "--sim-repo",
        type=Path,
        default=None,
        help="checkout whose simulator serves (default: --repo), e.g. to "
        "measure an older client against this simulator's ground truth",
    )
    parser.add_argument(
        "--tokenizer-rows",
        action="store_true",
        help="add the llmload --tokenizer row to every scenario (B always has it)",
    )
    parser.add_argument(
        "--wire",
        action="store_true",
        help="also capture each load run on loopback (tcpdump, as root) and compare both clients with the wire",
    )
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=None,
        metavar="N",
        help="send a prompt of N words (about N tokens) instead of the ≈ 100-token one, e.g. 32000",
    )
    parser.add_argument(
        "--server-cmd",
        default=None,
        metavar="CMD",
        help="serve with this shell command instead of llmload sim; {port} is replaced by a free port, e.g."
        " 'python stub.py --port {port} --ttft-ms 50 --itl-ms 10' (its own TTFT/ITL apply; the server"
        " columns read n/a without a llmload sim /metrics page)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="run each scenario's clients N times, the order swapped every round, and print the median CPU ratio",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.server_cmd is not None and "{port}" not in args.server_cmd:
        parser.error(f"--server-cmd must contain {{port}} (the free port it is to listen on), got {args.server_cmd!r}")
    if args.prompt_tokens is not None and args.prompt_tokens < 1:
        parser.error(f"--prompt-tokens must be >= 1, got {args.prompt_tokens}")
    if args.wire and not capture_available():
        parser.error("--wire needs tcpdump on PATH and root (apt-get install tcpdump; run as root)")
    keys = [key.upper() for key in args.scenarios] or list(SCENARIOS)
    if unknown := [key for key in keys if key not in SCENARIOS]:
        parser.error(f"unknown scenario {' '.join(unknown)}; choose from {' '.join(SCENARIOS)}")
    repo = args.repo.resolve()
    if not become_subreaper() and "D" in keys:
        print("warning: not a child subreaper; D may miss CPU of workers that outlive the master", file=sys.stderr)
    print(f"llmload at {repo}; python {sys.executable}; requests × {args.requests_scale:g}")
    rows: list[Row] = []
    tokenizer_note = ""
    with tempfile.TemporaryDirectory(prefix="llmload-bench-") as tmp_name:
        tmp = Path(tmp_name)
        prompt_file = None
        if args.prompt_tokens is not None:
            prompt_file = tmp / "prompt.txt"
            prompt_file.write_text(long_prompt(args.prompt_tokens))
        bench = Bench(
            repo,
            tmp,
            args.requests_scale,
            args.sim_repo.resolve() if args.sim_repo else None,
            wire=args.wire,
            prompt_file=prompt_file,
            # the simulator's context (4,096 by default) must hold the prompt (~1.2 tokens per word) and the reply
            sim_extra=("--max-model-len", str(2 * args.prompt_tokens + 4096)) if args.prompt_tokens else (),
            server_cmd=args.server_cmd,
        )
        for key in keys:
            sc = SCENARIOS[key]
            print(f"{sc.title}: {max(sc.processes, round(sc.requests * args.requests_scale))} requests", flush=True)
            runs: list[tuple[str, str, tuple[str, ...]]] = [("llmload", "llmload", ()), ("plain", "plain Locust", ())]
            if key == "B" or args.tokenizer_rows:
                tokenizer = tiny_tokenizer_json(tmp)
                if tokenizer is None:
                    tokenizer_note = "B with --tokenizer skipped: the tokenizers library is not installed."
                else:
                    runs.append(("llmload", "llmload --tokenizer", ("--tokenizer", str(tokenizer))))
                    tokenizer_note = (
                        "llmload --tokenizer: a 300-token BPE tokenizer.json trained offline as in the tests;"
                        " its RSS shows the tokenizers library's cost, not that of a real vocabulary."
                    )
            for round_ in range(1, args.rounds + 1):
                for client, label, extra in runs if round_ % 2 else runs[::-1]:
                    rows.append(bench.run(sc, client, label, extra, round_))
    print()
    print(render([table_cells(row) for row in rows], args.markdown))
    print()
    if args.wire:
        print(render([wire_cells(row) for row in rows if row.wire is not None], args.markdown, WIRE_HEADERS))
        print(
            "Wire: tcpdump's stamps on lo (first POST segment → first data: segment). 'off > own lag': paired"
            " requests whose TTFT error exceeds their own read_lag_max_s + 1 ms. 'lagged / flagged': llmload's"
            " client.lagged_requests and client_saturated. First token late: the client's arrival time of the first"
            " token − the wire's, paired requests only."
        )
        print()
    for line in ratio_lines(rows, keys):
        print(line)
    if tokenizer_note:
        print(tokenizer_note)
    print(
        "Server TTFT: the simulator's histogram (delta over the load run); p99 error compares distribution"
        " quantiles (server p99 = upper edge of its 1 ms bucket), not per-request pairs. The plain client's TTFT"
        " includes each user's connection set-up on its first request; llmload's starts once the connection is"
        " ready (client.connect_s)."
    )
    if "D" in keys:
        print(
            "D: CPU of master + both workers; peak RSS = sum of each process's peak (VmHWM, sampled;"
            " shared copy-on-write pages counted per process)."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
