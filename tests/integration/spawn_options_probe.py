"""Run by tests/integration/test_spawn_options.py in a process of its own (importing Locust patches gevent)."""

from __future__ import annotations

import argparse
from typing import Any

import msgpack

from llmload.edge.locust_internals import (
    SENT_OPTIONS_KEY,
    compact_spawn_messages,
    compact_spawn_options,
    expand_sent_options,
)
from llmload.edge.messages import option_defaults


class _Message:
    def __init__(self, type: str, data: Any) -> None:
        self.type, self.data = type, data


class _Server:
    def __init__(self) -> None:
        self.sent: list[_Message] = []

    def send_to_client(self, msg: _Message) -> None:
        self.sent.append(msg)


class _Runner:
    def __init__(self) -> None:
        self.server = _Server()


def _master_options(**changed: Any) -> dict[str, Any]:
    parsed: dict[str, Any] = {"host": "http://x", "num_users": 10, "tags": None, "llmload_plan": {"v": 1}}
    parsed.update(option_defaults())
    parsed.update(changed)
    return parsed


def test_spawn_options_keep_only_non_default_llmload_values_and_every_locust_option() -> None:
    parsed = _master_options(max_tokens="7", ignore_eos=True)
    compact = compact_spawn_options(parsed, option_defaults())
    assert compact[SENT_OPTIONS_KEY] == {"max_tokens": "7", "ignore_eos": True}
    assert {k: v for k, v in compact.items() if k != SENT_OPTIONS_KEY} == {
        "host": "http://x", "num_users": 10, "tags": None, "llmload_plan": {"v": 1}
    }  # fmt: skip
    assert parsed["max_tokens"] == "7"  # the master's own options are untouched
    assert "dataset" in parsed
    full, small = len(msgpack.packb(parsed)), len(msgpack.packb(compact))
    assert small < full - 500, (full, small)  # ~0.9 KB of defaults no longer travel


def test_worker_sets_every_llmload_option_from_the_entry_master_wins_over_its_own_command_line() -> None:
    defaults = option_defaults()
    worker = argparse.Namespace(**defaults)
    worker.max_tokens = "99"  # the worker's own command line
    worker.dataset = "worker.jsonl"
    compact = compact_spawn_options(_master_options(max_tokens="7"), defaults)
    vars(worker).update(compact)  # what Locust's worker does with a spawn message's custom options
    expand_sent_options(worker, defaults)
    assert worker.max_tokens == "7"
    assert worker.dataset == defaults["dataset"]  # the master's default, as when every option travelled
    assert {k: getattr(worker, k) for k in defaults} == {**defaults, "max_tokens": "7"}


def test_worker_of_a_master_that_sends_options_flat_keeps_what_locust_applied() -> None:
    defaults = option_defaults()
    worker = argparse.Namespace(**defaults)
    vars(worker).update(_master_options(max_tokens="5"))
    expand_sent_options(worker, defaults)
    assert worker.max_tokens == "5"


def test_master_compacts_spawn_messages_only() -> None:
    runner = _Runner()
    compact_spawn_messages(runner, option_defaults())
    compact_spawn_messages(runner, option_defaults())  # idempotent: wrapped once
    parsed = _master_options(max_tokens="7")
    runner.server.send_to_client(_Message("spawn", {"user_classes_count": {"A": 1}, "parsed_options": parsed}))
    runner.server.send_to_client(_Message("heartbeat", {"parsed_options": parsed}))
    spawn, other = runner.server.sent
    assert spawn.data["user_classes_count"] == {"A": 1}
    assert spawn.data["parsed_options"][SENT_OPTIONS_KEY] == {"max_tokens": "7"}
    assert "max_tokens" not in spawn.data["parsed_options"]
    assert other.data["parsed_options"] is parsed


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print("passed", name)
