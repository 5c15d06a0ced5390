"""Issue 24: `pip install` (a wheel) then `llmload demo` from any directory runs the main job.

The wheel is built from this checkout and installed with --no-deps into a fresh virtual
environment in a temporary directory; its dependencies come from this project's environment
(one path line in a .pth file, so nothing is downloaded and this checkout's editable install of
llmload stays out of it). The demo runs in its short form (`--quick`) from another directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.integration.test_sim import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    said = f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}\n{said}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the new environment's bin directory, the environment variables to run it with)."""
    root = tmp_path_factory.mktemp("pip")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "COVERAGE", "VIRTUAL_ENV"))}
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO_ROOT)],
         cwd=root, env=env, timeout_s=240)  # fmt: skip
    (wheel,) = wheels.glob("llmload-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root, env=env, timeout_s=120)
    site = Path(
        subprocess.check_output(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    (site / "llmload_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")  # locust, gevent, ...
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "-q",
          "--no-index", str(wheel)], cwd=root, env=env, timeout_s=240)  # fmt: skip
    return venv / "bin", env


def test_issue24_installed_wheel_ships_the_locustfiles(installed, tmp_path):
    bin_dir, env = installed
    printed = _run([str(bin_dir / "llmload"), "locustfile", "chat"], cwd=tmp_path, env=env, timeout_s=60).stdout
    path = Path(printed.strip())
    assert path.is_file()
    assert str(bin_dir.parent) in str(path)  # the wheel's own copy, not this checkout's
    assert "ChatUser" in path.read_text()
    _run([str(bin_dir / "llmload"), "locustfile", "completions", "-o", "mine.py"], cwd=tmp_path, env=env, timeout_s=60)
    assert "CompletionUser" in (tmp_path / "mine.py").read_text()


def test_issue24_pip_install_then_llmload_demo_quick_from_another_directory(installed, tmp_path):
    bin_dir, env = installed
    full = tmp_path / "results" / "demo-chat.json"  # a full demo's results, from an earlier run
    full.parent.mkdir()
    full.write_text('{"full": true}')
    proc = _run([str(bin_dir / "llmload"), "demo", "--quick"], cwd=tmp_path, env=env, timeout_s=300)
    # --quick used to write over the full demo's results: it has files of its own, and says where they go
    assert full.read_text() == '{"full": true}'
    assert "== results go to results/demo-quick-chat.json and results/demo-quick-completions.json" in proc.stdout
    for name in ("demo-quick-chat.json", "demo-quick-completions.json"):
        results = json.loads((tmp_path / "results" / name).read_text())
        assert results["requests"]["succeeded"] > 0, proc.stdout[-3000:]
        assert results["requests"]["failed"] == 0, proc.stdout[-3000:]
    completions = json.loads((tmp_path / "results" / "demo-quick-completions.json").read_text())
    assert completions["requests"]["succeeded"] == 64  # --quick: exactly 64 CompletionUser requests
