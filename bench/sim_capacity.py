"""Measure how many concurrent streams and chunks per second ``llmload sim`` serves on one core.

Not a test: run it by hand on an otherwise idle machine with two cores::

    python bench/sim_capacity.py --streams 256 512 1024 --duration-s 10

The simulator runs pinned to ``--sim-cpu`` (``taskset``), this script's
client to ``--client-cpu``. The client is a raw epoll loop over non-blocking
sockets: each connection sends a streaming ``/v1/completions`` request with
``ignore_eos`` and, when the reply ends, the next one on the same keep-alive
connection (closed loop). Chunks are counted client-side by the token-chunk
marker; the simulator's CPU time comes from ``/proc`` (psutil) over the same
window, so ``µs/chunk`` = simulator CPU seconds / chunks received.

The engine is configured so that it is never the limit on paper
(``--max-num-seqs`` = streams, ``--decode-ms-per-seq 0``); the decode step
sets the offered load (streams / step). When the simulator saturates its
core, steps stretch and chunks/s is the capacity.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import psutil

_MARK = b'"text":" '  # every token chunk of /v1/completions, never the finish chunk
_END = b"\n\n\r\n0\r\n\r\n"  # last SSE event, end of the HTTP chunk, chunked terminator


@dataclass
class _Conn:
    sock: socket.socket
    carry: bytes = b""
    tail: bytes = b""
    replies: int = 0


@dataclass
class Result:
    """One measured configuration."""

    streams: int
    duration_s: float
    chunks: int
    replies: int
    sim_cpu_pct: float
    client_cpu_pct: float
    steps: float

    @property
    def chunks_per_s(self) -> float:
        """Token chunks received per second."""
        return self.chunks / self.duration_s

    @property
    def us_per_chunk(self) -> float:
        """Simulator CPU microseconds per chunk."""
        return self.sim_cpu_pct / 100 * self.duration_s / max(self.chunks, 1) * 1e6


def start_sim(args: argparse.Namespace, streams: int) -> tuple[subprocess.Popen[bytes], str]:
    """Start a pinned simulator on a free port; return the process and its base URL."""
    cmd = [
        "taskset", "-c", str(args.sim_cpu), sys.executable, "-m", "llmload.sim", "--port", "0",
        "--max-num-seqs", str(streams), "--decode-step-ms", str(args.decode_step_ms),
        "--decode-ms-per-seq", "0", "--prefill-ms-per-token", "0", "--prefill-base-ms", "0",
        "--max-model-len", str(args.max_tokens + 64),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[1].strip()


def scrape_steps(base_url: str) -> float:
    """Return llmload_sim_engine_steps_total."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
        for raw in resp.read().decode().splitlines():
            if raw.startswith("llmload_sim_engine_steps_total "):
                return float(raw.split()[1])
    return float("nan")


def run_load(args: argparse.Namespace, base_url: str, streams: int, sim_pid: int) -> Result:
    """Hold ``streams`` closed-loop streams; measure over ``args.duration_s`` after a warm-up."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps(
        {
            "model": "llmload-sim",
            "prompt": "hi",
            "max_tokens": args.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    ep = select.epoll()
    conns: dict[int, _Conn] = {}
    for _ in range(streams):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        s.sendall(request)
        conns[s.fileno()] = _Conn(s)
        ep.register(s.fileno(), select.EPOLLIN)
    sim = psutil.Process(sim_pid)
    me = psutil.Process()
    t_start = time.perf_counter()
    t_measure = t_start + args.warmup_s
    t_end = t_measure + args.duration_s
    measuring = False
    chunks = replies = 0
    sim_cpu0 = me_cpu0 = steps0 = 0.0
    mark_len = len(_MARK) - 1
    while (now := time.perf_counter()) < t_end:
        if not measuring and now >= t_measure:
            measuring = True
            chunks = replies = 0
            sim_cpu0, me_cpu0 = sum(sim.cpu_times()[:2]), sum(me.cpu_times()[:2])
            steps0 = scrape_steps(base_url)
            t_measure = time.perf_counter()
        for fd, _ in ep.poll(0.5):
            c = conns[fd]
            data = c.sock.recv(262144)
            if not data:
                raise SystemExit("simulator closed a connection")
            chunks += (c.carry + data).count(_MARK)
            c.carry = data[-mark_len:]
            c.tail = (c.tail + data)[-len(_END) :]
            if c.tail == _END:
                replies += 1
                c.tail = b""
                c.sock.send(request)
    elapsed = time.perf_counter() - t_measure
    sim_cpu = sum(sim.cpu_times()[:2]) - sim_cpu0
    me_cpu = sum(me.cpu_times()[:2]) - me_cpu0
    steps = scrape_steps(base_url) - steps0
    for c in conns.values():
        c.sock.close()
    ep.close()
    return Result(streams, elapsed, chunks, replies, 100 * sim_cpu / elapsed, 100 * me_cpu / elapsed, steps)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark for each stream count and print one line per configuration."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[256, 512, 1024])
    p.add_argument("--duration-s", type=float, default=10.0)
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--decode-step-ms", type=float, default=5.0, help="offered load: streams per this step")
    p.add_argument("--sim-cpu", type=int, default=1)
    p.add_argument("--client-cpu", type=int, default=0)
    args = p.parse_args(argv)
    os.sched_setaffinity(0, {args.client_cpu})
    print(
        f"decode step {args.decode_step_ms} ms, {args.max_tokens} tokens per reply, "
        f"sim on cpu {args.sim_cpu}, client on cpu {args.client_cpu}"
    )
    print(f"{'streams':>8} {'chunks/s':>10} {'offered/s':>10} {'steps/s':>8} {'sim CPU%':>8} {'us/chunk':>8} "
          f"{'client CPU%':>11} {'replies':>8}")  # fmt: skip
    for n in args.streams:
        proc, url = start_sim(args, n)
        try:
            r = run_load(args, url, n, proc.pid)
        finally:
            proc.terminate()
            proc.wait(10)
        offered = n * 1000 / args.decode_step_ms
        print(
            f"{n:>8} {r.chunks_per_s:>10.0f} {offered:>10.0f} {r.steps / r.duration_s:>8.1f} "
            f"{r.sim_cpu_pct:>8.1f} {r.us_per_chunk:>8.1f} {r.client_cpu_pct:>11.1f} {r.replies:>8}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
