"""What one master event-loop turn costs at N workers, in process (figures, not a test).

A heartbeat reply waits for the longest turn ahead of it, so every task the
master runs in one turn must stay short whatever the number of workers. This
bench builds a real master's state (Locust's ``MasterRunner`` with N worker
nodes, llmload's ``Runtime`` with the exporter's window and a timeline) and
feeds it, in this process, the live reports a real worker recorded
(``bench/scale.py`` writes them to ``bench-scale.recording.json``; or pass
``--record`` to record them here): N workers, each sending one report every
0.5 s of a virtual clock, for ``--run-s`` seconds, each report re-stamped
to the virtual time's interval. Then it times, on that state:

- ``report``: one report as Locust's master handles it (message decode, then
  llmload's ``llmload_live`` handler: decode and merge), mean CPU over the feed;
- ``scrape``: one ``/metrics`` (``generate_latest`` of the exporter's registry), and its longest
  turn (the scrape yields to the loop between its large families; a checkout that does not: all of it);
- ``window view``: the live window's read alone (part of a scrape);
- ``timeline tick``: one tick of the time-series greenlet (gauges, due rows), and one complete
  interval's rows the first time they are built (once per interval);
- ``watch``: one pass of the lost-worker watch;
- ``run stats``: the run's totals (``Runtime.run_stats``: a checkpoint, the stop);
- ``gc``: the longest garbage-collector pause during the feed, the share of the feed's CPU
  spent in the collector, and how many full collections.

Each figure is CPU time (``time.process_time``), the best of ``--rounds``.
CPU time, not wall time: the machine may be shared. For counts that do not
depend on the machine's load run it under ``valgrind --tool=callgrind``.

Run: ``python bench/master_turns.py --workers 10,100,1000``
(after ``python bench/scale.py --microbench-only``, or with ``--record``).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchlib import REPO

sys.path.insert(0, str(REPO))

LIVE_S = 0.5


def _best_us(call: Callable[[], object], rounds: int, n: int = 1) -> float:
    """The best of ``rounds`` mean CPU times of ``n`` calls, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(n):
            call()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


