"""Issue 20: llmload's options travel in a spawn message as one entry of the non-default values.

The worker sets every llmload option from it (absent: the default), so the
master's values still win over a worker's own command line. The checks run in
``tests/integration/spawn_options_probe.py``, in a process of its own (importing Locust patches gevent).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.test_sim import REPO_ROOT

pytestmark = pytest.mark.integration


def test_spawn_options_compact_on_the_master_and_expand_on_the_worker_master_wins() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.spawn_options_probe"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    passed = [line for line in proc.stdout.splitlines() if line.startswith("passed ")]
    assert len(passed) == 4, proc.stdout
