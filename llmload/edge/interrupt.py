"""Ctrl-C (SIGINT) as an orderly stop, never an exception inside a user's read.

Python turns SIGINT into a ``KeyboardInterrupt`` raised in whatever Python
code runs when the signal is checked. Under gevent that is often a user
greenlet in the middle of a read: the exception escapes the user (gevent
prints a traceback), its request is counted nowhere, and only then is the
interrupt passed on to the main greenlet. ``Interrupter`` replaces that with
a gevent signal watcher (as Locust does for SIGTERM): the handler runs in its
own greenlet and delivers one ``KeyboardInterrupt`` to the main greenlet,
where Locust's ``main`` waits for it and starts its usual shutdown
(``quitting``: llmload stops the users, counts in-flight requests as
cancelled, collects final reports and writes the results).

A second Ctrl-C while the run is already stopping is logged and ignored, so
it cannot cut the collection of final reports short (the stop is bounded by
``--stop-timeout`` + 30 s; SIGKILL still ends the process at once). A process
that outlives its run's stop (the web UI, a worker) keeps a Ctrl-C that came
during the stop and quits once the stop is complete (``stopped``): the user
asked the process to end, and the stop was only in the way.

Before load, Locust handles neither signal: its SIGTERM handler is installed
only once a headless master has all its workers, so SIGTERM during preflight
or while a master waits for workers killed the process without results, and
Ctrl-C while it waits raised out of Locust's waiting loop (a traceback, no
results). ``guard_sigterm`` watches SIGTERM until the load starts
(``load_started``) and treats it as Ctrl-C; ``before_load``, when set, takes
either signal in a phase that has no orderly stop of its own (a master
waiting for workers) and ends the process itself.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Any

import gevent
import gevent.hub

__all__ = ["Interrupter"]

log = logging.getLogger("llmload")


class Interrupter:
    """Turns SIGINT into one ``KeyboardInterrupt`` in the main greenlet.

    Args:
        main: the greenlet Locust's ``main`` runs in (it waits for the run and
            handles ``KeyboardInterrupt`` by shutting down).
        stopping: returns True while a stop is already under way; a SIGINT
            then changes nothing.
        deliver: raises an exception in a greenlet asynchronously (default
            ``gevent.hub.kill``; tests pass a recorder).
        noted: called with the signal's name when a signal stops a running run (the results say so).

    Attributes:
        signal_name: the signal that stopped the run as a user names it
            (``"Ctrl-C"`` or ``"SIGTERM"``), None before one arrived.
        before_load: called with ``signal_name`` when a signal arrives; returns
            True when it handled it (the signal is then not forwarded). None = forward.
    """

    def __init__(
        self,
        main: Any,
        *,
        stopping: Callable[[], bool] = lambda: False,
        deliver: Callable[[Any, BaseException | type[BaseException]], None] = gevent.hub.kill,
        noted: Callable[[str], None] | None = None,
    ) -> None:
        """Create an interrupter for ``main``; nothing is installed until ``install``."""
        self._main = main
        self._stopping = stopping
        self._deliver = deliver
        self._noted = noted
        self._watcher: Any = None
        self._sigterm: Any = None
        self.forwarded = False
        self.pending: str | None = None
        self.signal_name: str | None = None
        self.before_load: Callable[[str], bool] | None = None

    def install(self) -> None:
        """Handle SIGINT from now on (call from the main thread)."""
        if self._watcher is None:
            self._watcher = gevent.signal_handler(signal.SIGINT, self.on_signal)

    def uninstall(self) -> None:
        """Give SIGINT (and SIGTERM, if guarded) back to their earlier handling."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
        self.load_started()

    def guard_sigterm(self) -> None:
        """Treat SIGTERM as Ctrl-C until ``load_started`` (Locust handles it from then on)."""
        if self._sigterm is None:
            self._sigterm = gevent.signal_handler(signal.SIGTERM, self.on_sigterm)

    def load_started(self) -> None:
        """The load starts: SIGTERM is Locust's again, and no phase before load takes a signal."""
        self.before_load = None
        watcher, self._sigterm = self._sigterm, None
        if watcher is not None:
            watcher.cancel()

    def on_sigterm(self) -> None:
        """SIGTERM arrived before the load started: the same orderly stop as Ctrl-C."""
        self.on_signal("SIGTERM")

    def on_signal(self, name: str = "Ctrl-C") -> None:
        """SIGINT (or a guarded SIGTERM) arrived: stop the run once; ignore repeats while it stops."""
        if self.forwarded:
            log.info("llmload: %s: already stopping (collecting final reports); SIGKILL ends at once", name)
            return
        if self._stopping():
            if self.pending is None:
                self.pending = name
                log.info(
                    "llmload: %s: the run is stopping (collecting final reports); the process ends once it has "
                    "stopped (SIGKILL ends at once)",
                    name,
                )
            return
        self.signal_name = name
        if self.before_load is not None and self.before_load(name):
            self.forwarded = True  # handled: repeats change nothing
            return
        log.info("llmload: %s: stopping the run", name)
        self._note(name)
        self.forward()

    def stopped(self) -> None:
        """The stop under way is complete (a process that outlives it): a Ctrl-C kept during it is delivered now."""
        name, self.pending = self.pending, None
        if name is None or self.forwarded:
            return
        self.signal_name = name
        log.info("llmload: %s (during the stop): ending the process", name)
        self.forward()

    def _note(self, name: str) -> None:
        if self._noted is not None:
            self._noted(name)

    def forward(self) -> None:
        """Deliver one ``KeyboardInterrupt`` to the main greenlet (asynchronously); later calls do nothing."""
        if self.forwarded:
            return
        self.forwarded = True
        self._deliver(self._main, KeyboardInterrupt)

    def exit(self, code: int) -> None:
        """End the process with ``code``: ``SystemExit`` in the main greenlet (asynchronously)."""
        self._deliver(self._main, SystemExit(code))
