"""Time-series files: ``--timeseries PATH`` (JSONL, live) and the ``--csv PREFIX`` files (end of run).

- ``TimeseriesLog`` appends each row (``llmload.exporters.timeseries``) as one
  JSON line as soon as its interval is complete, flushed line by line, so a
  killed process leaves every complete interval on disk.
- ``write_csv_files`` follows Locust's ``--csv PREFIX`` convention:
  ``PREFIX_llm_stats.csv`` (the run's figures: one row per endpoint/model
  when more than one was measured, then the total row with ``endpoint`` and
  ``model`` empty) and ``PREFIX_llm_stats_history.csv`` (the results'
  ``timeseries`` rows). Both read the results document only. Empty cells
  mean unknown (JSON null).
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from llmload.exporters.sections import PERCENTILES
from llmload.exporters.timeseries import QUANTILE_METRICS, Row, columns, outcome_columns

__all__ = ["STATS_COLUMNS", "TimeseriesLog", "csv_paths", "llm_stats_rows", "write_csv_files"]

_SUMMARY = ("mean", *(name for name, _ in PERCENTILES), "max")

STATS_COLUMNS: tuple[str, ...] = (
    "endpoint",
    "model",
    "succeeded",
    "failed",
    *outcome_columns(),
    "prompt_tokens",
    "output_tokens",
    "duration_s",
    "requests_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    *tuple(f"{prefix}_{stat}_s" for prefix, _ in QUANTILE_METRICS for stat in _SUMMARY),
)
"""Columns of ``PREFIX_llm_stats.csv``."""


class TimeseriesLog:
    """Appends time-series rows to ``path`` as JSON lines (file and parent directories created, truncated first).

    Raises:
        OSError: from the constructor when ``path`` cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.path = target
        self.rows_written = 0
        # Line-buffered: each row is on disk at once, so a killed pod keeps every complete interval.
        self._file: IO[str] | None = open(target, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in close()

    def write(self, rows: Iterable[Row]) -> None:
        """Append each row as one line (dropped after ``close``).

        Raises:
            ValueError: a row holds NaN or infinity (not valid JSON).
        """
        if self._file is None:
            return
        for row in rows:
            self._file.write(json.dumps(row, separators=(",", ":"), allow_nan=False) + "\n")
            self.rows_written += 1

    def close(self) -> None:
        """Flush and close; idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None


def csv_paths(prefix: str) -> tuple[Path, Path]:
    """``(PREFIX_llm_stats.csv, PREFIX_llm_stats_history.csv)``."""
    return Path(f"{prefix}_llm_stats.csv"), Path(f"{prefix}_llm_stats_history.csv")


def _stats_row(section: Mapping[str, Any], endpoint: str | None, model: str | None) -> Row:
    requests, tokens, throughput = section["requests"], section["tokens"], section["throughput"]
    row: Row = {"endpoint": endpoint, "model": model, "succeeded": requests["succeeded"], "failed": requests["failed"]}
    by_outcome = requests.get("by_outcome", {})
    row.update({name: by_outcome.get(name, 0) for name in outcome_columns()})
    row["prompt_tokens"] = tokens["prompt"]
    row["output_tokens"] = tokens["completion"]
    row["duration_s"] = section["duration_s"]
    row.update({k: throughput[k] for k in ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s")})
    for prefix, name in QUANTILE_METRICS:
        summary = section["latency"][name]
        row.update({f"{prefix}_{stat}_s": summary[stat] for stat in _SUMMARY})
    return row


def llm_stats_rows(results: Mapping[str, Any]) -> list[Row]:
    """The rows of ``PREFIX_llm_stats.csv`` from a results document: per endpoint/model, then the total."""
    rows = [_stats_row(entry, entry["endpoint"], entry["model"]) for entry in results.get("by_endpoint", [])]
    rows.append(_stats_row(results, None, None))
    return rows


def _cell(value: Any) -> Any:
    """A CSV cell: a mapping (e.g. ``turn_ttft_mean_s``) as its compact JSON text, anything else as it is."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, Mapping) else value


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Row]) -> None:
    """Write one CSV atomically (temporary file + ``os.replace``); None becomes an empty cell."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as tmp:
            writer = csv.DictWriter(tmp, fieldnames=list(header), extrasaction="raise", restval="")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else _cell(v) for k, v in row.items()})
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_csv_files(prefix: str, results: Mapping[str, Any], extra_columns: Sequence[str] = ()) -> tuple[Path, Path]:
    """Write ``PREFIX_llm_stats.csv`` and ``PREFIX_llm_stats_history.csv`` from a results document.

    Args:
        prefix: Locust's ``--csv`` value (a path prefix).
        results: the results document; its ``timeseries`` rows become the history.
        extra_columns: extra gauge columns of the rows (``llmload.exporters.timeseries.columns``).

    Returns:
        The two paths written.

    Raises:
        OSError: a file cannot be written.
        ValueError: a row has a column the header lacks (pass it in ``extra_columns``).
    """
    stats_path, history_path = csv_paths(prefix)
    _write_csv(stats_path, STATS_COLUMNS, llm_stats_rows(results))
    _write_csv(history_path, columns(extra_columns), results.get("timeseries", []))
    return stats_path, history_path
