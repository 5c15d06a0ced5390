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
``--stop-timeout`` + 30 s; SIGKILL still ends the process at once).
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
    """

    def __init__(
        self,
        main: Any,
        *,
        stopping: Callable[[], bool] = lambda: False,
        deliver: Callable[[Any, type[BaseException]], None] = gevent.hub.kill,
    ) -> None:
        """Create an interrupter for ``main``; nothing is installed until ``install``."""
        self._main = main
        self._stopping = stopping
        self._deliver = deliver
        self._watcher: Any = None
        self.forwarded = False

    def install(self) -> None:
        """Handle SIGINT from now on (call from the main thread)."""
        if self._watcher is None:
            self._watcher = gevent.signal_handler(signal.SIGINT, self.on_signal)

    def uninstall(self) -> None:
        """Give SIGINT back to Python's default handling."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()

    def on_signal(self) -> None:
        """SIGINT arrived: stop the run once; ignore repeats while it stops."""
        if self.forwarded or self._stopping():
            log.info("llmload: Ctrl-C: already stopping (collecting final reports); SIGKILL ends at once")
            return
        log.info("llmload: Ctrl-C: stopping the run")
        self.forward()

    def forward(self) -> None:
        """Deliver one ``KeyboardInterrupt`` to the main greenlet (asynchronously); later calls do nothing."""
        if self.forwarded:
            return
        self.forwarded = True
        self._deliver(self._main, KeyboardInterrupt)
