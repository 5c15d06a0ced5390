"""Checkpoints of the results file: partial documents (never a pass), atomic writes, failures logged once."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path

import pytest

from llmload.aggregate.stats import LLMStats
from llmload.exporters.checkpoint import CheckpointWriter
from llmload.exporters.results import RunOutcome, build_results, judge
from llmload.settings.config import RunConfig
from llmload.testing import failed_record
from tests.unit.test_readme_schema import T0, _ok


def _stats(ok: int, failed: int = 0) -> LLMStats:
    stats = LLMStats.empty()
    for i in range(ok):
        stats.add(_ok(T0 + i))
    for i in range(failed):
        stats.add(failed_record(start_unix=T0 + i, end_s=0.01))
    return stats


def test_checkpoint_document_is_partial_and_never_passes():
    partial = build_results(RunOutcome(_stats(10), checkpoint_at_s=300.4))
    assert partial["partial"] is True
    assert partial["checkpoint_at_s"] == 300.4
    assert partial["passed"] is None
    assert partial["exit_status"] is None
    assert partial["verdict"].startswith("PARTIAL: checkpoint 300 s into a run that had not ended")
    assert "so far 10/10 requests succeeded" in partial["verdict"]
    assert "PASSED" not in partial["verdict"]
    final = build_results(RunOutcome(_stats(10)))
    assert (final["partial"], final["checkpoint_at_s"], final["passed"], final["exit_status"]) == (False, None, True, 0)
    assert final["aborted"] is None


def test_checkpoint_of_an_aborted_run_is_still_partial():
    breach = {"threshold": "error_ratio>0.2 for 2s", "at_s": 4.0, "from_s": 2.0, "values": [1.0, 1.0]}
    partial = build_results(RunOutcome(_stats(1, 5), aborted=breach, checkpoint_at_s=4.2))
    assert partial["verdict"].startswith("PARTIAL:")
    assert partial["aborted"] == breach


def test_checkpoint_aborted_run_fails_naming_the_threshold():
    breach = {"threshold": "error_ratio>0.2 for 2s", "at_s": 12.0, "from_s": 10.0, "values": [1.0, 0.95]}
    config = dataclasses.replace(RunConfig(), max_failure_ratio=1.0)  # the ratio alone would pass
    results = build_results(RunOutcome(_stats(10, 5), config=config, aborted=breach))
    assert results["passed"] is False
    assert results["exit_status"] == 1
    assert results["verdict"] == (
        "FAILED: aborted 12 s into the run by --abort-on 'error_ratio>0.2 for 2s' "
        "(held from 10 s; values 1, 0.95); exit status 1"
    )
    assert judge(results).text == results["verdict"]


def test_checkpoint_writer_replaces_the_file_atomically(tmp_path: Path):
    path = tmp_path / "out" / "results.json"
    writer = CheckpointWriter(path)
    assert writer.write(build_results(RunOutcome(_stats(3), checkpoint_at_s=1.0)))
    assert writer.write(build_results(RunOutcome(_stats(5), checkpoint_at_s=2.0)))
    document = json.loads(path.read_text())
    assert (document["partial"], document["requests"]["total"]) == (True, 5)
    assert writer.written == 2
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temporary file left behind


def test_checkpoint_reader_always_sees_a_complete_document(tmp_path: Path):
    """A reader racing the writer (as a pod killed mid-write would leave the file) only ever parses whole files."""
    path = tmp_path / "results.json"
    documents = [build_results(RunOutcome(_stats(n), checkpoint_at_s=float(n))) for n in (1, 40)]
    writer = CheckpointWriter(path)
    writer.write(documents[0])
    done = threading.Event()
    seen: list[int] = []

    def read_forever() -> None:
        while not done.is_set():
            seen.append(json.loads(path.read_text())["requests"]["total"])

    reader = threading.Thread(target=read_forever)
    reader.start()
    try:
        # at least 150 writes, and on until the reader has raced them a few times (a loaded machine
        # may give the reader thread few turns); bounded in count and time
        deadline = time.monotonic() + 60
        for i in range(20_000):
            assert writer.write(documents[i % 2])
            if i >= 150 and (len(seen) > 10 or time.monotonic() > deadline):
                break
    finally:
        done.set()
        reader.join(timeout=30)
    assert len(seen) > 10
    assert set(seen) <= {1, 40}


def test_checkpoint_failure_is_logged_once_and_never_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    writer = CheckpointWriter(blocker / "results.json")  # its parent is a file: every write fails
    document = build_results(RunOutcome(_stats(1), checkpoint_at_s=1.0))
    with caplog.at_level(logging.INFO, logger="llmload"):
        assert not writer.write(document)
        assert not writer.write(document)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "checkpoint of" in errors[0].getMessage()
    assert "the run goes on" in errors[0].getMessage()
    assert writer.failures == 2


def test_checkpoint_writer_says_when_writes_work_again(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    failing = [True]

    def run(write):
        if failing[0]:
            raise OSError(28, "No space left on device")
        write()

    writer = CheckpointWriter(tmp_path / "r.json", run=run)
    document = build_results(RunOutcome(_stats(1), checkpoint_at_s=1.0))
    with caplog.at_level(logging.INFO, logger="llmload"):
        assert not writer.write(document)
        failing[0] = False
        assert writer.write(document)
    assert "No space left on device" in caplog.text
    assert "written again" in caplog.text
    assert json.loads((tmp_path / "r.json").read_text())["partial"] is True
