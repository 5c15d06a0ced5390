"""docs/architecture.md says what pyproject.toml enforces: the layers, and a row for every package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"


def _contracts() -> list[dict[str, object]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_architecture_page_lists_the_layers_contract_line_for_line():
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    block = re.search(r"```text\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert block, "docs/architecture.md has no ```text block of the layers"
    assert [" ".join(line.split()) for line in block.group(1).strip().splitlines()] == layers


def test_architecture_page_has_a_row_for_every_subpackage():
    text = PAGE.read_text(encoding="utf-8")
    packages = sorted(p.parent.name for p in (ROOT / "llmload").glob("*/__init__.py"))
    assert packages, "no subpackage found"
    missing = [name for name in packages if f"| `{name}/` |" not in text]
    assert missing == [], f"docs/architecture.md has no row for {missing}"


def test_architecture_page_names_both_forbidden_contracts():
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    for contract in _contracts():
        if contract["type"] == "forbidden":
            assert f"**{contract['name']}**" in text, contract["name"]
