"""SessionOrder: a session's trace lines go one at a time, in turn order, whatever order the users take them in."""

from __future__ import annotations

import gevent

from llmload.edge.replay import SessionOrder


def test_issue21_a_sessions_later_turn_waits_for_the_earlier_ones_to_finish():
    order = SessionOrder()
    sent: list[tuple[str, int]] = []

    def send(session: str, turn: int, busy_s: float) -> None:
        order.wait(session, turn)
        sent.append((session, turn))
        gevent.sleep(busy_s)
        order.done(session, turn)

    # turn 2 is taken first, then turn 1, then turn 0; another session's turn 0 never waits
    users = [gevent.spawn(send, "a", 2, 0.0), gevent.spawn(send, "a", 1, 0.01), gevent.spawn(send, "b", 0, 0.0)]
    gevent.sleep(0.02)
    assert sent == [("b", 0)]
    users.append(gevent.spawn(send, "a", 0, 0.01))
    gevent.joinall(users, timeout=5)
    assert all(user.dead for user in users)
    assert sent == [("b", 0), ("a", 0), ("a", 1), ("a", 2)]


def test_issue21_a_failed_turn_still_lets_the_next_one_go():
    order = SessionOrder()
    order.done("a", 0)  # turn 0 failed or was skipped: it is over all the same
    waiter = gevent.spawn(order.wait, "a", 1)
    waiter.join(timeout=1)
    assert waiter.dead
