"""The locustfiles the package ships are those of the repository's locustfiles/, and `llmload locustfile` knows each."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from llmload import cli
from llmload.locustfiles import NAMES, path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _code(file: Path) -> str:
    """The module's code without its docstring (which names the way to run it)."""
    tree = ast.parse(file.read_text())
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    return ast.dump(tree)


@pytest.mark.parametrize("name", NAMES)
def test_every_packaged_locustfile_is_the_repositorys_and_printed_by_llmload_locustfile(name, capsys):
    shipped = path(name)
    assert shipped.is_file()
    assert _code(shipped) == _code(REPO_ROOT / "locustfiles" / f"{name}.py")
    assert cli.main(["locustfile", name]) == 0
    assert capsys.readouterr().out.strip() == str(shipped)


def test_every_repository_locustfile_is_shipped():
    """A locustfile the README runs from the clone is runnable from a pip install too (mixed.py was not)."""
    assert sorted(p.stem for p in (REPO_ROOT / "locustfiles").glob("*.py")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_starter_copy_docstring_names_the_command_that_runs_the_copy(name, tmp_path, capsys):
    """The copy said `locust -f $(llmload locustfile NAME)`, which runs the installed file, not the edited copy."""
    copy = tmp_path / "my test.py"
    assert cli.main(["locustfile", name, "-o", str(copy)]) == 0
    docstring = ast.get_docstring(ast.parse(copy.read_text()))
    assert docstring is not None
    command = f"locust -f {shlex.quote(str(copy))} -H http://HOST:PORT"
    assert command in docstring
    assert "$(llmload locustfile" not in docstring
    assert _code(copy) == _code(path(name))  # only the docstring differs
    assert f"run it with: locust -f {shlex.quote(str(copy))} -H" in capsys.readouterr().out
