"""Locust's "No run time limit set" line is replaced when --num-requests bounds a headless run."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from llmload.run.plan import RequestLimitNote


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("locust.main", logging.INFO, __file__, 1, msg, (), None)


def test_locust_still_logs_the_no_run_time_limit_line_the_note_replaces():
    # tripwire: if Locust rewords its line, RequestLimitNote stops matching it (it would then show as is)
    spec = importlib.util.find_spec("locust")  # read, not imported: importing Locust monkey-patches
    assert spec is not None
    assert spec.origin is not None
    source = (Path(spec.origin).parent / "main.py").read_text(encoding="utf-8")
    assert f'logger.info("{RequestLimitNote.LOCUST_TEXT}")' in source


def test_num_requests_run_does_not_claim_it_has_no_limit_and_needs_ctrl_c():
    note = RequestLimitNote(300)
    record = _record(RequestLimitNote.LOCUST_TEXT)
    assert note.filter(record) is True
    assert record.getMessage() == (
        "llmload: no -t time limit: the run ends when --num-requests 300 requests have finished "
        "(Ctrl-C stops it earlier)"
    )
    other = _record("Run time limit set to %s seconds")
    other.args = (30,)
    assert note.filter(other) is True
    assert other.getMessage() == "Run time limit set to 30 seconds"
