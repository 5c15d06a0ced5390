"""Every case id a test is named after (``test_nc18_…``) resolves to an entry of docs/cases.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "docs" / "cases.md"
# failure cases BC-nn and NC-nn; checks of an earlier release Bn (web UI) and Pn (stop paths, outputs, docs)
_TEST_ID = re.compile(r"^\s*(?:async\s+)?def test_((?:bc|nc)\d{2}|[bp]\d)_", re.MULTILINE)
_ENTRY = re.compile(r"^\| ((?:BC|NC)-\d{2}|[BP]\d) \| (.+?) \| (.+?) \| (.+) \|$", re.MULTILINE)


def _doc_id(test_id: str) -> str:
    prefix, number = re.fullmatch(r"([a-z]+)(\d+)", test_id).groups()  # type: ignore[union-attr]
    return f"{prefix.upper()}-{number}" if len(prefix) == 2 else f"{prefix.upper()}{number}"


def _ids_in_tests() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for test_id in _TEST_ID.findall(path.read_text(encoding="utf-8")):
            found.setdefault(_doc_id(test_id), []).append(str(path.relative_to(ROOT)))
    return found


def _entries() -> dict[str, tuple[str, str, str]]:
    entries: dict[str, tuple[str, str, str]] = {}
    for match in _ENTRY.finditer(CASES.read_text(encoding="utf-8")):
        assert match.group(1) not in entries, f"docs/cases.md lists {match.group(1)} twice"
        entries[match.group(1)] = (match.group(2), match.group(3), match.group(4))
    return entries


def test_every_case_id_in_a_test_name_has_an_entry_in_docs_cases():
    ids, entries = _ids_in_tests(), _entries()
    assert len(ids) > 40  # the pattern still finds the tests
    missing = {case: sorted(set(files)) for case, files in ids.items() if case not in entries}
    assert missing == {}, f"test names use case ids that docs/cases.md does not explain: {missing}"


def test_every_entry_says_what_goes_wrong_and_names_tests_that_exist():
    ids = _ids_in_tests()
    defined = set(re.findall(r"def (test_\w+)", "".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))))
    for case, (what, how, tests) in _entries().items():
        assert what.strip(), case
        assert how.strip(), case
        assert case in ids, f"docs/cases.md lists {case}, but no test is named after it"
        named = re.findall(r"`(test_\w+)`", tests)
        assert named, f"{case}: the entry names no test"
        for name in named:
            assert name in defined, f"{case}: docs/cases.md names {name}, which no longer exists"
            assert _doc_id(name.split("_")[1]) == case, f"{case}: {name} is another case's test"


def test_doc_id_maps_test_names_to_entries():
    assert [_doc_id(i) for i in ("bc01", "nc28", "b6", "p4")] == ["BC-01", "NC-28", "B6", "P4"]
