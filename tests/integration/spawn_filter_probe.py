"""Run by test_locust_internals.py in a process of its own (importing Locust monkey-patches the standard library).

Prints one JSON line: how many times Locust's argument parser was built while a worker filtered
the options of one spawn message, before and after ``hooks.install()``, and whether the filter's
result stayed the same.
"""

from __future__ import annotations

from locust import argument_parser
from locust.runners import WorkerRunner

import inspect
import json

from llmload.edge import hooks


def _filter(options: dict[str, object]) -> tuple[dict[str, object], int]:
    """Locust's spawn-message filter (locust.runners.WorkerRunner.handle_message), counting parser builds."""
    builds = 0
    setup = argument_parser.setup_parser_arguments

    def counting(parser: object) -> None:
        nonlocal builds
        builds += 1
        setup(parser)

    argument_parser.setup_parser_arguments = counting
    try:
        kept = {k: v for k, v in options.items() if k not in argument_parser.default_args_dict()}
    finally:
        argument_parser.setup_parser_arguments = setup
    return kept, builds


def main() -> None:
    original = argument_parser.default_args_dict
    hooks.install()  # llmload's options on Locust's parser, and the cache
    options = vars(argument_parser.parse_options(args=["-f", "locustfiles/chat.py", "-H", "http://127.0.0.1:1"]))
    cached = argument_parser.default_args_dict
    argument_parser.default_args_dict = original
    kept_before, builds_before = _filter(options)
    argument_parser.default_args_dict = cached
    kept_after, builds_after = _filter(options)
    source = inspect.getsource(WorkerRunner.handle_message)
    print(
        json.dumps(
            {
                "options": len(options),
                "builds_before": builds_before,
                "builds_after": builds_after,
                "same_result": kept_before == kept_after,
                "llmload_options_kept": "max_tokens" in kept_after and "host" not in kept_after,
                "locust_filters_per_option": "if k not in argument_parser.default_args_dict()" in source,
            }
        )
    )


if __name__ == "__main__":
    main()
