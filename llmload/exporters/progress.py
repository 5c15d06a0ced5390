"""The progress line logged for each interval's total row of the time series (``llmload.exporters.timeseries``)."""

from __future__ import annotations

from llmload.exporters.timeseries import Row

__all__ = ["progress_line"]


def _duration(seconds: float) -> str:
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def progress_line(
    row: Row,
    *,
    elapsed_s: float,
    run_time_s: float | None = None,
    finished: int | None = None,
    num_requests: int | None = None,
    with_workers: bool = True,
) -> str:
    """One log line for a total row: elapsed/remaining, req/s, output tok/s, TTFT p99, errors, in flight, workers.

    Args:
        row: the interval's total row.
        elapsed_s: seconds since the run's start.
        run_time_s: the run's time limit (``-t``), or None.
        finished: requests finished (or failed) so far in the run, for a ``--num-requests`` run.
        num_requests: the run's ``--num-requests``, or None.
        with_workers: end with the worker count (a master's line); a single process has no workers, and
            "0 workers" there read as lost workers.
    """
    if run_time_s is not None:
        where = f"{_duration(elapsed_s)}/{_duration(run_time_s)}, {_duration(run_time_s - elapsed_s)} left"
    elif num_requests is not None and finished is not None:
        where = f"{_duration(elapsed_s)}, {finished}/{num_requests} requests, {max(0, num_requests - finished)} left"
    else:
        where = _duration(elapsed_s)
    done = row["succeeded"] + row["failed"]
    errors = f"{row['failed']} errors" + (f" ({row['failed'] / done:.1%})" if done else "")
    ttft = row["ttft_p99_s"]
    parts = [
        f"llmload: [{where}] last {row['interval_s']:.3g}s:",
        f"{_fmt(row['requests_per_s'], '.2f')} req/s,",
        f"{_fmt(row['output_tokens_per_s'], '.1f')} output tok/s,",
        f"TTFT p99 {_fmt(None if ttft is None else ttft * 1000, '.0f', ' ms')},",
        f"{errors},",
        f"{_fmt(row.get('in_flight_requests'), 'd')} in flight,",
        f"{_fmt(row.get('users'), 'd')} users" + ("," if with_workers else ""),
    ]
    if with_workers:
        parts.append(f"{_fmt(row.get('workers'), 'd')} workers")
    return " ".join(parts)
