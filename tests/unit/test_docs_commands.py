"""Every command the docs show is exercised: parsed and validated here, or run by the test named for it.

``locust`` commands of docs/ are parsed in one process by Locust's parser with llmload's options
and turned into a ``RunConfig`` (tests/integration/docs_command_probe.py): an unknown or misspelt
option, or a value llmload refuses, fails here. ``llmload sim`` commands are parsed by the
simulator's parser. Other commands name the test that runs them. README.md's commands are run
as written by tests/integration/test_readme_commands.py.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from llmload.sim.config import build_parser
from llmload.sweep import parse_sweep

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# commands that are neither `locust` nor `llmload sim`, by their first words → the test that runs them
_PIP = "tests/integration/test_pip_install.py::test_issue24_"
RUN_BY = {
    "make demo": _PIP + "pip_install_then_llmload_demo_quick_from_another_directory",
    "make test": ".ci/run",
    "pip install .": _PIP + "installed_wheel_ships_the_locustfiles",
    "llmload demo": _PIP + "pip_install_then_llmload_demo_quick_from_another_directory",
    "llmload report sweep.json": (
        "tests/unit/test_chart_rows.py::test_issue24_report_cli_writes_the_sweep_view_of_a_sweep_file"
    ),
    "llmload report": "tests/unit/test_html_report.py::test_report_cli_writes_a_report_and_a_comparison",
}


def docs_commands() -> list[tuple[str, str]]:
    """(page, command) for every command of a ``bash`` block in docs/: comments dropped, lines joined."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"^\s*```bash\n(.*?)^\s*```", text, re.MULTILINE | re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                command = " ".join(line.split("  #")[0].split())
                if command and not command.startswith("#"):
                    found.append((str(page.relative_to(ROOT)), command))
    return found


def _words(command: str) -> list[str]:
    """The command's words without leading VAR=value settings and a trailing `&`."""
    command = re.sub(r"\$\(llmload locustfile (\w+)\)", r"locustfiles/\1.py", command)
    words = shlex.split(command.removesuffix("&"))
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words.pop(0)
    return words


def test_docs_show_commands_and_each_kind_is_known():
    commands = docs_commands()
    assert len(commands) > 20
    for page, command in commands:
        words = _words(command)
        known = (
            words[0] == "locust"
            or words[:2] in (["llmload", "sim"], ["llmload", "sweep"])
            or any(command.startswith(prefix) for prefix in RUN_BY)
        )
        assert known, f"{page}: `{command}` is exercised by no test; add it to RUN_BY or make it a locust command"


def _locust_args(command: str) -> list[str] | None:
    """The arguments Locust gets from a `locust` command, or from an `llmload sweep` one after `--`."""
    words = _words(command)
    if words[0] == "locust":
        return words[1:]
    if words[:2] == ["llmload", "sweep"]:
        parse_sweep(words[words.index("--sweep") + 1])  # raises ConfigError on a bad step list
        return words[words.index("--") + 1 :]
    return None


def test_docs_sim_commands_parse_with_the_simulators_options():
    for page, command in docs_commands():
        words = _words(command)
        if words[:2] == ["llmload", "sim"]:
            build_parser().parse_args(words[2:])  # exits (SystemExit) on an unknown option or bad value
            assert page


def test_every_test_named_in_run_by_exists():
    for where in RUN_BY.values():
        path, _, name = where.partition("::")
        assert (ROOT / path).is_file(), where
        if name:
            assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), where
