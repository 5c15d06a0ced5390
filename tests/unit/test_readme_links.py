"""The READMEs outside docs/ (which `mkdocs build --strict` does not read) link only to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _slugs(page: Path) -> set[str]:
    """The anchors MkDocs gives the page's headings (Python-Markdown's toc slugify)."""
    slugs = set()
    for heading in re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE):
        text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
        slugs.add(re.sub(r"[-\s]+", "-", text))
    return slugs


@pytest.mark.parametrize("readme", ["README.md", "k8s/README.md"])
def test_relative_links_of_a_readme_reach_existing_pages_and_anchors(readme):
    page = ROOT / readme
    links = re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
    relative = [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert relative, f"{readme} links nothing relative"
    for link in relative:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve()
        assert target.is_file(), f"{readme}: {link} is not a file"
        if anchor:
            assert anchor in _slugs(target), f"{readme}: {link}: no such heading"


def test_readme_links_every_docs_section():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("getting-started", "concepts/metrics", "reference/options", "reference/results", "cases"):
        assert f"(docs/{page}.md)" in text, page
