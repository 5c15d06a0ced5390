"""Trace files: checks before load, format detection, worker shares, prompts built from hash_ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.errors import DatasetError
from llmload.request.tokens import HFTokenCounter
from llmload.workload.trace import Trace, TraceCursor, TraceLine, TracePrompts, load_trace, trace_shares

WORDS = ("alpha", "beta", "gamma", "delta", "echo", "fox")


def _write(tmp_path: Path, *lines: object) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(path)


def _moon(t: float, n: int = 10, ids: list[int] | None = None) -> dict[str, object]:
    return {"timestamp": t, "input_length": n, "output_length": 2, "hash_ids": [1] if ids is None else ids}


def test_trace_mooncake_is_detected_and_times_are_offsets_from_the_first_line(tmp_path):
    trace = load_trace(_write(tmp_path, _moon(1000), "", _moon(1250)), block_tokens=16)
    assert trace.format == "mooncake"
    assert [(line.line, line.offset_s) for line in trace.lines] == [(1, 0.0), (3, 0.25)]
    assert trace.lines[0].hash_ids == (1,)
    assert trace.lines[0].output_tokens == 2


def test_trace_jsonl_lines_with_text_lengths_and_sessions(tmp_path):
    path = _write(
        tmp_path,
        {"offset_s": 0.5, "prompt": "hello", "max_tokens": 3, "session_id": "s1"},
        {"timestamp_ms": 900, "input_tokens": 40, "output_tokens": 5},
        {"offset_s": 1.0, "messages": [{"role": "user", "content": "hi"}]},
    )
    trace = load_trace(path)
    assert trace.format == "jsonl"
    first, second, third = trace.lines
    assert first.messages is not None
    assert first.messages[0].content == "hello"
    assert first.session_id == "s1"
    assert (second.offset_s, second.input_tokens, second.output_tokens) == (pytest.approx(0.4), 40, 5)
    assert third.messages is not None
    assert third.output_tokens is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ({"timestamp": 5, "output_length": 2, "hash_ids": [1]}, "missing field 'input_length'"),
        ({"timestamp": -1, "input_length": 5, "output_length": 2, "hash_ids": [1]}, "field 'timestamp' is negative"),
        ({"timestamp": 5, "input_length": 0, "output_length": 2, "hash_ids": [1]}, "field 'input_length' must be >= 1"),
        (
            {"timestamp": 5, "input_length": 40, "output_length": 2, "hash_ids": [1]},
            "field 'hash_ids' has 1 block(s) of 16 tokens, which does not fit input length 40",
        ),
        (
            {"timestamp": 5, "input_length": 5, "output_length": 2, "hash_ids": ["a"]},
            "field 'hash_ids' must be a list of integers",
        ),
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        # a finite time that a trace cannot span (sent never, or at "inf s")
        (
            {"timestamp": 1e308, "input_length": 5, "output_length": 2, "hash_ids": [1]},
            "its time is 1e+305 s after the first line's",
        ),
        (
            {"timestamp": 4e10, "input_length": 5, "output_length": 2, "hash_ids": [1]},
            "its time is 4e+07 s after the first line's, more than a trace spans",
        ),
    ],
)
def test_trace_bad_line_is_refused_naming_file_line_and_field(tmp_path, line, problem):
    path = _write(tmp_path, _moon(0), line)
    with pytest.raises(DatasetError) as err:
        load_trace(path, block_tokens=16)
    assert f"{path}:2: {problem}" in str(err.value)
    assert "nothing was sent" in str(err.value)
    assert "--trace-skip-bad" in str(err.value)


def test_trace_out_of_order_and_undecodable_lines_are_skipped_and_counted_with_skip_bad(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        json.dumps(_moon(10)).encode() + b"\n" + json.dumps(_moon(5)).encode() + b"\n"
        b'{"timestamp": 20, "x": "\xff"}\n' + json.dumps(_moon(30)).encode() + b"\n"
    )
    trace = load_trace(str(path), skip_bad=True, block_tokens=16)
    assert [line.line for line in trace.lines] == [1, 4]
    assert trace.skipped == 2
    assert "out of order" in trace.problems[0]
    assert f"{path}:3: not UTF-8 text" in trace.problems[1]
    assert "2 bad lines skipped" in trace.describe()


def test_trace_without_usable_line_is_refused_even_with_skip_bad(tmp_path):
    with pytest.raises(DatasetError, match="no usable request"):
        load_trace(_write(tmp_path, {"timestamp": 1}), skip_bad=True)


def test_trace_jsonl_lone_surrogate_is_a_bad_line(tmp_path):
    path = _write(tmp_path, '{"offset_s": 0, "prompt": "x\\ud83d"}')
    with pytest.raises(DatasetError, match="lone surrogate"):
        load_trace(path)


def _trace(lines: int) -> Trace:
    return Trace("t", "jsonl", tuple(TraceLine(i + 1, i * 0.5, 3) for i in range(lines)), 0, (), 16)


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_trace_cursors_of_all_workers_take_every_line_once_in_time_order(workers):
    trace = _trace(20)
    taken: list[int] = []
    for rank in range(workers):
        cursor = TraceCursor(trace, rank, workers, speed=2.0)
        assert cursor.remaining == trace_shares(trace, workers)[rank] == len(range(rank, 20, workers))
        mine = []
        while (item := cursor.take()) is not None:
            line, offset_s = item
            assert offset_s == line.offset_s / 2.0
            mine.append(line.line)
        assert mine == sorted(mine)
        assert cursor.remaining == 0
        assert cursor.next_due_offset_s is None
        taken += mine
    assert sorted(taken) == list(range(1, 21))


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_issue21_a_sessions_trace_lines_all_go_to_one_worker_in_turn_order_and_every_line_once(workers):
    sessions = [f"s{i % 7}" if i % 3 else None for i in range(60)]
    lines = tuple(TraceLine(i + 1, i * 0.1, 3, session_id=s) for i, s in enumerate(sessions))
    trace = Trace("t", "jsonl", lines, 0, (), 16)
    shares = trace_shares(trace, workers)
    owner: dict[str, int] = {}
    taken: list[int] = []
    for rank in range(workers):
        cursor = TraceCursor(trace, rank, workers)
        assert cursor.remaining == shares[rank]
        turns: dict[str, list[int]] = {}
        while (item := cursor.take_turn()) is not None:
            line, _, turn = item
            taken.append(line.line)
            if line.session_id is not None:
                assert owner.setdefault(line.session_id, rank) == rank
                turns.setdefault(line.session_id, []).append(turn)
        assert all(got == list(range(len(got))) for got in turns.values())
    assert sorted(taken) == list(range(1, 61))
    assert sum(shares) == 60
    if workers > 1:
        assert len(set(owner.values())) > 1  # the sessions spread over the workers


def test_trace_prompts_share_exactly_the_blocks_the_ids_share():
    trace = Trace("t", "mooncake", (), 0, (), 4)
    prompts = TracePrompts(trace, None, WORDS, seed=3)
    a = prompts.text(TraceLine(1, 0.0, 10, None, (7, 8, 9)))
    b = prompts.text(TraceLine(2, 0.0, 11, None, (7, 8, 5)))
    c = prompts.text(TraceLine(3, 0.0, 6, None, (6, 1)))
    assert a.split()[:8] == b.split()[:8]
    assert len(a.split()) == 10
    assert len(b.split()) == 11
    assert a.split()[:4] != c.split()[:4] or a.split()[4:8] != c.split()[4:8]
    assert TracePrompts(trace, None, WORDS, seed=3).text(TraceLine(1, 0.0, 10, None, (7, 8, 9))) == a


def test_trace_prompts_are_exact_with_a_tokenizer(tiny_tokenizer):
    counter = HFTokenCounter(tiny_tokenizer)
    candidates = [
        "the",
        "a",
        "of",
        "and",
        "to",
        "in",
        "is",
        "it",
        "quick",
        "brown",
        "fox",
        "dog",
        "lazy",
        "jumps",
        "over",
        "words",
        "tokens",
    ]
    words = [w for w in candidates if counter.count(w) == 1 and counter.count(f"{w} {w}") == 2]
    assert len(words) >= 3
    trace = Trace("t", "mooncake", (), 0, (), 8)
    prompts = TracePrompts(trace, counter, words, seed=0)
    for n in (1, 8, 9, 23):
        ids = tuple(range(-(-n // 8)))
        assert counter.count(prompts.text(TraceLine(n, 0.0, n, None, ids))) == n


def test_trace_jsonl_offset_too_large_for_seconds_is_refused_not_sent_at_infinity(tmp_path):
    """offset_s 1e308 is finite, but not in milliseconds: refused, never 'over inf s' and never sent."""
    path = tmp_path / "huge.jsonl"
    first = '{"offset_s": 0, "input_tokens": 4, "output_tokens": 2}'
    path.write_text(first + '\n{"offset_s": 1e308, "input_tokens": 4, "output_tokens": 2}\n')
    with pytest.raises(DatasetError) as err:
        load_trace(path, block_tokens=16)
    assert f"{path}:2: its time is inf s after the first line's" in str(err.value)
