"""constraints.txt, the project's lock: every declared dependency pinned, each pin inside pyproject's range."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt line {line!r} is not NAME==VERSION; regenerate it with `make lock`"
        pins[canonicalize_name(name)] = version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]]


def test_every_declared_dependency_is_pinned_within_its_pyproject_range():
    pins = _pins()
    assert pins, "constraints.txt pins nothing"
    outside = []
    for requirement in _declared():
        version = pins.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement.name} is declared in pyproject.toml but not pinned: `make lock`"
        if not requirement.specifier.contains(version, prereleases=True):
            outside.append(f"{requirement.name}=={version} (pyproject: {requirement.specifier})")
    assert outside == [], f"pins outside pyproject's ranges: {outside}; `make lock`"


def test_the_image_and_make_install_install_with_the_constraints():
    dockerfile = (ROOT / "k8s" / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in dockerfile
    assert "COPY pyproject.toml README.md constraints.txt" in dockerfile
    assert "-c constraints.txt -e '.[dev]'" in makefile
    assert not any(name.startswith("llmload") for name in _pins()), "llmload itself is never pinned"
