"""Used by tests/edge/test_docs_commands.py (in the edge process: importing Locust patches gevent).

Reads a JSON list of ``locust`` argument lists on stdin; parses each with Locust's parser plus
llmload's options (as ``locust -f`` would) and builds the ``RunConfig``; prints a JSON list with,
per command, ``null`` when both succeeded or the one-line reason it did not.
"""

from __future__ import annotations

from locust import argument_parser

import contextlib
import io
import json
import sys

from llmload.edge import hooks
from llmload.errors import ConfigError
from llmload.settings.config import RunConfig


def check(args: list[str]) -> str | None:
    """None when ``locust ARGS`` parses and its llmload values are valid, else why not."""
    parser = argument_parser.get_parser(default_config_files=[])
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            options = parser.parse_args(args)
    except SystemExit:
        return " ".join(line for line in said.getvalue().splitlines() if "error" in line or "Did you mean" in line)
    try:
        RunConfig.from_options(options)
    except ConfigError as error:
        return str(error)
    return None


def main() -> None:
    hooks.install()
    print(json.dumps([check(args) for args in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
