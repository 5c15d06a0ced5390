"""The ``llmload`` command: ``sim`` (simulated server), ``demo`` (the main job end to end).

Load itself is run by Locust: ``locust -f locustfiles/chat.py ...`` (see README);
this module only starts processes and builds their argument lists.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["main"]

_REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    """Run the ``llmload`` command line; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sim":
        from llmload import sim

        return sim.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="llmload",
        description="LLM load generator on Locust. Load runs: locust -f locustfiles/chat.py -H URL ...",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sim", help="start the simulated OpenAI-compatible server (llmload sim --help)")
    demo = sub.add_parser("demo", help="start llmload sim and run the main job against it")
    demo.add_argument("--chat-users", type=int, default=256, help="ChatUser users (default 256)")
    demo.add_argument("--chat-run-time", default="30s", help="ChatUser run time (default 30s)")
    demo.add_argument(
        "--completion-users", type=int, default=1024, help="CompletionUser users (default 1024)"
    )
    demo.add_argument("--num-requests", type=int, default=300, help="CompletionUser requests (default 300)")
    demo.add_argument("--processes", type=int, default=2, help="local Locust worker processes (default 2)")
    demo.add_argument("--results-dir", default="results", help="where the results JSON files go")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _locustfile(name: str) -> str:
    path = _REPO / "locustfiles" / name
    if not path.exists():
        raise SystemExit(
            f"llmload demo: {path} not found; run the demo from a clone of the llmload repository"
        )
    return str(path)


def _demo(args: argparse.Namespace) -> int:
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    for stale in (results / "demo-chat.json", results / "demo-completions.json"):
        stale.unlink(missing_ok=True)
    sim = subprocess.Popen(
        [sys.executable, "-m", "llmload.sim", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sim.stdout is not None
        line = sim.stdout.readline().strip()
        if "http://" not in line:
            print(f"llmload demo: the simulator did not start (said {line!r})", file=sys.stderr)
            return 1
        url = line[line.index("http://") :]
        print(f"== llmload sim running at {url}", flush=True)
        codes = []
        chat_json = results / "demo-chat.json"
        print(
            f"\n== 1/2 ChatUser: {args.chat_users} users, master + {args.processes} workers,"
            f" {args.chat_run_time}",
            flush=True,
        )
        codes.append(
            _locust(
                "chat.py",
                url,
                ["-u", str(args.chat_users), "-r", str(args.chat_users), "-t", args.chat_run_time],
                args.processes,
                chat_json,
            )
        )
        comp_json = results / "demo-completions.json"
        print(
            f"\n== 2/2 CompletionUser: exactly {args.num_requests} requests at {args.completion_users} users",
            flush=True,
        )
        codes.append(
            _locust(
                "completions.py",
                url,
                [
                    "-u",
                    str(args.completion_users),
                    "-r",
                    str(args.completion_users),
                    "--num-requests",
                    str(args.num_requests),
                    "-t",
                    "300s",
                ],
                args.processes,
                comp_json,
            )
        )
        written = [path for path in (chat_json, comp_json) if path.exists() and json.loads(path.read_text())]
        for path in {chat_json, comp_json} - set(written):
            print(f"llmload demo: {path} was not written", file=sys.stderr)
            codes.append(1)
        if written:
            print(f"\n== results written to {' and '.join(map(str, written))}", flush=True)
        return max(codes)
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()


def _locust(locustfile: str, url: str, extra: list[str], processes: int, results_json: Path) -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        _locustfile(locustfile),
        "--headless",
        "--only-summary",
        "-H",
        url,
        "--processes",
        str(processes),
        # a private master port, so a Locust already running on this machine does not collide
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "--master-port",
        str(port),
        "--max-tokens",
        "128",
        "--results-json",
        str(results_json),
        "--prometheus-port",
        "0",
        *extra,
    ]
    started = time.monotonic()
    code = subprocess.call(cmd)
    print(f"== locust exited {code} after {time.monotonic() - started:.1f} s", flush=True)
    return code
