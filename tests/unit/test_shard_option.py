"""`pytest --shard K/N` (tests/conftest.py): N processes share a pass and together run each test exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# Two small files whose tests need nothing but the interpreter.
_FILES = ["tests/unit/test_constraints.py", "tests/unit/test_shard_option.py"]


def _collect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False,
    )  # fmt: skip


def _ids(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_shards_split_the_collected_tests_into_disjoint_parts_that_cover_them_all():
    everything = _ids(_collect(*_FILES))
    assert len(everything) >= 4
    shards = [_ids(_collect(*_FILES, "--shard", f"{k}/3")) for k in range(3)]
    assert sorted(test for shard in shards for test in shard) == sorted(everything)  # each test once, none lost
    assert all(shards), "a shard without tests: the split is not round robin"
    assert shards[0] == everything[0::3]


@pytest.mark.parametrize("value", ["3/3", "-1/2", "a/b"])
def test_a_shard_outside_0_to_n_minus_1_is_refused_with_the_expected_form(value):
    out = _collect(*_FILES, f"--shard={value}")
    assert out.returncode != 0
    assert f"--shard {value!r}: expected K/N with 0 <= K < N, e.g. --shard 0/2" in out.stderr + out.stdout
