"""Instructions per ``IntervalSeries.add`` on a worker's per-request path, counted by callgrind (figures, not a test).

    python bench/series_add_cost.py [--records N] [--small N]

Runs this script twice under ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``,
``OPENBLAS_NUM_THREADS=1``): once adding ``--small`` records (default 200),
once ``--records`` (default 2,000), and prints (Ir of the large run − Ir of the
small one) / (large − small): the instructions one ``add`` costs, start-up,
imports and record building excluded (both runs build the same records and
differ only in how many they add). Instruction counts are deterministic, so
the figure holds on a loaded machine.

The records are those of ``bench/run_bench.py``'s scenario A: a success with
128 tokens ~10 ms apart (one event per read, each read kernel-stamped with a
lag of a few tens of µs), a server usage count, ``max_tokens`` with
``ignore_eos`` (an exact length asked for), a kept-alive connection and
finish reason ``length``; seeded, so both runs see the same values.
The run's records land ~1,750 to an interval (A's request rate × the default 10 s interval).

``--add N`` (internal): the measured body, run by the valgrind child.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from llmload.aggregate.series import IntervalSeries
from llmload.request.record import RequestRecord, TokenCount, TokenSource

_TOKENS = 128
_PER_INTERVAL = 1750
_SEED = 19


def scenario_a_records(count: int) -> list[RequestRecord]:
    """``count`` records shaped like scenario A's (see the module docstring), seeded."""
    rng = random.Random(_SEED)
    records = []
    for i in range(count):
        first_s = 0.050 + rng.random() * 0.004
        times = [first_s + k * 0.010 + rng.random() * 0.0004 for k in range(_TOKENS)]
        records.append(
            RequestRecord(
                endpoint="completions",
                model="llmload-sim",
                started_at_unix=1_700_000_000.0 + i * 0.006,
                headers_s=first_s - 0.001,
                token_times_s=times,
                first_content_s=times[0],
                end_s=times[-1] + 0.0002,
                prompt_tokens=TokenCount(101, TokenSource.SERVER),
                completion_tokens=TokenCount(_TOKENS, TokenSource.SERVER),
                finish_reason="length",
                requested_output_tokens=_TOKENS,
                connect_s=0.0 if i >= 256 else 0.0008,
                read_lags_s=[2e-5 + rng.random() * 6e-5 for _ in range(_TOKENS + 2)],
            )
        )
    return records


def add_records(records: list[RequestRecord], count: int) -> IntervalSeries:
    """Add the first ``count`` of ``records`` to a fresh series, as ``Runtime.count`` does."""
    series = IntervalSeries.empty()
    add = series.add
    for i in range(count):
        add(i // _PER_INTERVAL, records[i])
    return series


def _callgrind_ir(adds: int, records: int, tmp: Path) -> int:
    out = tmp / f"callgrind.{adds}.out"
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
    argv += ["--add", str(adds), "--records", str(records)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"valgrind failed ({done.returncode}):\n{done.stderr[-2000:]}")
    match = re.search(r"Collected : (\d+)", done.stderr)
    if match is None:
        raise SystemExit(f"no 'Collected' line in valgrind's output:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--records", type=int, default=2000, help="records in the large run (default 2000)")
    parser.add_argument("--small", type=int, default=200, help="records in the small run (default 200)")
    parser.add_argument("--add", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.add is not None:
        add_records(scenario_a_records(args.records), args.add)
        return 0
    if not 0 <= args.small < args.records:
        parser.error(f"need 0 <= --small < --records, got {args.small} and {args.records}")
    with tempfile.TemporaryDirectory(prefix="llmload-series-cost-") as tmp:
        small = _callgrind_ir(args.small, args.records, Path(tmp))
        large = _callgrind_ir(args.records, args.records, Path(tmp))
    per_add = (large - small) / (args.records - args.small)
    print(f"Ir: {args.small} adds {small:,}, {args.records} adds {large:,}")
    print(f"IntervalSeries.add: {per_add:,.0f} Ir per add (scenario A's records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
