"""Memory over a long run with unique error messages (a benchmark; figures, not a test).

Master + 2 workers (`--processes 2`), 500 users, against `llmload sim` with 5%
injected HTTP 500 failures whose messages carry unique request ids. The RSS of
the master and of each worker is sampled every 10 s; growth is measured from
the end of warm-up (20% of the run) to the end.

    python bench/memory_soak.py            # 30 minutes
    python bench/memory_soak.py --minutes 5
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil
from benchlib import REPO, private_master_port, start_sim


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--users", type=int, default=500)
    args = parser.parse_args()
    run_s = int(args.minutes * 60)
    url, sim = start_sim("--fail-rate", "0.05", "--max-num-seqs", "512")
    master = subprocess.Popen(
        [
            sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless", "--only-summary",
            "-H", url, "--processes", "2", *private_master_port(), "-u", str(args.users), "-r", "100",
            "-t", f"{run_s}s",
            "--max-tokens", "64", "--max-failure-ratio", "0.2", "--prometheus-port", "0", "--skip-preflight",
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    samples: list[tuple[float, int, list[int]]] = []
    started = time.monotonic()
    try:
        while master.poll() is None:
            time.sleep(10)
            try:
                proc = psutil.Process(master.pid)
                workers = [c.memory_info().rss for c in proc.children()]
                samples.append((time.monotonic() - started, proc.memory_info().rss, workers))
            except psutil.Error:
                break
    finally:
        sim.terminate()
        sim.wait(10)
    # steady samples only: after warm-up, before the stop, with both workers alive
    warm = [s for s in samples if 0.2 * run_s <= s[0] <= run_s - 5 and len(s[2]) == 2 and s[1] > 0]
    if len(warm) < 2:
        print("run too short to measure growth")
        return 1
    first, last = warm[0], warm[-1]
    mib = 1024 * 1024
    print(f"memory over {run_s / 60:.0f} min, {args.users} users, 5% failures with unique messages")
    print(f"  master RSS {first[1] / mib:.1f} MiB -> {last[1] / mib:.1f} MiB ({last[1] / first[1] - 1:+.1%})")
    for i, (a, b) in enumerate(zip(first[2], last[2], strict=False)):
        print(f"  worker {i} RSS {a / mib:.1f} MiB -> {b / mib:.1f} MiB ({b / a - 1:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
