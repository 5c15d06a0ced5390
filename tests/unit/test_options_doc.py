"""docs/reference/options.md is the page the option table generates (llmload.settings.options_doc)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from llmload.settings import options_doc
from llmload.settings.options import GROUPS, OPTIONS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / options_doc.PAGE


def test_committed_options_reference_is_the_generated_one():
    assert PAGE.read_text(encoding="utf-8") == options_doc.markdown(), (
        "docs/reference/options.md is stale: run .venv/bin/python -m llmload.settings.options_doc --write"
    )


def test_reference_has_one_row_per_option_under_its_group_with_help_default_and_env():
    text = options_doc.markdown()
    headings = [text.index(f"\n## {group}\n") for group in GROUPS]
    assert headings == sorted(headings)
    for spec in OPTIONS:
        name = spec.flag if spec.is_flag else f"{spec.flag} {spec.metavar}"
        rows = [line for line in text.splitlines() if line.startswith(f"| `{name.replace('|', chr(92) + '|')}` |")]
        assert len(rows) == 1, spec.flag
        at = text.index(rows[0])
        assert max(h for h in headings if h < at) == headings[GROUPS.index(spec.group)], spec.flag
        assert rows[0].endswith(f" | `{spec.env}` |")
        assert spec.help.split()[0] in rows[0]
        assert spec.label in rows[0]


def test_a_changed_option_makes_the_committed_page_stale(monkeypatch):
    spec = next(s for s in OPTIONS if s.flag == "--max-tokens")
    changed = tuple(dataclasses.replace(s, help=s.help + " Changed.") if s is spec else s for s in OPTIONS)
    monkeypatch.setattr(options_doc, "OPTIONS", changed)
    assert options_doc.markdown() != PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize(("page", "status"), [("current", 0), ("stale", 1)])
def test_check_mode_exits_1_on_a_stale_page_and_names_the_fix(tmp_path, page, status):
    target = tmp_path / options_doc.PAGE
    target.parent.mkdir(parents=True)
    target.write_text(options_doc.markdown() + ("" if page == "current" else "edited by hand\n"), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "llmload.settings.options_doc", "--check"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert out.returncode == status, out.stderr
    if status:
        assert "python -m llmload.settings.options_doc --write" in out.stderr
