"""A user stopped in the middle of a request (P1): a cancellation, never a success or a failure.

llmload's ``ChatUser`` in a Locust environment of this process, against a scripted server that
sends one token and then holds the stream open; the user's greenlet is killed the way Locust
stops users (``GreenletExit``) or the way Ctrl-C reaches it (``KeyboardInterrupt``).
"""

from __future__ import annotations

from locust.env import Environment

from typing import Any

import gevent
import gevent.lock
import pytest
from gevent.pool import Group

from llmload.edge.runtime import Runtime, attach
from llmload.edge.users import ChatUser
from llmload.settings.config import RunConfig
from llmload.testing import ROLE, C, Ending, Reply, ScriptedServer, W, sse


class _Unanswered:
    """A transport whose connect never completes."""

    def connect(self) -> None:
        gevent.sleep(30)


def _user_stopped(how: str) -> dict[str, Any]:
    with ScriptedServer(Reply(writes=[W(5, sse(ROLE, C({"content": "a"})))], ending=Ending.STALL)) as server:
        environment = Environment(user_classes=[ChatUser], host=server.base_url)
        runtime = Runtime(config=RunConfig())
        runtime.process.model = "m"
        handed_to_main: list[bool] = []
        runtime.process.interrupt_main = lambda: handed_to_main.append(True)
        attach(environment, runtime)
        user = ChatUser(environment)
        user.on_start()
        if how == "before-post":
            user._client._transport = _Unanswered()  # the user's client, over a transport whose connect blocks
        task = gevent.spawn(user.generate)
        for _ in range(500):
            gevent.sleep(0.01)
            if how == "before-post" or [r for r in server.requests if r.method == "POST"]:
                break
        gevent.sleep(0.05)  # the first token has arrived: the user waits in a read
        task.kill(KeyboardInterrupt if how == "interrupt" else gevent.GreenletExit, block=True, timeout=5)
        total = runtime.run.totals().total()
        return {
            "cancelled": total.cancelled,
            "finished": total.finished,
            "in_flight": runtime.run.in_flight,
            "handed_to_main": len(handed_to_main),
            "ended_quietly": task.successful(),
            "posts": len([r for r in server.requests if r.method == "POST"]),
        }


@pytest.mark.parametrize(
    ("how", "cancelled", "handed_to_main", "posts"),
    [
        pytest.param("interrupt", 1, 1, 1, id="keyboard-interrupt-during-a-read-is-a-cancellation-handed-to-main"),
        pytest.param("exit", 1, 0, 1, id="stop-during-a-read-is-a-cancellation"),
        pytest.param("before-post", 0, 0, 0, id="stop-before-the-request-was-posted-counts-nothing"),
    ],
)
def test_p1_user_stopped_mid_request(how: str, cancelled: int, handed_to_main: int, posts: int) -> None:
    assert _user_stopped(how) == {
        "cancelled": cancelled,
        "finished": 0,
        "in_flight": 0,
        "handed_to_main": handed_to_main,
        "ended_quietly": True,
        "posts": posts,
    }


@pytest.mark.parametrize("when", ["before-start", "waiting-for-a-slot"])
def test_p1_a_user_after_the_run_ended_stops_without_sending(when: str) -> None:
    """Users Locust starts after the final report (late spawn messages) send nothing and end by themselves."""
    with ScriptedServer(Reply(writes=[W(0, sse(ROLE, C({"content": "a"})))])) as server:
        environment = Environment(user_classes=[ChatUser], host=server.base_url)
        runtime = Runtime(config=RunConfig())
        runtime.process.model, runtime.run.run_id = "m", "r1"
        attach(environment, runtime)
        if when == "before-start":
            runtime.end_run()
        else:
            runtime.run.concurrency = gevent.lock.BoundedSemaphore(1)
            runtime.run.concurrency.acquire()  # every slot busy: the user waits for one
        group = Group()
        ChatUser(environment).start(group)
        gevent.sleep(0.2)
        if when == "waiting-for-a-slot":
            runtime.end_run()
            runtime.run.concurrency.release()
        ended = group.join(timeout=5)
        total = runtime.run.totals().total()
        posts = [r for r in server.requests if r.method == "POST"]
    assert ended
    assert (len(posts), total.finished, total.cancelled) == (0, 0, 0)
    assert runtime.run.concurrency is None or runtime.run.concurrency.counter == 1  # the slot is free again
