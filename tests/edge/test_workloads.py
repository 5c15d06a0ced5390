"""Workloads end to end: locust command lines run in this process against `llmload sim` or a scripted server.

Covers datasets (bad lines, disjoint worker streams), exact synthetic lengths,
multi-turn history, warm-up, goodput and the tokenizer rules (BC-16/17). Each run is
``tests/edge/cluster.run_locust_here`` (``--processes 2``: a master and two workers here),
bounded by --num-requests, -t and a timeout. The tokenizer tests whose subject is what a fresh
process reads from its environment at import (hub access, ``HF_HOME``) stay process tests in
``tests/integration/test_workloads.py``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmload.edge.users import ChatUser, CompletionUser
from llmload.testing import CF, TF, C, ReceivedRequest, Reply, ScriptedServer, T, U, W, json_reply, sse
from tests.edge.cluster import CompletedRun, run_locust_here
from tests.simserver import serve

TIMEOUT_S = 90
CHAT_FILE = "locustfiles/chat.py"
COMPLETIONS_FILE = "locustfiles/completions.py"
_USERS = {CHAT_FILE: ChatUser, COMPLETIONS_FILE: CompletionUser}


@pytest.fixture
def sim_url() -> Iterator[str]:
    with serve("--decode-step-ms", "2") as sim:
        yield sim.url


class ChatScript:
    """Answers GET /v1/models with model "m" and every chat POST with reply number n, "reply<n>"."""

    def __init__(self) -> None:
        self._n = itertools.count()
        self.sent: dict[int, str] = {}

    def __call__(self, request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}))
        n = next(self._n)
        text = f"reply{n}"
        return Reply([W(5, sse(C({"content": text}), CF("stop"), U(10, 1), "[DONE]"))])


def _posts(server: ScriptedServer) -> list[dict[str, Any]]:
    return [r.json() for r in server.requests if r.method == "POST"]


def _locust(locustfile: str, host: str, *args: str, env: dict[str, str] | None = None) -> CompletedRun:
    return run_locust_here(
        _USERS[locustfile],
        ["--headless", "--only-summary", "-H", host, "-t", "60s", "--prometheus-port", "0", *args],
        users=1,
        env=env,
        timeout_s=TIMEOUT_S,
    )


def _jsonl(path: Path, prompts: list[str]) -> str:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return str(path)


def _tokenizer_file(tokenizer: Any, tmp_path: Path) -> str:
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


# ── datasets ────────────────────────────────────────────────────────────────
def test_workloads_two_workers_draw_disjoint_dataset_streams(tmp_path):
    prompts = [f"prompt number {i}" for i in range(12)]
    dataset = _jsonl(tmp_path / "d.jsonl", prompts)
    with ScriptedServer(ChatScript()) as server:
        proc = _locust(
            CHAT_FILE, server.base_url, "--processes", "2", "-u", "4", "-r", "4", "--num-requests", "12",
            "--dataset", dataset, "--seed", "7", "--skip-preflight",
        )  # fmt: skip
        posts = _posts(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sent = [body["messages"][0]["content"] for body in posts]
    assert sorted(sent) == sorted(prompts)  # each line exactly once: the two workers' streams are disjoint


def test_workloads_bad_dataset_lines_are_reported_and_skipped(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "good one"}\n{"prompt": \n{"nothing": 1}\n')
    with ScriptedServer(ChatScript()) as server:
        proc = _locust(CHAT_FILE, server.base_url, "-u", "1", "--num-requests", "2", "--dataset", str(path),
                       "--skip-preflight")  # fmt: skip
        posts = _posts(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipped dataset line {path}:2: invalid JSON" in proc.stderr
    assert f'skipped dataset line {path}:3: needs "prompt" or "messages"' in proc.stderr
    assert [body["messages"][0]["content"] for body in posts] == ["good one", "good one"]


def test_workloads_dataset_without_usable_line_stops_before_any_request(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": ""}\n')
    with ScriptedServer(ChatScript()) as server:
        proc = _locust(CHAT_FILE, server.base_url, "-u", "1", "--num-requests", "2", "--dataset", str(path))
        received = len(server.requests)
    assert proc.returncode == 2
    assert f"no usable prompt in --dataset '{path}'" in proc.stderr
    assert f"first problem: {path}:1:" in proc.stderr
    assert received == 0


# ── multi-turn ──────────────────────────────────────────────────────────────
def test_workloads_multi_turn_history_grows_with_each_reply(tmp_path):
    dataset = _jsonl(tmp_path / "d.jsonl", [f"question {i}" for i in range(6)])
    script = ChatScript()
    with ScriptedServer(script) as server:
        proc = _locust(CHAT_FILE, server.base_url, "-u", "1", "--num-requests", "6", "--turns", "3",
                       "--dataset", dataset, "--skip-preflight")  # fmt: skip
        posts = _posts(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    roles = [[m["role"] for m in body["messages"]] for body in posts]
    one, two, three = ["user"], ["user", "assistant", "user"], ["user", "assistant", "user", "assistant", "user"]
    assert roles == [one, two, three, one, two, three]
    for i in (1, 2, 4, 5):  # the previous turn's messages and reply come first, unchanged
        previous = posts[i - 1]["messages"]
        assert posts[i]["messages"][: len(previous)] == previous
        assert posts[i]["messages"][len(previous)] == {"role": "assistant", "content": f"reply{i - 1}"}
    firsts = [posts[i]["messages"][-1]["content"] for i in range(6)]
    assert len(set(firsts)) == 6  # every turn asks a new dataset question


class CompletionScript:
    """Answers GET /v1/models with model "m" and every completions POST with reply number n, "reply<n>"."""

    def __init__(self) -> None:
        self._n = itertools.count()

    def __call__(self, request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}))
        return Reply([W(5, sse(T(f"reply{next(self._n)}"), TF("stop"), U(10, 1), "[DONE]"))])


# Issue 14, P7: --turns is not chat-only; completions send the conversation as one text.
def test_p7_multi_turn_works_with_completions_as_one_joined_prompt(tmp_path):
    dataset = _jsonl(tmp_path / "d.jsonl", [f"question {i}" for i in range(4)])
    with ScriptedServer(CompletionScript()) as server:
        proc = _locust(COMPLETIONS_FILE, server.base_url, "-u", "1", "--num-requests", "4", "--turns", "2",
                       "--dataset", dataset, "--skip-preflight")  # fmt: skip
        posts = _posts(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prompts = [body["prompt"] for body in posts]
    for i in (1, 3):  # the second turn: first prompt, its reply, then a new question
        assert prompts[i].startswith(f"{prompts[i - 1]}\nreply{i - 1}\n")
        assert prompts[i].count("\n") == 2
    assert "\n" not in prompts[0] + prompts[2]  # a new conversation after 2 turns


# ── warm-up and goodput ─────────────────────────────────────────────────────
def test_workloads_warmup_requests_sent_first_and_excluded_goodput_reported(tmp_path):
    out = tmp_path / "r.json"
    with ScriptedServer(ChatScript()) as server:
        proc = _locust(CHAT_FILE, server.base_url, "-u", "2", "-r", "2", "--num-requests", "10",
                       "--warmup-requests", "4", "--slo", "ttft=30,e2e=60", "--skip-preflight",
                       "--results-json", str(out))  # fmt: skip
        posts = _posts(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(posts) == 14
    results = json.loads(out.read_text())
    assert results["requests"]["total"] == 10
    assert results["run"]["options"]["warmup_requests"] == 4
    goodput = results["goodput"]
    assert goodput["requests"] == 10
    assert goodput["share"] == 1.0
    assert goodput["requests_per_s"] == pytest.approx(results["throughput"]["requests_per_s"])
    assert goodput["slo"] == {"ttft_s": 30.0, "e2e_s": 60.0}
    assert "Goodput (req/s, SLO ttft=30,e2e=60):" in proc.stdout


def test_workloads_goodput_share_zero_when_objective_is_missed(sim_url, tmp_path):
    out = tmp_path / "r.json"
    proc = _locust(COMPLETIONS_FILE, sim_url, "-u", "2", "--num-requests", "6", "--slo", "e2e=0.000001",
                   "--max-tokens", "4", "--results-json", str(out), "--max-failure-ratio", "0")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["requests"]["succeeded"] == 6
    assert results["goodput"]["requests"] == 0
    assert results["goodput"]["share"] == 0.0


# ── synthetic lengths and token counts ──────────────────────────────────────
def test_workloads_synthetic_prompts_are_exact_at_the_server(sim_url, tmp_path, tiny_tokenizer):
    """The sim counts words; the tiny tokenizer's one-token words make both counts equal."""
    out = tmp_path / "r.json"
    proc = _locust(
        COMPLETIONS_FILE, sim_url, "-u", "4", "--num-requests", "20", "--tokenizer",
        _tokenizer_file(tiny_tokenizer, tmp_path), "--input-tokens", "30:60", "--prefix-tokens", "10",
        "--output-tokens", "6", "--ignore-eos", "--results-json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    tokens = json.loads(out.read_text())["tokens"]
    assert tokens["prompt_vs_requested"] == {"compared": 20, "mean_abs_diff": 0.0, "relative_diff": 0.0}
    assert 40 <= tokens["requested_prompt_avg"] <= 70
    assert tokens["prompt"] == tokens["requested_prompt_avg"] * 20
    assert tokens["completion"] == 6 * 20
    assert "prompts: synthetic prompts of 30-60 tokens, shared prefix of 10 tokens" in proc.stderr


def test_workloads_synthetic_without_tokenizer_says_lengths_are_approximate(sim_url, tmp_path):
    proc = _locust(COMPLETIONS_FILE, sim_url, "-u", "1", "--num-requests", "2", "--input-tokens", "12",
                   "--max-tokens", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "lengths are approximate (one word taken as one token): pass --tokenizer" in proc.stderr


# Prompt tokens: the server's count (with chat template) is reported apart from the requested length.
def test_bc16_chat_template_tokens_reported_apart_from_requested(sim_url, tmp_path, tiny_tokenizer):
    out = tmp_path / "r.json"
    proc = _locust(CHAT_FILE, sim_url, "-u", "1", "--num-requests", "3", "--prompt", "Hello world",
                   "--tokenizer", _tokenizer_file(tiny_tokenizer, tmp_path), "--max-tokens", "3",
                   "--results-json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    tokens = json.loads(out.read_text())["tokens"]
    assert tokens["prompt"] == 3 * 9  # the sim's template: 3 + 1 (role) + 2 + 3 per message list
    assert tokens["prompt_source"] == "server"
    assert tokens["requested_prompt_avg"] == 2
    assert tokens["prompt_vs_requested"]["relative_diff"] == pytest.approx(3.5)
    assert "WARNING: server prompt tokens differ from the requested lengths by 350.0%" in proc.stdout


# A served model name without a tokenizer runs on the server's usage counts.
def test_bc17_served_model_name_without_tokenizer_runs_on_server_usage(tmp_path):
    out = tmp_path / "r.json"
    with serve("--model", "my-model") as sim:
        proc = _locust(CHAT_FILE, sim.url, "-u", "1", "--num-requests", "3", "--model", "my-model",
                       "--max-tokens", "4", "--results-json", str(out),
                       env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no --tokenizer: token counts come from server usage" in proc.stderr
    tokens = json.loads(out.read_text())["tokens"]
    assert tokens["completion_source"] == "server"
    assert tokens["prompt_source"] == "server"
