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

**Locust's own statistics on the master's clock.** A worker's report to the
master carries Locust's request statistics (``data["stats"]``,
``data["stats_total"]``, ``data["errors"]``) stamped with the worker's wall
clock: ``start_time``, ``last_request_timestamp``, the per-second counts
``num_reqs_per_sec`` / ``num_fail_per_sec`` keyed by ``int(time.time())``, and
the errors' ``first_seen`` / ``last_seen``. The master merges them as they are,
so one worker whose clock is 300 s ahead makes Locust's tables (console, web
UI, ``--csv``, ``--json``, its HTML report) span 300 s more than the run: total
RPS divided by about 50, "current RPS" counting only that worker.
``on_master_clock`` moves those stamps onto the master's clock with the
worker's estimated offset, when it exceeds 1 s (``llmload.run.clock.align_to_master``: worker minus
master, too large by the start message's delivery time, milliseconds on a LAN)
before the report leaves. The keys are Locust 2.x's ``StatsEntryDict`` and
``StatsErrorDict``; ``tests/integration/test_locust_internals.py`` fails when they change.

**llmload's options in spawn messages.** The master sends every worker its
whole parsed options with every ``spawn`` message (``MasterRunner._send_spawn``
builds ``vars(environment.parsed_options)`` per worker): with llmload's ~100
options that is about 0.9 KB per worker per message, nearly all of it
defaults. ``compact_spawn_messages`` wraps the master's
``server.send_to_client`` so a spawn message carries llmload's options as one
entry, ``llmload_options``, holding only the values that differ from their
defaults; the worker's ``expand_sent_options`` sets every llmload option from
it at its test start (absent: the default), so the master's values win over a
worker's own command line exactly as before. Locust's own options are left as
they are. A master that sends the options flat (older llmload) still works:
without the entry the worker keeps what Locust applied.

**A check between the parse and the fork.** Locust's ``main`` parses the
command line and then, with no event in between, forks the ``--processes``
workers and binds the master's port; ``init`` fires only after both. A master
port another run holds therefore ends in a raw ``RPCError`` traceback (Locust
2.47 compares the bind error's text with a fixed string that no longer
matches it), with the forked workers dialling the other run's master.
``check_after_parse`` wraps ``parse_args`` of the one parser llmload is handed
(``init_command_line_parser``), so ``llmload.edge.refusals.check_master_port``
sees the options first. ``tests/integration/test_master_port.py`` fails when
Locust's ``main`` no longer parses with that parser before it forks.
"""

from __future__ import annotations

from locust import argument_parser

import functools
import math
from collections.abc import Callable
from typing import Any

from llmload.run.clock import CLOCK_OFFSET_WARN_S

__all__ = [
    "SENT_OPTIONS_KEY",
    "STAMPED_ENTRY_KEYS",
    "cache_default_args",
    "check_after_parse",
    "compact_spawn_messages",
    "compact_spawn_options",
    "expand_sent_options",
    "on_master_clock",
    "once_per_process",
]

SENT_OPTIONS_KEY = "llmload_options"
"""The spawn message's entry that holds llmload's options that differ from their defaults."""

STAMPED_ENTRY_KEYS = ("start_time", "last_request_timestamp", "num_reqs_per_sec", "num_fail_per_sec")
"""The wall-clock stamps of one of Locust's serialized ``StatsEntry`` dicts."""


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


def on_master_clock(data: dict[str, Any], offset_s: float | None) -> None:
    """Move the wall-clock stamps of Locust's statistics in a worker report ``data`` by ``-offset_s`` (in place).

    ``offset_s`` is the worker's wall clock minus the master's (seconds), as
    the worker estimates it: too large by the start message's delivery time.
    None, or an offset within ``CLOCK_OFFSET_WARN_S`` (1 s, the master's
    warning bound: on a busy machine that much may be delivery alone), leaves
    ``data`` as it is. Per-second keys are rounded to the nearest second.
    """
    if offset_s is None or not math.isfinite(offset_s) or abs(offset_s) <= CLOCK_OFFSET_WARN_S:
        return
    entries = [*data.get("stats", ()), data.get("stats_total")]
    for entry in (e for e in entries if isinstance(e, dict)):
        for key in ("start_time", "last_request_timestamp"):
            if isinstance(entry.get(key), int | float) and entry[key]:
                entry[key] = entry[key] - offset_s
        for key in ("num_reqs_per_sec", "num_fail_per_sec"):
            counts = entry.get(key)
            if isinstance(counts, dict):
                entry[key] = {round(int(t) - offset_s): n for t, n in counts.items()}
    errors = data.get("errors")
    for error in errors.values() if isinstance(errors, dict) else ():
        for key in ("first_seen", "last_seen"):
            if isinstance(error, dict) and isinstance(error.get(key), int | float) and error[key]:
                error[key] = error[key] - offset_s


def compact_spawn_options(parsed: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A spawn message's options with the options of ``defaults`` (name -> parsed default) folded into one entry.

    The entry (``SENT_OPTIONS_KEY``) holds those whose value differs from the
    default; every other option is kept as it is. ``parsed`` is not changed.
    """
    out = {k: v for k, v in parsed.items() if k not in defaults}
    out[SENT_OPTIONS_KEY] = {k: parsed[k] for k, d in defaults.items() if k in parsed and parsed[k] != d}
    return out


def expand_sent_options(options: object, defaults: dict[str, Any]) -> None:
    """Worker: set every option of ``defaults`` from the master's ``SENT_OPTIONS_KEY`` entry (absent: default).

    Does nothing when ``options`` has no such entry (a master that sent its options flat).
    """
    sent = getattr(options, SENT_OPTIONS_KEY, None)
    if not isinstance(sent, dict):
        return
    for name, value in defaults.items():
        setattr(options, name, sent.get(name, value))


def compact_spawn_messages(runner: Any, defaults: dict[str, Any]) -> None:
    """Master: make every ``spawn`` message ``runner`` sends carry ``compact_spawn_options`` (idempotent)."""
    server: Any = getattr(runner, "server", None)
    send = getattr(server, "send_to_client", None)
    if send is None or getattr(send, "__llmload_compact__", False):
        return

    def send_compact(msg: Any) -> None:
        data = getattr(msg, "data", None)
        if getattr(msg, "type", None) == "spawn" and isinstance(data, dict):
            parsed = data.get("parsed_options")
            if isinstance(parsed, dict):
                msg.data = {**data, "parsed_options": compact_spawn_options(parsed, defaults)}
        send(msg)

    send_compact.__llmload_compact__ = True  # type: ignore[attr-defined]
    server.send_to_client = send_compact


def check_after_parse(parser: Any, check: Callable[[Any, Any], None]) -> None:
    """Make ``parser.parse_args`` call ``check(parser, options)`` on the options it parsed (idempotent).

    ``check`` may change the options (Locust's ``main`` acts on them next: fork, bind, runner).
    """
    parse: Any = getattr(parser, "parse_args", None)
    if parse is None or getattr(parse, "__llmload_checked__", False):
        return

    @functools.wraps(parse)
    def parse_and_check(*args: Any, **kwargs: Any) -> Any:
        options = parse(*args, **kwargs)
        check(parser, options)
        return options

    parse_and_check.__llmload_checked__ = True  # type: ignore[attr-defined]
    parser.parse_args = parse_and_check
