"""The one place llmload changes how Locust itself runs (a reach into its internals, with the reason).

**Spawn messages on a worker.** Locust's ``WorkerRunner.handle_message``
filters the options that arrive with every ``spawn`` message with::

    {k: v for k, v in job["parsed_options"].items() if k not in argument_parser.default_args_dict() ...}

The right side of ``not in`` is evaluated once per option, and each call of
``default_args_dict()`` builds and parses Locust's whole argument parser. With
llmload's options a spawn message carries about 107 of them: 107 parser builds,
measured at 1.1 s of CPU on a shared 2-core machine and 2.1 s under coverage
tracing, all in one synchronous turn of the worker's gevent loop. During a
ramp-up the master sends each worker a spawn message about once a second, so a
loaded worker spends the whole ramp in that filter: its heartbeat greenlet never
runs, the master marks it missing after three silent seconds ("The last worker
went missing, stopping test"), its users are not started, and any request it
has in flight is read (and timed) seconds late.

``cache_default_args`` makes ``default_args_dict`` build the parser once per
process and hand out copies. Its result can not change within a process: it is
Locust's own options (not the locustfile's) parsed from no arguments and this
process's environment. ``tests/unit/test_locust_internals.py`` fails if Locust
no longer calls ``argument_parser.default_args_dict`` from the worker's message
handler (then this can go) or renames it; Locust is pinned to 2.x in
``pyproject.toml``.
"""

from __future__ import annotations

from locust import argument_parser

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["cache_default_args", "once_per_process"]


def once_per_process(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``build`` called once; every call returns a fresh shallow copy of its first result.

    Copies, so a caller that changes the dict it got changes no other caller's.
    """
    cached: dict[str, Any] | None = None

    @functools.wraps(build)
    def defaults() -> dict[str, Any]:
        nonlocal cached
        if cached is None:
            cached = build()
        return dict(cached)

    defaults.__wrapped_once__ = True  # type: ignore[attr-defined]
    return defaults


def cache_default_args() -> None:
    """Make ``locust.argument_parser.default_args_dict`` build Locust's parser once in this process (idempotent)."""
    current = argument_parser.default_args_dict
    if getattr(current, "__wrapped_once__", False):
        return
    argument_parser.default_args_dict = once_per_process(current)
