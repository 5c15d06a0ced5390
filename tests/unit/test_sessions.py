"""Sessions: --think-time values and a session's turn accounting."""

from __future__ import annotations

import random

import pytest

from llmload.errors import ConfigError
from llmload.request.record import Outcome, RequestRecord
from llmload.settings.think_time import ThinkTime, parse_think_time
from llmload.workload.sessions import Session


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2", ThinkTime("fixed", 2.0)),
        ("0", ThinkTime("fixed", 0.0)),
        ("exp:1.5", ThinkTime("exp", 1.5)),
        ("uniform:1:3", ThinkTime("uniform", 1.0, 3.0)),
        ("normal:2:0.5", ThinkTime("normal", 2.0, 0.5)),
    ],
)
def test_think_time_values_parse_and_print_back(raw, expected):
    assert parse_think_time("--think-time", raw) == expected
    assert parse_think_time("--think-time", expected.describe()) == expected


@pytest.mark.parametrize("raw", ["-1", "fast", "exp", "uniform:3:1", "normal:1", "gamma:1:2", "inf"])
def test_think_time_bad_values_are_refused_with_the_forms(raw):
    with pytest.raises(ConfigError, match=r"--think-time must be seconds >= 0 or a distribution \(e\.g\. 2, exp:2"):
        parse_think_time("--think-time", raw)


def test_think_time_draws_stay_in_range_and_keep_their_mean():
    rng = random.Random(1)
    uniform = [ThinkTime("uniform", 1.0, 3.0).draw(rng) for _ in range(2000)]
    assert min(uniform) >= 1.0
    assert max(uniform) <= 3.0
    exp = [ThinkTime("exp", 2.0).draw(rng) for _ in range(4000)]
    assert sum(exp) / len(exp) == pytest.approx(2.0, rel=0.1)
    assert min(ThinkTime("normal", 0.1, 1.0).draw(rng) for _ in range(500)) == 0.0
    assert ThinkTime("fixed", 0.25).draw(rng) == 0.25


def _record(ok: bool) -> RequestRecord:
    return RequestRecord("chat", "m", 0.0, outcome=Outcome.OK if ok else Outcome.HTTP_ERROR)


def test_session_marks_turns_and_ends_on_its_last_turn_with_a_new_id():
    session = Session(3)
    first_id = session.id
    records = [_record(True) for _ in range(3)]
    ended = [session.account(r, sent_s=10.0 + i, now_s=10.5 + i) for i, r in enumerate(records)]
    assert ended == [False, False, True]
    assert [r.turn for r in records] == [1, 2, 3]
    assert [r.session_turns for r in records] == [None, None, 3]
    assert records[2].session_duration_s == pytest.approx(2.5)
    assert not records[2].session_failed
    assert session.id != first_id
    assert session.next_turn == 1


def test_session_failing_mid_way_ends_failed_with_the_turns_it_completed():
    session = Session(4)
    ok, bad = _record(True), _record(False)
    assert not session.account(ok, 1.0, 1.1)
    assert session.account(bad, 2.0, 2.2)
    assert (bad.turn, bad.session_turns, bad.session_failed) == (2, 1, True)
