"""Session files: checks before load, and the history a player builds (tool turns included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.errors import DatasetError
from llmload.workload.session_file import SessionPlayer, SessionStream, load_sessions

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agentic_sessions.jsonl"


def _file(tmp_path: Path, *sessions: object) -> str:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return str(path)


def test_session_file_example_in_the_repository_loads():
    specs = load_sessions(str(EXAMPLE))
    assert [s.id for s in specs] == ["fix-bug", "support-chat"]
    assert [step.kind for step in specs[0].steps] == ["user", "tool", "tool", "user"]
    assert len(specs[0].steps[1].text.split()) == 800


@pytest.mark.parametrize(
    ("session", "problem"),
    [
        ({"steps": []}, "needs a non-empty 'steps' list"),
        ({"steps": [{"tool": "t", "result": "x"}]}, "steps[0] is a tool step, but a session starts with a user step"),
        ({"steps": [{"user": "hi", "max_tokens": 0}]}, "steps[0].max_tokens must be a positive integer"),
        ({"steps": [{"user": "hi"}, {"tool": "t"}]}, "steps[1] needs a string 'result' or a positive integer"),
        ({"steps": [{"user": "hi"}, {"tool": "t", "result": "r", "delay_s": -1}]}, "steps[1].delay_s must be"),
        ({"steps": [{"say": "hi"}]}, "steps[0] needs 'user' (or 'user_tokens') or 'tool'"),
    ],
)
def test_session_file_bad_line_is_refused_naming_line_and_field(tmp_path, session, problem):
    path = _file(tmp_path, {"steps": [{"user": "ok"}]}, session)
    with pytest.raises(DatasetError) as err:
        load_sessions(path)
    assert f"{path}:2: {problem}" in str(err.value)


def test_session_player_turns_a_reply_into_the_tool_call_its_result_answers(tmp_path):
    path = _file(
        tmp_path,
        {
            "steps": [
                {"user": "q", "assistant": "recorded"},
                {"tool": "f", "args": {"a": 1}, "result": "r"},
                {"user": "n"},
            ]
        },
    )
    (spec,) = load_sessions(path)
    for from_dataset, kept in ((False, "live"), (True, "recorded")):
        player = SessionPlayer(spec, history_from_dataset=from_dataset)
        first = player.messages()
        player.record_reply(first, "live")
        second = [m.as_dict() for m in player.messages()]
        assert [m["role"] for m in second] == ["user", "assistant", "tool"]
        assert second[1]["content"] == kept
        assert second[1]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
        assert second[2] == {"role": "tool", "tool_call_id": second[1]["tool_calls"][0]["id"], "content": "r"}
        player.record_reply(player.messages(), "after tool")
        third = [m.as_dict() for m in player.messages()]
        assert [m["role"] for m in third] == ["user", "assistant", "tool", "assistant", "user"]
        player.record_reply(player.messages(), "end")
        assert player.next_step is None


def test_session_streams_of_all_workers_take_disjoint_sessions_then_cycle(tmp_path):
    specs = load_sessions(_file(tmp_path, *({"id": i, "steps": [{"user": "x"}]} for i in range(5))))
    a, b = SessionStream(specs, 0, 2), SessionStream(specs, 1, 2)
    assert [a.next().id for _ in range(4)] == ["0", "2", "4", "1"]
    assert [b.next().id for _ in range(2)] == ["1", "3"]


def test_issue21_user_and_result_tokens_are_exact_token_counts_with_a_tokenizer(tmp_path, tiny_tokenizer):
    from llmload.request.tokens import HFTokenCounter

    counter = HFTokenCounter(tiny_tokenizer)
    steps = [{"user_tokens": 37}, {"tool": "grep", "result_tokens": 120}, {"user_tokens": 5}]
    path = _file(tmp_path, {"steps": steps})
    (spec,) = load_sessions(path, counter)
    assert [counter.count(step.text) for step in spec.steps] == [37, 120, 5]
    (words,) = load_sessions(path)  # without a tokenizer: that many words
    assert [len(step.text.split()) for step in words.steps] == [37, 120, 5]
    assert [counter.count(step.text) for step in words.steps] != [37, 120, 5]  # words are not tokens here
