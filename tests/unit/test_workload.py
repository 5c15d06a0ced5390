"""Datasets, synthetic prompts, shared prefix, per-worker streams, conversations and option validation."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from llmload.errors import ConfigError, DatasetError
from llmload.request.tokens import HFTokenCounter
from llmload.settings.config import LengthSpec, RunConfig
from llmload.workload.datasets import Message, load_dataset
from llmload.workload.prompts import Conversation, Prompt, Workload, build_workload


@pytest.fixture
def named_files(tmp_path, monkeypatch):
    """The files these option tests name exist (file options are checked with the other values)."""
    for name in ("d.jsonl", "s.jsonl", "t.jsonl"):
        (tmp_path / name).write_text("")
    monkeypatch.chdir(tmp_path)


def _jsonl(tmp_path: Path, lines: list[object | str], name: str = "d.jsonl") -> str:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(path)


def _sharegpt(tmp_path: Path, entries: list[object]) -> str:
    path = tmp_path / "sg.json"
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n")
    return str(path)


def _conv(human: str, gpt: str) -> dict[str, object]:
    return {"conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}]}


def _options(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(prompt="p", max_tokens="8", **kw)


# ── JSONL ───────────────────────────────────────────────────────────────────
def test_load_dataset_jsonl_prompt_messages_and_max_tokens(tmp_path):
    path = _jsonl(tmp_path, [
        {"prompt": "hello"},
        "",
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
         "max_tokens": 7},
    ])  # fmt: skip
    dataset = load_dataset(path)
    assert [item.messages for item in dataset.items] == [
        (Message("user", "hello"),),
        (Message("system", "be brief"), Message("user", "hi")),
    ]
    assert [item.max_tokens for item in dataset.items] == [None, 7]
    assert dataset.skipped == 0


def test_load_dataset_reports_bad_lines_with_file_and_line_number(tmp_path):
    path = _jsonl(tmp_path, [
        {"prompt": "ok"},
        "{not json",
        {"prompt": ""},
        {"text": "wrong key"},
        {"prompt": "x", "max_tokens": 0},
        [1, 2],
        {"messages": [{"role": "user"}]},
        {"prompt": "a", "messages": []},
    ])  # fmt: skip
    dataset = load_dataset(path)
    assert len(dataset.items) == 1
    assert dataset.skipped == 7
    lines = [problem.split(": ", 1)[0] for problem in dataset.problems]
    assert lines == [f"{path}:{n}" for n in range(2, 9)]
    assert "invalid JSON" in dataset.problems[0]
    assert '"prompt" must be a non-empty string' in dataset.problems[1]
    assert 'needs "prompt" or "messages"' in dataset.problems[2]
    assert '"max_tokens" must be a positive integer, got 0' in dataset.problems[3]
    assert "expected a JSON object, got list" in dataset.problems[4]
    assert 'messages[0] needs string "role" and "content"' in dataset.problems[5]
    assert 'has both "prompt" and "messages"' in dataset.problems[6]


def test_load_dataset_without_usable_line_refuses_with_the_first_problem(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": 3}, {"prompt": 4}])
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    message = str(info.value)
    assert f"no usable prompt in --dataset {path!r} (jsonl, 2 bad, 0 usable)" in message
    assert f"first problem: {path}:1:" in message


def test_load_dataset_empty_file_refuses(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(DatasetError, match="0 bad, 0 usable"):
        load_dataset(str(path))


def test_load_dataset_missing_file_names_path(tmp_path):
    with pytest.raises(DatasetError, match=r"cannot read --dataset '.*nope.jsonl': No such file"):
        load_dataset(str(tmp_path / "nope.jsonl"))


def test_load_dataset_not_utf8_is_refused(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"prompt": "\xff"}\n')
    with pytest.raises(DatasetError, match="is not UTF-8"):
        load_dataset(str(path))


# ── ShareGPT ────────────────────────────────────────────────────────────────
def test_load_dataset_sharegpt_first_human_turn_and_reply(tmp_path):
    path = _sharegpt(tmp_path, [
        {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q1"},
                           {"from": "gpt", "value": "a b c"}, {"from": "human", "value": "q2"}]},
        _conv("q3", "d"),
    ])  # fmt: skip
    dataset = load_dataset(path)
    assert [(i.messages[0].content, i.reply) for i in dataset.items] == [("q1", "a b c"), ("q3", "d")]
    assert all(i.messages[0].role == "user" for i in dataset.items)


def test_load_dataset_sharegpt_bad_entries_report_their_line(tmp_path):
    path = _sharegpt(tmp_path, [
        _conv("fine", "ok"),
        {"conversations": [{"from": "gpt", "value": "no human"}]},
        {"id": "x"},
        _conv("", "empty prompt"),
    ])  # fmt: skip
    dataset = load_dataset(path)
    assert len(dataset.items) == 1
    assert [p.split(": ", 1)[0] for p in dataset.problems] == [f"{path}:{n}" for n in (3, 4, 5)]
    assert "no human turn" in dataset.problems[0]
    assert 'needs a non-empty "conversations" list' in dataset.problems[1]


def test_load_dataset_sharegpt_format_on_jsonl_text_is_refused(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": "a"}])
    with pytest.raises(DatasetError, match=r"not a ShareGPT JSON array.*--dataset-format jsonl"):
        load_dataset(path, "sharegpt")


def test_load_dataset_sharegpt_broken_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n{"conversations": []},\n{"conversations": [}\n]')
    with pytest.raises(DatasetError, match=r"broken.json:3: invalid JSON"):
        load_dataset(str(path))


def test_load_dataset_auto_detects_sharegpt_by_content(tmp_path):
    path = tmp_path / "sg.txt"
    path.write_text(json.dumps([_conv("q", "a")]))
    assert load_dataset(str(path)).items[0].reply == "a"


# ── Workload: fixed and dataset prompts ─────────────────────────────────────
def test_workload_fixed_prompt_every_time_with_requested_length(tiny_tokenizer):
    workload = Workload(RunConfig(prompt="Hello world"), HFTokenCounter(tiny_tokenizer))
    prompts = [workload.prompt_at(k) for k in range(3)]
    assert {p.text for p in prompts} == {"Hello world"}
    assert {p.requested_tokens for p in prompts} == {2}
    assert Workload(RunConfig(prompt="Hello world")).prompt_at(0).requested_tokens is None


def test_workload_dataset_order_is_seeded_and_cycles(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": f"p{i}"} for i in range(10)])
    first = build_workload(RunConfig(dataset=path, seed=1))
    again = build_workload(RunConfig(dataset=path, seed=1))
    other = build_workload(RunConfig(dataset=path, seed=2))
    order = [first.prompt_at(k).text for k in range(10)]
    assert sorted(order) == sorted(f"p{i}" for i in range(10))
    assert order == [again.prompt_at(k).text for k in range(10)]
    assert order != [other.prompt_at(k).text for k in range(10)]
    assert first.prompt_at(10).text == order[0]


def test_workload_worker_streams_are_disjoint_and_cover_one_pass(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": f"p{i}"} for i in range(12)])
    workload = build_workload(RunConfig(dataset=path, seed=3))
    streams = [workload.stream(rank, 3) for rank in range(3)]
    drawn = [[s.next().text for _ in range(4)] for s in streams]
    assert set(drawn[0]).isdisjoint(drawn[1])
    assert set(drawn[1]).isdisjoint(drawn[2])
    assert sorted(text for texts in drawn for text in texts) == sorted(f"p{i}" for i in range(12))


def test_workload_stream_rejects_rank_outside_workers():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\)"):
        Workload(RunConfig()).stream(2, 2)


def test_workload_dataset_max_tokens_used_unless_output_tokens_given(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": "a", "max_tokens": 9}])
    assert build_workload(RunConfig(dataset=path)).prompt_at(0).max_tokens == 9
    fixed = RunConfig(dataset=path, output_tokens=LengthSpec(4))
    assert build_workload(fixed).prompt_at(0).max_tokens == 4


def test_workload_sharegpt_reply_length_as_output_when_asked(tmp_path, tiny_tokenizer):
    path = _sharegpt(tmp_path, [_conv("Hello", "the quick brown fox")])
    counter = HFTokenCounter(tiny_tokenizer)
    asked = RunConfig(dataset=path, output_from_dataset=True)
    assert build_workload(asked, counter).prompt_at(0).max_tokens == 4
    assert build_workload(asked).prompt_at(0).max_tokens == 4  # approximate: one word, one token
    assert build_workload(RunConfig(dataset=path), counter).prompt_at(0).max_tokens is None


# ── synthetic prompts ───────────────────────────────────────────────────────
@pytest.mark.parametrize("n", [1, 7, 64, 300])
def test_workload_synthetic_prompt_is_exactly_n_tokens_with_tokenizer(n, tiny_bos_tokenizer):
    counter = HFTokenCounter(tiny_bos_tokenizer)
    workload = Workload(RunConfig(input_tokens=LengthSpec(n), tokenizer="tiny"), counter)
    for k in range(5):
        prompt = workload.prompt_at(k)
        assert counter.count(prompt.text) == n
        assert prompt.requested_tokens == n
    assert workload.exact


def test_workload_synthetic_prompts_differ_and_repeat_with_seed(tiny_tokenizer):
    counter = HFTokenCounter(tiny_tokenizer)
    config = RunConfig(input_tokens=LengthSpec(32), seed=5)
    a, b = Workload(config, counter), Workload(config, counter)
    assert a.prompt_at(0).text != a.prompt_at(1).text
    assert [a.prompt_at(k).text for k in range(4)] == [b.prompt_at(k).text for k in range(4)]


def test_workload_synthetic_range_and_stddev_lengths_are_exact(tiny_tokenizer):
    counter = HFTokenCounter(tiny_tokenizer)
    ranged = Workload(RunConfig(input_tokens=LengthSpec(15, low=10, high=20)), counter)
    lengths = [counter.count(ranged.prompt_at(k).text) for k in range(40)]
    assert min(lengths) >= 10
    assert max(lengths) <= 20
    assert len(set(lengths)) > 3
    assert lengths == [ranged.prompt_at(k).requested_tokens for k in range(40)]
    spread = Workload(RunConfig(input_tokens=LengthSpec(50, stddev=5.0)), counter)
    lengths = [counter.count(spread.prompt_at(k).text) for k in range(40)]
    assert 40 < sum(lengths) / len(lengths) < 60
    assert len(set(lengths)) > 3


def test_workload_synthetic_without_tokenizer_is_approximate_words():
    workload = Workload(RunConfig(input_tokens=LengthSpec(25)))
    prompt = workload.prompt_at(0)
    assert len(prompt.text.split()) == 25
    assert prompt.requested_tokens == 25
    assert not workload.exact
    assert "lengths are approximate" in workload.describe()
    assert "pass --tokenizer" in workload.describe()


def test_workload_output_tokens_drawn_from_spec():
    workload = Workload(RunConfig(input_tokens=LengthSpec(3), output_tokens=LengthSpec(20, low=10, high=30)))
    outputs = [workload.prompt_at(k).max_tokens for k in range(50)]
    assert all(o is not None and 10 <= o <= 30 for o in outputs)
    assert len(set(outputs)) > 5


def test_workload_shared_prefix_is_common_and_total_is_exact(tiny_tokenizer):
    counter = HFTokenCounter(tiny_tokenizer)
    config = RunConfig(input_tokens=LengthSpec(20), prefix_tokens=16, seed=9)
    workload = Workload(config, counter)
    assert counter.count(workload.prefix) == 16
    other_worker = Workload(config, counter).stream(1, 2).next()
    for prompt in (workload.prompt_at(0), workload.prompt_at(1), other_worker):
        assert prompt.text.startswith(workload.prefix + " ")
        assert counter.count(prompt.text) == 36 == prompt.requested_tokens
    assert workload.prompt_at(0).text != workload.prompt_at(1).text


def test_workload_prefix_goes_in_front_of_dataset_prompts(tmp_path, tiny_tokenizer):
    counter = HFTokenCounter(tiny_tokenizer)
    path = _jsonl(tmp_path, [{"prompt": "Hello world"}])
    workload = build_workload(RunConfig(dataset=path, prefix_tokens=5), counter)
    prompt = workload.prompt_at(0)
    assert prompt.text == workload.prefix + "\nHello world"
    assert prompt.requested_tokens == 7
    assert workload.prompt_at(0, with_prefix=False).text == "Hello world"


def test_workload_exact_length_unreachable_names_the_tokenizer():
    class PairCounter:  # every text counts as an even number: odd targets are unreachable
        def count(self, text: str) -> int:
            return 2 * len(text.split())

    with pytest.raises(DatasetError, match=r"exactly 3 tokens with tokenizer 'pairs'"):
        Workload(RunConfig(input_tokens=LengthSpec(3), tokenizer="pairs"), PairCounter()).prompt_at(0)


# ── conversations ───────────────────────────────────────────────────────────
def _user(text: str) -> Prompt:
    return Prompt(messages=(Message("user", text),), max_tokens=5, requested_tokens=1)


def test_conversation_history_grows_with_replies_then_restarts(tiny_tokenizer):
    conversation = Conversation(3, HFTokenCounter(tiny_tokenizer))
    first = conversation.next_prompt(_user("Hello"))
    assert first.messages == (Message("user", "Hello"),)
    conversation.record_reply(first, "world")
    second = conversation.next_prompt(_user("again"))
    assert second.messages == (Message("user", "Hello"), Message("assistant", "world"), Message("user", "again"))
    assert second.requested_tokens == 3
    assert second.max_tokens == 5
    conversation.record_reply(second, "the dog")
    third = conversation.next_prompt(_user("fox"))
    assert len(third.messages) == 5
    conversation.record_reply(third, "over")
    assert conversation.starting
    assert conversation.next_prompt(_user("new")).messages == (Message("user", "new"),)


def test_conversation_failed_turn_starts_over():
    conversation = Conversation(4)
    first = conversation.next_prompt(_user("a"))
    conversation.record_reply(first, None)
    assert conversation.starting
    assert conversation.next_prompt(_user("b")).messages == (Message("user", "b"),)


# ── option validation ───────────────────────────────────────────────────────
def test_run_config_reads_workload_options(named_files):
    config = RunConfig.from_options(_options(
        dataset="d.jsonl", dataset_format="ShareGPT", output_tokens="dataset", prefix_tokens="32",
        turns="3", seed="-4", allow_download=True, warmup_requests="5",
    ))  # fmt: skip
    assert (config.dataset, config.dataset_format, config.output_from_dataset) == ("d.jsonl", "sharegpt", True)
    assert (config.prefix_tokens, config.turns, config.seed) == (32, 3, -4)
    assert config.allow_download
    assert config.warmup_requests == 5
    synthetic = RunConfig.from_options(_options(input_tokens="128", input_tokens_stddev="8", output_tokens="5:9"))
    assert synthetic.input_tokens == LengthSpec(128, stddev=8.0)
    assert synthetic.output_tokens == LengthSpec(7, low=5, high=9)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"dataset": "d.jsonl", "input_tokens": "5"}, "--dataset and --input-tokens both choose the prompts"),
        ({"input_tokens": "0"}, "--input-tokens must be a positive integer N or a range MIN:MAX"),
        ({"input_tokens": "many"}, "got 'many'; pass e.g. --input-tokens 512"),
        ({"input_tokens": "9:3"}, "1 <= MIN <= MAX, got '9:3'"),
        ({"input_tokens": "2:9", "input_tokens_stddev": "1"}, "applies to --input-tokens N, not to a range"),
        ({"input_tokens_stddev": "3"}, "--input-tokens-stddev needs --input-tokens N"),
        ({"input_tokens": "8", "input_tokens_stddev": "-1"}, "--input-tokens-stddev must be a number of tokens >= 0"),
        ({"output_tokens": "dataset"}, "--output-tokens dataset needs --dataset PATH"),
        ({"output_tokens": "-3"}, "--output-tokens must be a positive integer"),
        ({"dataset_format": "csv"}, "--dataset-format must be one of auto, jsonl, sharegpt, got 'csv'"),
        ({"turns": "0"}, "--turns must be an integer >= 1, got '0'"),
        ({"prefix_tokens": "-1"}, "--prefix-tokens must be an integer >= 0"),
        ({"seed": "abc"}, "--seed must be an integer, got 'abc'"),
        ({"warmup_requests": "-2"}, "--warmup-requests must be an integer >= 0"),
    ],
)
def test_run_config_rejects_bad_workload_options(options, fragment, named_files):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_options(_options(**options))
    assert fragment in str(info.value)


def test_dataset_prompt_is_tokenized_once_per_item_not_per_request(tmp_path):
    """Issue 19 (long prompts): counting a dataset prompt's requested length runs once per item and prefix."""
    from llmload.settings.config import RunConfig
    from llmload.workload.prompts import Workload

    class Words:
        calls = 0

        def count(self, text: str) -> int:
            Words.calls += 1
            return len(text.split())

    path = tmp_path / "long.jsonl"
    path.write_text('{"prompt": "' + " ".join(["word"] * 5000) + '"}\n{"prompt": "two words"}\n')
    workload = Workload(RunConfig(), Words(), load_dataset(str(path)))
    before = Words.calls
    prompts = [workload.prompt_at(k) for k in range(40)] + [workload.prompt_at(k, with_prefix=False) for k in range(4)]
    assert sorted({p.requested_tokens for p in prompts}) == [2, 5000]
    assert Words.calls - before == 2  # two items, no prefix: the same text with or without it
