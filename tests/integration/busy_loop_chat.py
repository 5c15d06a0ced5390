"""A chat locustfile whose process is too busy to read replies on time (the web UI's saturation test).

Once a run starts, a greenlet holds the gevent loop in a busy wait for 30 ms of every 40 ms, as
a load generator with too many users per core does: replies wait in the kernel and the client's
read lag (``client.read_lag_s``) rises far above its 2 ms limit. Bounded: it stops with the run.
"""

from __future__ import annotations

from locust import events

import time
from typing import Any

import gevent

from llmload.edge import hooks
from llmload.edge.users import ChatUser

hooks.install()

__all__ = ["ChatUser"]

_HOLD_S = 0.03
_RUNNING = {"on": False}


def _hog() -> None:
    deadline = time.monotonic() + 120.0
    while _RUNNING["on"] and time.monotonic() < deadline:
        until = time.perf_counter() + _HOLD_S
        while time.perf_counter() < until:
            pass
        gevent.sleep(0.01)


@events.test_start.add_listener
def _start(**_kw: Any) -> None:
    _RUNNING["on"] = True
    gevent.spawn(_hog)


@events.test_stop.add_listener
def _stop(**_kw: Any) -> None:
    _RUNNING["on"] = False
