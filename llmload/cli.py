"""The ``llmload`` command: ``sim`` (simulated server), ``demo`` (the main job end to end), ``options``,
``locustfile`` (the path of an installed locustfile, or a starter copy), ``sweep``, ``report`` (the HTML
report of results files), ``selfcheck`` (the client's timing error and streams per core on this machine).

Load itself is run by Locust: ``locust -f $(llmload locustfile chat) ...`` (or ``locustfiles/chat.py``
in a clone; see README); this module only starts processes and builds their argument lists.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

# The locustfiles shipped in the package (llmload/locustfiles/): found by path, never imported here
# (importing one imports Locust and installs llmload's hooks).
_LOCUSTFILES = Path(__file__).resolve().parent / "locustfiles"
_LOCUSTFILE_NAMES = ("chat", "completions", "responses", "messages", "embeddings", "mixed")


def main(argv: list[str] | None = None) -> int:
    """Run the ``llmload`` command line; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sim":
        from llmload import sim

        return sim.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="llmload",
        description="LLM load generator on Locust. Load runs: locust -f $(llmload locustfile chat) -H URL ...",
        epilog="Every option of a load run (--max-tokens, --num-requests, --request-rate, ...): llmload options",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("options", help="list every load-run option, grouped, with help, default and env var")
    sub.add_parser("sim", help="start the simulated OpenAI-compatible server (llmload sim --help)")
    locustfile = sub.add_parser(
        "locustfile",
        help="print the path of an installed locustfile (locust -f $(llmload locustfile chat)), or write a copy",
        description="Examples: locust -f $(llmload locustfile chat) -H http://127.0.0.1:8000; "
        "llmload locustfile chat -o mytest.py (a starter locustfile to edit)",
    )
    locustfile.add_argument(
        "name",
        choices=_LOCUSTFILE_NAMES,
        help="chat, completions, responses, messages or embeddings (ChatUser ... EmbeddingsUser)",
    )
    locustfile.add_argument("-o", "--output", metavar="PATH", help="write a copy to PATH (never overwritten)")
    demo = sub.add_parser("demo", help="start llmload sim and run the main job against it")
    demo.add_argument("--chat-users", type=int, default=256, help="ChatUser users (default 256)")
    demo.add_argument("--chat-run-time", default="30s", help="ChatUser run time (default 30s)")
    demo.add_argument("--completion-users", type=int, default=1024, help="CompletionUser users (default 1024)")
    demo.add_argument("--num-requests", type=int, default=300, help="CompletionUser requests (default 300)")
    demo.add_argument("--processes", type=int, default=2, help="local Locust worker processes (default 2)")
    demo.add_argument("--results-dir", default="results", help="where the results JSON files go")
    demo.add_argument(
        "--quick",
        action="store_true",
        help=f"a short run of the same job (ChatUser {_QUICK['chat_users']} users for {_QUICK['chat_run_time']}, "
        f"CompletionUser {_QUICK['num_requests']} requests at {_QUICK['completion_users']} users), "
        "to check an installation, into demo-quick-*.json (the full demo's files stay); "
        "options given explicitly win",
    )
    sweep = sub.add_parser(
        "sweep",
        help="run Locust once per concurrency or rate step and name the saturation knee",
        description="Example: llmload sweep --sweep users=1,8,64,256 --results-json sweep.json -- "
        "-f locustfiles/chat.py -H http://127.0.0.1:8000 -t 60s",
    )
    sweep.add_argument("--sweep", required=True, help="users=1,8,64 (closed loop) or rate=5,10,inf (req/s)")
    sweep.add_argument("--results-json", default="sweep.json", help="combined results (default sweep.json)")
    sweep.add_argument("--ttft-p99-limit", type=float, default=None, help="knee when TTFT p99 exceeds S seconds")
    sweep.add_argument(
        "--max-e2e",
        type=float,
        default=10.0,
        metavar="S",
        help="rate sweeps: longest request time (s) the users must absorb at the highest rate; "
        "without -u the sweep sets -u ceil(rate x S) (at least 64), with -u it refuses fewer (default 10)",
    )
    sweep.add_argument("locust_args", nargs=argparse.REMAINDER, help="-- then the Locust arguments for every step")
    report = sub.add_parser(
        "report",
        help="write the self-contained HTML report of a results file, or compare two side by side",
        description="Examples: llmload report results.json -o report.html; "
        "llmload report before.json after.json -o compare.html (deltas are after - before)",
    )
    report.add_argument("results", nargs="+", metavar="RESULTS_JSON", help="one results file, or two to compare")
    report.add_argument("-o", "--output", required=True, metavar="PATH", help="the HTML file to write")
    report.add_argument(
        "--name",
        action="append",
        default=None,
        metavar="LABEL",
        help="label of each run in the report, once per file (default: A/B and the run id)",
    )
    check = sub.add_parser(
        "selfcheck",
        help="measure this machine's client TTFT error, read lag, CPU per chunk and streams per core "
        "against the simulator (and a packet capture when tcpdump may run)",
        description="Example: llmload selfcheck --users 512 --itl 10 --processes 2 --json selfcheck.json",
    )
    check.add_argument("--users", type=int, default=None, help="users of both phases (default 256; --quick 32)")
    check.add_argument("--itl", type=float, default=10.0, metavar="MS", help="simulator ITL, ms (default 10)")
    check.add_argument("--ttft", type=float, default=50.0, metavar="MS", help="simulator TTFT, ms (default 50)")
    check.add_argument("--processes", type=int, default=1, help="local Locust worker processes (default 1)")
    check.add_argument("--max-tokens", type=int, default=None, help="tokens per reply (default 128; --quick 64)")
    check.add_argument("--no-capture", action="store_true", help="use the simulator's truth even if tcpdump may run")
    check.add_argument("--json", metavar="PATH", default=None, help="also write the report as JSON to PATH")
    check.add_argument("--quick", action="store_true", help="a short check (~30 s): 32 users, 64-token replies")
    args = parser.parse_args(argv)
    if args.command == "selfcheck":
        return _selfcheck(args)
    if args.command == "options":
        from llmload.settings.options import describe

        sys.stdout.write(describe())
        return 0
    if args.command == "demo":
        return _demo(_quick(args, argv) if args.quick else args)
    if args.command == "locustfile":
        return _locustfile_command(args.name, args.output)
    if args.command == "sweep":
        return _sweep(args)
    if args.command == "report":
        return _report(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _sweep(args: argparse.Namespace) -> int:
    from llmload.errors import ConfigError
    from llmload.sweep import (
        parse_sweep,
        rate_sweep_users,
        remove_step_files,
        step_file,
        step_section,
        step_text,
        sweep_document,
        sweep_table,
    )

    extra = [a for a in args.locust_args if a != "--"]
    try:
        spec = parse_sweep(args.sweep)
        users = rate_sweep_users(spec, extra, args.max_e2e)
    except ConfigError as exc:
        print(f"llmload sweep: error: {exc}", file=sys.stderr)
        return 2
    if users:
        print(f"== sweep {spec.kind}: {' '.join(users)} for every step (enough users to keep each schedule)")
    if "--headless" not in extra:
        extra.append("--headless")
    out = Path(args.results_json)
    problem = _unwritable(out)
    if problem is not None:
        print(
            f"llmload sweep: error: cannot write --results-json {str(out)!r} ({problem}); pass a writable path",
            file=sys.stderr,
        )
        return 2
    remove_step_files(out)
    steps: list[dict[str, Any]] = []
    code = 0
    for step in spec.steps:
        step_json = step_file(out, spec.kind, step)
        print(f"\n== sweep {spec.kind}={step_text(step)}", flush=True)
        rc = subprocess.call(
            [sys.executable, "-m", "locust", *extra, *users, *spec.locust_args(step), "--results-json", str(step_json)]
        )
        if not step_json.exists():
            print(
                f"llmload sweep: step {spec.kind}={step_text(step)} wrote no results (exit {rc}); stopping",
                file=sys.stderr,
            )
            return rc or 1
        code = max(code, rc)
        step_results = json.loads(step_json.read_text())
        if step_results.get("blocked"):  # a bad option or a dead server: every later step would be blocked too
            print(
                f"llmload sweep: step {spec.kind}={step_text(step)} was blocked before load "
                f"({step_results['blocked']}); stopping the sweep, no knee",
                file=sys.stderr,
            )
            return rc or 2
        section = step_section(step, step_results)
        if section["client_limited"]:
            print(
                f"llmload sweep: WARNING: step {spec.kind}={step_text(step)} did not keep its schedule "
                f"({section['load'].get('warning')}); its throughput is the client's, so the knee ignores it. "
                f"Rerun with more users (-u)",
                file=sys.stderr,
            )
        steps.append(section)
    document = sweep_document(spec, steps, ttft_p99_limit_s=args.ttft_p99_limit)
    knee = document["knee"]
    out.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
    view = _write_sweep_view(out, document)
    print("\n" + "\n".join(sweep_table(spec.kind, steps)))
    print(
        f"knee: {step_text(knee['step'])} ({knee['reason']})" if knee else "knee: not reached (throughput still rising)"
    )
    print(
        f"== sweep results written to {out} (each step's own results in {step_file(out, spec.kind, 0).name[:-6]}*.json)"
    )
    if view is not None:
        print(f"== sweep view (load against results, the knee marked): {view}")
    return code


def _write_sweep_view(out: Path, document: dict[str, Any]) -> Path | None:
    """Write the sweep view beside the sweep file (``STEM.html``); a failure is a warning, the results stay."""
    from llmload.exporters.html import ReportError
    from llmload.exporters.sweep_report import write_sweep_report

    view = out.with_suffix(".html")
    try:
        write_sweep_report(view, document)
    except (OSError, ReportError) as exc:
        print(f"llmload sweep: WARNING: sweep view not written to {view}: {exc}", file=sys.stderr)
        return None
    return view


def _selfcheck(args: argparse.Namespace) -> int:
    from llmload.selfcheck import SelfcheckSpec, format_report, run_selfcheck

    users = args.users if args.users is not None else 32 if args.quick else 256
    spec = SelfcheckSpec(
        users=users,
        processes=args.processes,
        ttft_ms=args.ttft,
        itl_ms=args.itl,
        max_tokens=args.max_tokens if args.max_tokens is not None else 64 if args.quick else 128,
        steady_requests=users * 3 if args.quick else None,
        capture=not args.no_capture,
    )
    try:
        spec.check()
    except ValueError as exc:
        print(f"llmload selfcheck: error: {exc}", file=sys.stderr)
        return 2
    problem = _unwritable(Path(args.json)) if args.json else None
    if problem is not None:  # before the run, not after it: nothing measured is lost
        print(
            f"llmload selfcheck: error: cannot write --json {args.json!r} ({problem}); pass a writable path",
            file=sys.stderr,
        )
        return 2
    print(f"llmload selfcheck: simulator and two client runs ({users} users); this takes a while", flush=True)
    try:
        report = run_selfcheck(spec)
    except RuntimeError as exc:
        print(f"llmload selfcheck: error: {exc}", file=sys.stderr)
        return 1
    print(format_report(report))
    if args.json:
        path = Path(args.json)
        path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
        print(f"llmload selfcheck: report written to {path}")
    return 0


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written (its folder is created if missing), or None; an existing file is kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with path.open("a"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _report(args: argparse.Namespace) -> int:
    from llmload.exporters.html import ReportError, load_results, write_html_report
    from llmload.exporters.sweep_report import load_sweep, write_sweep_report

    if len(args.results) > 2:
        print(
            f"llmload report: error: got {len(args.results)} results files; pass one, or two to compare",
            file=sys.stderr,
        )
        return 2
    if args.name is not None and len(args.name) != len(args.results):
        print(
            f"llmload report: error: {len(args.name)} --name for {len(args.results)} results files; "
            "pass --name once per file, or not at all",
            file=sys.stderr,
        )
        return 2
    sweep = load_sweep(args.results[0]) if len(args.results) == 1 else None
    try:
        if sweep is not None:  # a sweep file: load against results, the knee marked
            size = write_sweep_report(args.output, sweep)
            print(f"llmload report: sweep view written to {args.output} ({size / 1024:.0f} KiB)")
            return 0
        documents = [load_results(path) for path in args.results]
        size = write_html_report(args.output, documents, args.name)
    except ReportError as exc:
        print(f"llmload report: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"llmload report: error: cannot write {args.output!r} ({exc.strerror}); pass a writable path",
            file=sys.stderr,
        )
        return 2
    what = "comparison" if len(documents) == 2 else "report"
    print(f"llmload report: {what} written to {args.output} ({size / 1024:.0f} KiB)")
    return 0


_QUICK: dict[str, Any] = {"chat_users": 16, "chat_run_time": "5s", "completion_users": 32, "num_requests": 64}


def _quick(args: argparse.Namespace, argv: list[str]) -> argparse.Namespace:
    """``demo --quick``: the short sizes of ``_QUICK``, except options given on the command line."""
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    for name, value in _QUICK.items():
        if "--" + name.replace("_", "-") not in given:
            setattr(args, name, value)
    return args


def _locustfile(name: str) -> str:
    """The installed locustfile ``name`` (``chat.py``): in a clone and in an installed wheel alike."""
    path = _LOCUSTFILES / name
    if not path.exists():
        raise SystemExit(f"llmload: {path} not found; this llmload installation is incomplete, reinstall it")
    return str(path)


def _locustfile_command(name: str, output: str | None) -> int:
    """``llmload locustfile NAME [-o PATH]``: print the installed file's path, or write a starter copy.

    The copy's docstring names the command that runs it (``locust -f PATH``), not the installed file.
    Returns the exit status: 0, or 2 when PATH exists or cannot be written.
    """
    source = Path(_locustfile(f"{name}.py"))
    if output is None:
        print(source)
        return 0
    target = Path(output)
    if target.exists():
        print(f"llmload locustfile: error: {output} exists; pass another path or remove it", file=sys.stderr)
        return 2
    # The installed file's docstring runs it as $(llmload locustfile NAME): that would run the installed
    # file, not this copy and its edits; the copy names itself instead.
    text = source.read_text(encoding="utf-8").replace(f"$(llmload locustfile {name})", shlex.quote(output), 1)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"llmload locustfile: error: cannot write {output!r} ({exc.strerror})", file=sys.stderr)
        return 2
    print(f"llmload locustfile: wrote {output}; run it with: locust -f {shlex.quote(output)} -H http://127.0.0.1:8000")
    return 0


def _demo(args: argparse.Namespace) -> int:
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    stem = "demo-quick" if args.quick else "demo"  # --quick leaves the full demo's results alone
    chat_json, comp_json = results / f"{stem}-chat.json", results / f"{stem}-completions.json"
    for stale in (chat_json, comp_json):
        stale.unlink(missing_ok=True)
    print(f"== results go to {chat_json} and {comp_json}", flush=True)
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
        print(
            f"\n== 1/2 ChatUser: {args.chat_users} users, master + {args.processes} workers, {args.chat_run_time}",
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