class _GcPauses:
    """The collector's pauses (CPU s) while enabled: the longest, their sum, the number of full collections."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.total_s = 0.0
        self.full = 0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.process_time()
            return
        pause_s = time.process_time() - self._t0
        self.longest_s = max(self.longest_s, pause_s)
        self.total_s += pause_s
        self.full += info["generation"] == 2


def measure(workers: int, live_raw: bytes, run_id: str, *, run_s: float, rounds: int) -> dict[str, Any]:
    """Build a master with ``workers`` workers' state, feed it ``run_s`` s of live reports, time each task."""
    from locust.env import Environment
    from locust.rpc.protocol import Message
    from locust.runners import STATE_RUNNING, WorkerNode

    import functools

    from prometheus_client import generate_latest

    from llmload.aggregate.series import FoldedTotal, IntervalSeries
    from llmload.edge import cluster, live, master
    from llmload.edge import timeline as timeline_ticks
    from llmload.edge.runtime import ExportState, Runtime, attach
    from llmload.exporters.prometheus_server import PrometheusExporter
    from llmload.exporters.timeline import Timeline
    from llmload.exporters.window import SlidingWindow
    from llmload.servermetrics import SERVER_COLUMNS
    from llmload.settings.config import RunConfig

    now = [0.0]  # the virtual clock (s since the run start)
    environment = Environment()
    runner = environment.create_master_runner("127.0.0.1", 0)
    environment.parsed_options = argparse.Namespace(run_time=None, headless=True)
    ids = [f"worker-{i:05d}" for i in range(workers)]
    for client_id in ids:
        node = WorkerNode(client_id)
        node.state = STATE_RUNNING
        node.user_classes_count = {"ChatUser": 100}
        runner.clients[client_id] = node
    runtime = Runtime(config=RunConfig())
    runtime.run.run_id = run_id
    runtime.run.series = IntervalSeries.empty()
    runtime.run.local_total = FoldedTotal(open_intervals=master._open_intervals(runtime))
    runtime.master.planned_workers = set(ids)
    marks: list[float] = []  # CPU times of the scrape's pauses: its turns are the gaps between them

    def mark() -> None:
        marks.append(time.process_time())

    exporter = PrometheusExporter(functools.partial(live._run_view, environment, runtime, mark), pause=mark)
    runtime.process.export = ExportState(
        exporter=exporter, window=SlidingWindow(clock=lambda: now[0]), grace_s=0.0, url="http://127.0.0.1/metrics"
    )
    interval_s = runtime.process.config.timeseries_interval_s
    runtime.timeline.table = Timeline(interval_s, LIVE_S + 1.0, SERVER_COLUMNS)
    runtime.timeline.rows = []
    attach(environment, runtime)

    template = Message.unserialize(live_raw)
    by_interval: dict[int, bytes] = {}

    def stamped(index: int) -> bytes:
        raw = by_interval.get(index)
        if raw is None:
            for item in template.data["series"]:
                item["i"] = index
            raw = by_interval[index] = Message(template.type, template.data, "w").serialize()
        return raw

    handler = runner.custom_messages["llmload_live"][0] if "llmload_live" in runner.custom_messages else None
    if handler is None:
        cluster.register_messages(runner)
        handler = runner.custom_messages["llmload_live"][0]
    pauses = _GcPauses()
    reports = round(run_s / LIVE_S) * workers
    gc.unfreeze()  # as the master does at each run start (``cluster._start_master_or_local``)
    gc.collect()
    gc.freeze()
    gc.callbacks.append(pauses)
    t0 = time.process_time()
    for n in range(reports):
        now[0] = n * LIVE_S / workers
        msg = Message.unserialize(stamped(int(now[0] // interval_s)))
        msg.node_id = ids[n % workers]
        handler(environment=environment, msg=msg)
    feed_s = time.process_time() - t0
    report_us = feed_s / reports * 1e6
    gc.callbacks.remove(pauses)

    def tick() -> None:
        timeline = runtime.timeline.table
        assert timeline is not None
        timeline.sample(now[0], timeline_ticks._gauges(environment, runtime))
        runtime.timeline.rows.extend(timeline.due_rows(runtime.run.series, now[0]))

    def watch() -> None:  # one pass of cluster._watch_workers' loop body
        alive = {c.id for c in runner.clients.all if c.state != "missing"}
        sorted(runtime.master.planned_workers - alive - runtime.master.finals_from)

    def longest_scrape_turn_us() -> float:
        marks.clear()
        t0 = time.process_time()
        generate_latest(exporter.registry)
        ends = [t0, *marks, time.process_time()]
        return max(b - a for a, b in itertools.pairwise(ends)) * 1e6

    def interval_rows_ms() -> float:
        """One complete interval's rows (its quantiles sum its pending bucket arrays), the first time they are read."""
        fresh = Timeline(interval_s, LIVE_S + 1.0, SERVER_COLUMNS)
        t0 = time.process_time()
        rows = fresh.due_rows(runtime.run.series, now[0])
        intervals = len({r["t"] for r in rows}) or 1
        return (time.process_time() - t0) / intervals * 1e3

    rows_ms = interval_rows_ms()  # before anything else reads the series
    row = {
        "workers": workers,
        "reports": reports,
        "report_us": round(report_us, 1),
        "scrape_ms": round(_best_us(lambda: generate_latest(exporter.registry), rounds) / 1e3, 2),
        "scrape_longest_turn_ms": round(min(longest_scrape_turn_us() for _ in range(rounds)) / 1e3, 2),
        "window_view_ms": round(_best_us(runtime.process.export.window.view, rounds) / 1e3, 2),
        "timeline_tick_ms": round(_best_us(tick, rounds) / 1e3, 3),
        "interval_rows_ms": round(rows_ms, 2),
        "watch_ms": round(_best_us(watch, rounds) / 1e3, 3),
        "run_stats_ms": round(_best_us(runtime.run.totals, rounds) / 1e3, 2),
        "gc_longest_ms": round(pauses.longest_s * 1e3, 2),
        "gc_pct_of_feed": round(pauses.total_s / feed_s * 100, 1),
        "gc_full": pauses.full,
    }
    runner.quit()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="10,100,1000", help="comma-separated N (default %(default)s)")
    parser.add_argument("--recording", default="bench-scale.recording.json", help="bench/scale.py's recording")
    parser.add_argument("--record", action="store_true", help="record a real worker's reports first (bench/scale.py)")
    parser.add_argument("--run-s", type=float, default=25.0, help="virtual seconds of live reports fed (default 25)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args()
    path = Path(args.recording)
    if args.record:
        subprocess_args = [sys.executable, str(REPO / "bench" / "scale.py"), "--microbench-only"]
        subprocess_args += ["--out", str(path.with_name(path.name.replace(".recording", "")))]
        import subprocess

        subprocess.run(subprocess_args, check=True)
    recording = json.loads(path.read_text())
    rows = []
    for n in (int(x) for x in args.workers.split(",")):
        row = measure(
            n, bytes.fromhex(recording["live"]), recording["live_run_id"], run_s=args.run_s, rounds=args.rounds
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
