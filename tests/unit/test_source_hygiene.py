"""Source comments say what a fault is; case ids, issue numbers and outside documents stay out of the code.

Case ids (BC-xx, NC-xx) belong in test names; issue numbers and ``../shared``
documents are not part of the repository, so a reader of the code cannot follow
them. Public upstream sources (``vLLM #21104``) are fine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("llmload", "locustfiles", "bench")

TAG = re.compile(
    r"\b(?:BC|NC)-\d{2}\b"  # a failure-case id
    r"|\bissues? #?\d+"  # a tracker issue number ("issue 3", "issue 14, P1")
    r"|CASES\.md|STYLE\.md|\.\./shared"  # documents outside the repository
    r"|\(R\d+\)|\brule R\d+\b",  # a style-rule number
    re.IGNORECASE,
)


def _source_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)


@pytest.mark.parametrize(
    "text",
    [
        "# wrong model name (BC-29)",
        "Case NC-08 (../shared/cases/CASES.md)",
        '"""Build the prompt source once (issue 3)."""',
        "# stopping (Issue 14, P1)",
        "never as 0 (R5).",
        "read at once, style rule R6;",
        "see ../shared/STYLE.md",
    ],
)
def test_tag_pattern_catches_case_ids_issue_numbers_and_outside_documents(text: str) -> None:
    assert TAG.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "(relative sleeps drift below the target rate, as reported in vLLM #21104)",
        "(vllm PR #5895)",
        "mean/P50/P90/P99 of E2E, TTFT, ITL and TPOT",
        "the P99 read lag",
        "HTTP 429 or 503",
    ],
)
def test_tag_pattern_allows_public_sources_and_percentiles(text: str) -> None:
    assert not TAG.search(text)


def test_no_case_id_issue_number_or_outside_document_in_source() -> None:
    files = _source_files()
    assert len(files) > 20, f"expected the package sources under {SOURCE_DIRS}, found {len(files)} files"
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if TAG.search(line)
    ]
    assert not found, (
        "say what the fault is in one line instead of a case id, issue number or ../shared document "
        "(case ids belong in test names):\n" + "\n".join(found)
    )
