"""The docs' ``locust`` commands parse with Locust's parser plus llmload's options, here.

Each command line is checked by ``tests/integration/docs_command_probe.check`` (Locust's parser
with llmload's options, then the ``RunConfig``) in this process, where Locust is imported anyway;
the other docs-command checks are in ``tests/unit/test_docs_commands.py``.
"""

from __future__ import annotations

from llmload.edge import hooks
from tests.integration.docs_command_probe import check
from tests.unit.test_docs_commands import _locust_args, _words, docs_commands


def _probe(argvs: list[list[str]]) -> list[str | None]:
    """Per command line: None when it parses and its llmload values are valid, else why not."""
    hooks.install()  # llmload's options on Locust's parser, as a locustfile's import does
    return [check(args) for args in argvs]


def test_docs_locust_commands_parse_with_llmloads_options_and_valid_values():
    commands = [(page, c) for page, c in docs_commands() if _locust_args(c) is not None]
    assert any(_words(c)[:2] == ["llmload", "sweep"] for _, c in commands)
    argvs = [_locust_args(c) for _, c in commands]
    verdicts = _probe(argvs)
    refused = {f"{page}: {command}": why for (page, command), why in zip(commands, verdicts, strict=True) if why}
    assert refused == {}


def test_the_probe_refuses_a_misspelt_option_and_a_bad_value():
    argvs = [["-f", "locustfiles/chat.py", "--max-tokenz", "5"], ["-f", "locustfiles/chat.py", "--max-tokens", "abc"]]
    misspelt, bad = _probe(argvs)
    assert "--max-tokenz" in misspelt
    assert "--max-tokens" in bad
    assert "abc" in bad
