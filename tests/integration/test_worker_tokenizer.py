"""Issue 24: a worker with --tokenizer DIR is not dropped as missing at its first spawn message.

Loading a tokenizer directory imports transformers (4-5 s of CPU on a busy 2-core machine).
Done in the handler of the first spawn message, it starved the worker's heartbeats: the master
marked both workers missing and the run sent nothing. Workers now load it at init, before the run.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.procs import run_locust
from tests.integration.test_sim import start_sim, stop_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def tokenizer_dir(tmp_path, tiny_tokenizer):
    """A tokenizer directory (tokenizer.json + tokenizer_config.json): loaded through transformers."""
    where = tmp_path / "tok"
    where.mkdir()
    tiny_tokenizer.save(str(where / "tokenizer.json"))
    (where / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return where


def test_issue24_workers_load_the_tokenizer_before_the_run_and_stay_connected(tmp_path, tokenizer_dir):
    url, sim = start_sim("--decode-step-ms", "10")
    out = tmp_path / "r.json"
    try:
        proc = run_locust(
            ["-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", url, "--processes", "2",
             "-u", "8", "-r", "8", "-t", "6s", "--max-tokens", "8", "--tokenizer", str(tokenizer_dir),
             "--results-json", str(out)],
            timeout_s=120,
        )  # fmt: skip
    finally:
        stop_sim(sim)
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = [line for line in proc.stderr.splitlines() if "worker loaded tokenizer" in line]
    assert len(loaded) == 2, proc.stderr[-4000:]  # each worker, at init
    results = json.loads(out.read_text())
    assert results["requests"]["succeeded"] > 0, proc.stderr[-4000:]
    # Under coverage on a loaded machine the load at init can still outlast the master's own
    # preflight (25 s measured), so a worker may be marked missing for a moment; one whose
    # heartbeats resume is not reported as lost.
    assert not results.get("lost_workers"), proc.stderr[-4000:]
