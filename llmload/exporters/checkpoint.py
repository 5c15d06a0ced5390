"""Checkpoints of the results file (``--checkpoint-interval``): partial documents, written atomically.

During a run the master (or the single process) rewrites ``--results-json``
every S seconds with a document built like the final one
(``llmload.exporters.results.build_results`` with ``checkpoint_at_s`` set:
``partial`` true, ``passed`` and ``exit_status`` null, a ``verdict`` that says
no verdict exists yet). Each write goes through ``write_results_json``
(temporary file in the same directory, fsync, ``os.replace``), so a reader,
or a process killed mid-write, only ever leaves a complete JSON document: the
previous checkpoint or the new one. The final write at the run's end replaces
the last checkpoint with ``partial`` false.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from llmload.exporters.results import write_results_json

__all__ = ["CheckpointWriter"]

log = logging.getLogger("llmload")

Run = Callable[[Callable[[], None]], None]
"""Runs a write and waits for it (e.g. in a worker thread); re-raises its exception."""


def _here(write: Callable[[], None]) -> None:
    write()


class CheckpointWriter:
    """Writes partial results documents to one path; a failure is logged once and never raised.

    Attributes:
        path: the ``--results-json`` path.
        written: checkpoints written.
        failures: checkpoints that could not be written.
    """

    def __init__(self, path: str | os.PathLike[str], *, run: Run = _here) -> None:
        """Write to ``path``; ``run`` executes each write (default: in the caller)."""
        self.path = path
        self.written = 0
        self.failures = 0
        self._run = run
        self._failing = False

    def write(self, results: Mapping[str, Any]) -> bool:
        """Write ``results`` atomically; False (logged the first time of a streak) when it failed."""
        try:
            self._run(functools.partial(write_results_json, self.path, results))
        except (OSError, ValueError) as exc:
            self.failures += 1
            if not self._failing:
                log.error(
                    "llmload: checkpoint of %s not written (%s); the run goes on and the final results are "
                    "still written at its end (further checkpoint failures are not logged until one succeeds)",
                    self.path,
                    exc,
                )
            self._failing = True
            return False
        if self._failing:
            log.info("llmload: checkpoints of %s are written again", self.path)
        self._failing = False
        self.written += 1
        return True
