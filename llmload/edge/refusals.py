"""Runs refused before load: the values they were given, and a master port already taken.

``given_values`` is what a blocked run's results record of the options that
blocked it (``run.refused_options``): each value as the user gave it, not the
default that replaced it.

``check_master_port`` runs right after Locust parses the command line
(``llmload.edge.locust_internals.check_after_parse``), before anything binds
or forks. Locust binds the master's port (``--master-bind-port``, default
5557) only after ``--processes`` has forked the workers, and a port another
run holds ends in a raw ``RPCError`` traceback, exit status 1, while the
forked workers dial the other run's master. A launch that would bind a port
already in use is turned into a single-process one, so nothing forks or binds
and llmload's ``init`` refuses it as it does a bad option (one line, the
blocked results, exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from llmload.settings.credentials import public_url
from llmload.settings.options import OPTIONS

__all__ = ["REFUSAL_KEY", "LaunchRefusal", "check_master_port", "given_values", "launch_refusal"]

REFUSAL_KEY = "llmload_launch_refusal"
"""The parsed options' attribute that carries a ``LaunchRefusal`` from the parse to ``init``."""

_LOCUST_FLAGS = {
    "-H": "host",
    "-u": "num_users",
    "-r": "spawn_rate",
    "--processes": "processes",
    "--master-port": "master_port",
    "--master-bind-host": "master_bind_host",
    "--master-bind-port": "master_bind_port",
    "--expect-workers": "expect_workers",
}
"""Locust's own options that llmload refuses values of: flag → attribute on the parsed options."""

_SPECS = {spec.flag: spec for spec in OPTIONS}
_FREE_PORTS_TRIED = 50


def given_values(options: object, flags: Iterable[str]) -> dict[str, str]:
    """Each of ``flags`` with its value as the user gave it (text), for a blocked run's results.

    Secret options (the API key file, headers) read ``***``; ``-H`` is shown without credentials.
    A flag neither llmload's nor one of Locust's known ones, or unset, is left out.
    """
    given: dict[str, str] = {}
    for flag in flags:
        spec = _SPECS.get(flag)
        dest = spec.dest if spec is not None else _LOCUST_FLAGS.get(flag)
        raw = None if dest is None else getattr(options, dest, None)
        if raw is None or flag in given:
            continue
        text = "\n".join(str(item) for item in raw) if isinstance(raw, list | tuple) else str(raw)
        if spec is not None and spec.is_secret and text:
            text = "***"
        elif flag == "-H":
            text = public_url(text)
        given[flag] = text
    return given


@dataclass(frozen=True, slots=True)
class LaunchRefusal:
    """Why a launch is refused before it forks or binds, and the values that refused it (flag → text)."""

    message: str
    given: dict[str, str] = field(default_factory=dict)


def launch_refusal(options: object) -> LaunchRefusal | None:
    """The refusal ``check_master_port`` left on the parsed options, or None."""
    refusal = getattr(options, REFUSAL_KEY, None)
    return refusal if isinstance(refusal, LaunchRefusal) else None


def check_master_port(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    """After the parse: a ``--processes`` or ``--master`` launch whose master port is taken is refused.

    With ``--processes``, the forked workers dial ``--master-port``; when
    ``--master-bind-port`` is left at its default the master binds
    ``--master-port`` too, so ``--master-port P`` alone moves the whole run to
    port P. A port already in use on the bind address (checked with the
    ``SO_REUSEADDR`` bind Locust's zmq does, so a previous run's closing
    connections do not count) leaves a ``LaunchRefusal`` on ``options`` and
    makes the launch a single-process one (nothing forks, nothing binds the
    port); ``init`` then refuses it with the message.
    """
    forks = bool(getattr(options, "processes", None)) and not getattr(options, "worker", False)
    if not forks and not getattr(options, "master", False):
        return
    bind, dial = getattr(options, "master_bind_port", None), getattr(options, "master_port", None)
    default_bind = parser.get_default("master_bind_port")
    bind_given = bind != default_bind  # --master-bind-port set: the fix names it too
    if forks and isinstance(dial, int) and not bind_given and dial != bind:
        options.master_bind_port = bind = dial  # the workers dial --master-port: the master listens there
    host = str(getattr(options, "master_bind_host", "*") or "*")
    if not isinstance(bind, int) or bind <= 0 or not _in_use(host, bind):
        return
    free = next((p for p in range(bind + 1, min(bind + _FREE_PORTS_TRIED, 65535) + 1) if not _in_use(host, p)), None)
    where = f"{host}:{bind}" if host not in ("*", "") else str(bind)
    if forks:
        processes = getattr(options, "processes", None)
        mode = f"--processes {processes}"
        fix = f"--master-bind-port {free} --master-port {free}" if bind_given else f"--master-port {free}"
        given = given_values(
            options, ("--processes", "--master-port", *(("--master-bind-port",) if bind_given else ()))
        )
    else:
        mode = "--master"
        fix = f"--master-bind-port {free} (and --master-port {free} on the workers)"
        given = given_values(options, ("--master-bind-port",))
    suggestion = f"pass {fix}" if free is not None else "pass --master-port with a free port"
    message = (
        f"{mode}: the master port {where} is already in use (another run's master, or an old one still running?); "
        f"{suggestion}, or stop the other run"
    )
    setattr(options, REFUSAL_KEY, LaunchRefusal(message, given))
    options.processes = None  # nothing forks: the workers would dial the other run's master
    options.master = False  # nothing binds: Locust's own bind failure is a traceback


def _in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` as a listening TCP socket fails with "address in use" (``*``: every address)."""
    address = "0.0.0.0" if host in ("*", "") else host
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False  # a name that does not resolve: Locust reports it
    family, kind, proto, _name, sockaddr = infos[0]
    with contextlib.closing(socket.socket(family, kind, proto)) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
