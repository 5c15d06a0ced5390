"""Every command the README shows is exercised: run here, or by the test or CI step named for it.

The README's first real run (300 requests at concurrency 1024, max_tokens 128), the installed
locustfile's run and the three-line locustfile of one's own are run as written against the
simulator (only the host, the results path and the Prometheus port differ); the summary lines
the README prints must be what the run prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_sim import REPO_ROOT, start_sim, stop_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

README = REPO_ROOT / "README.md"
README_HOST = "http://127.0.0.1:8000"

# command (as the README shows it, continuation lines joined) → where it is exercised
EXERCISED_BY = {
    "make demo": "tests/integration/test_pip_install.py (llmload demo --quick, the same job)",
    "make test": ".ci/run (make check = make lint, then make test)",
    "pip install .": "tests/integration/test_pip_install.py (a wheel of this checkout, installed)",
    "llmload demo": "tests/integration/test_pip_install.py",
    "locust -f locustfiles/completions.py --headless -H http://127.0.0.1:8000 -u 1024 -r 1024 --num-requests 300 "
    '--max-tokens 128 --prompt "Explain TCP slow start." --results-json results/run.json': "this file",
    "locust -f $(llmload locustfile chat) --headless -H http://127.0.0.1:8000 -u 64 -r 64 --num-requests 500": (
        "this file"
    ),
}


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def readme_commands() -> list[str]:
    """The commands of the README's ``bash`` blocks: comments dropped, continuation lines joined."""
    commands = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            command = " ".join(line.split("  #")[0].split())
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def test_every_readme_command_is_exercised_somewhere():
    commands = readme_commands()
    assert commands, "no ```bash block found in README.md"
    assert sorted(commands) == sorted(EXERCISED_BY), "a README command without a test, or a stale entry here"
    for where in EXERCISED_BY.values():
        path = where.split(" ")[0]
        assert path == "this" or (REPO_ROOT / path).is_file(), where


@pytest.fixture(scope="module")
def sim_url():
    url, proc = start_sim("--decode-step-ms", "4")
    yield url
    stop_sim(proc)


def _run_as_written(command: str, sim_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = command.replace(README_HOST, sim_url).replace("results/run.json", str(tmp_path / "run.json"))
    bin_dir = str(Path(sys.executable).parent)  # locust and llmload of this environment
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    return subprocess.run(
        ["bash", "-c", f"{command} --prometheus-port 0"],
        capture_output=True, text=True, timeout=240, cwd=REPO_ROOT, env=env, check=False,
    )  # fmt: skip


def test_readme_first_real_run_prints_the_summary_the_readme_shows(sim_url, tmp_path):
    (command,) = [c for c in readme_commands() if "--num-requests 300" in c]
    proc = _run_as_written(command, sim_url, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run.json").read_text())
    assert results["requests"]["succeeded"] == 300
    assert results["run"]["users"] == 1024
    assert "Successful requests:                    300/300 (0.0% failed)" in proc.stdout
    (shown,) = [b for b in _blocks("text") if "llmload result" in b]
    for line in shown.splitlines():
        if line.startswith("WARNING"):
            continue  # the read-lag warning comes only from a client short of CPU
        label = line.split(":")[0] if ":" in line else line
        if label.startswith(("PASSED", "--- Server")):
            label = label.split(" (")[0]
        assert label in proc.stdout, f"the README shows {line!r}; the run printed no {label!r}"


def test_readme_installed_locustfile_command_runs_its_500_requests(sim_url, tmp_path):
    (command,) = [c for c in readme_commands() if "$(llmload locustfile chat)" in c]
    proc = _run_as_written(f"{command} --results-json {tmp_path / 'run.json'}", sim_url, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run.json").read_text())
    assert results["requests"]["succeeded"] == 500
    assert results["run"]["user_classes"] == ["ChatUser"]


def test_readme_three_line_locustfile_runs(sim_url, tmp_path):
    (code,) = _blocks("python")
    statements = [line for line in code.splitlines() if line.strip()]
    assert len(statements) == 3
    mine = tmp_path / "mytest.py"
    mine.write_text(code)
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(mine), "--headless", "-H", sim_url, "-u", "4", "-r", "4",
         "--num-requests", "8", "--results-json", str(tmp_path / "mine.json"), "--prometheus-port", "0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "mine.json").read_text())
    assert results["requests"]["succeeded"] == 8
    assert results["run"]["user_classes"] == ["ChatUser"]
