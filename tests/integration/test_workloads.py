"""Workloads end to end: real `locust` runs against `llmload sim` or a scripted loopback server.

Covers datasets (bad lines, disjoint worker streams), exact synthetic lengths,
multi-turn history, warm-up, goodput and the tokenizer rules (BC-15/16/17).
Every run is bounded by --num-requests, -t and a subprocess timeout.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.request.record import TokenSource
from llmload.request.tokens import HFTokenCounter
from llmload.testing import CF, TF, C, ReceivedRequest, Reply, ScriptedServer, T, U, W, json_reply, sse
from tests.integration.procs import run_locust
from tests.integration.test_sim import REPO_ROOT, metrics, start_sim, stop_sim
from tests.unit.test_client import FakeResponse, FakeTransport

pytestmark = [pytest.mark.integration]

TIMEOUT_S = 90
CHAT_FILE = "locustfiles/chat.py"
COMPLETIONS_FILE = "locustfiles/completions.py"


@pytest.fixture
def sim_url(sim_server) -> str:
    return sim_server("--decode-step-ms", "2")


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


def _locust(locustfile: str, host: str, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_locust(
        ["-f", locustfile, "--headless", "--only-summary", "-H", host, "-t", "60s", "--prometheus-port", "0", *args],
        timeout_s=TIMEOUT_S,
        env=env,
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


# A tokenizer name that is not local stops before load, without a hub request.
def test_bc17_tokenizer_name_not_local_stops_before_load_without_hub_request(tmp_path):
    url, sim = start_sim("--model", "my-model")
    hub = socket.socket()
    try:
        hub.bind(("127.0.0.1", 0))
        hub.listen(8)
        hub.setblocking(False)
        env = {
            "HF_HUB_OFFLINE": "0",  # even with hub access allowed by the environment: no request
            "TRANSFORMERS_OFFLINE": "0",
            "HF_ENDPOINT": f"http://127.0.0.1:{hub.getsockname()[1]}",
            "HF_HOME": str(tmp_path / "hf"),
        }
        proc = _locust(CHAT_FILE, url, "-u", "1", "--num-requests", "2", "--model", "my-model",
                       "--tokenizer", "my-model", env=env)  # fmt: skip
        with pytest.raises(BlockingIOError):
            hub.accept()  # nobody connected to the "hub"
        served = metrics(url)
    finally:
        hub.close()
        stop_sim(sim)
    assert proc.returncode == 2
    assert (
        'cannot load tokenizer "my-model": not a local path and hub access is disabled; '
        "add --allow-download to fetch it from the Hugging Face hub, "
        "pass --tokenizer PATH or rely on server-reported usage"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr
    completed = sum(v for (name, _), v in served.items() if name == "llmload_sim_requests_completed_total")
    assert completed == 0


# A served model name without a tokenizer runs on the server's usage counts.
def test_bc17_served_model_name_without_tokenizer_runs_on_server_usage(tmp_path):
    url, sim = start_sim("--model", "my-model")
    out = tmp_path / "r.json"
    try:
        proc = _locust(CHAT_FILE, url, "-u", "1", "--num-requests", "3", "--model", "my-model",
                       "--max-tokens", "4", "--results-json", str(out),
                       env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})  # fmt: skip
    finally:
        stop_sim(sim)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no --tokenizer: token counts come from server usage" in proc.stderr
    tokens = json.loads(out.read_text())["tokens"]
    assert tokens["completion_source"] == "server"
    assert tokens["prompt_source"] == "server"


# Case BC-15: usage present → server count used, tokenizer count kept as a diagnostic
def test_bc15_server_usage_wins_tokenizer_count_is_a_diagnostic(tiny_bos_tokenizer):
    body = sse(C({"content": "Hel"}), C({"content": "lo"}), C({"content": " world"}), CF("stop"), U(4, 3), "[DONE]")
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    counter = HFTokenCounter(tiny_bos_tokenizer)
    client = StreamingClient(
        FakeTransport(FakeResponse([body], 200, "text/event-stream")), token_counter=counter, compare_tokens=True
    )
    record = client.run(request)
    assert record.completion_tokens.value == 3
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.client_completion_tokens == 2  # "Hello world" once, no BOS
    plain = StreamingClient(FakeTransport(FakeResponse([body], 200, "text/event-stream")), token_counter=counter)
    assert plain.run(request).client_completion_tokens is None


def test_tokenizer_hub_id_in_local_cache_loads_without_any_hub_request(tmp_path, tiny_tokenizer):
    snapshot = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    tiny_tokenizer.save(str(snapshot / "tokenizer.json"))
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    (tmp_path / "hf" / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hf" / "hub" / "models--org--tiny" / "refs" / "main").write_text("abc123")
    hub = socket.socket()
    try:
        hub.bind(("127.0.0.1", 0))
        hub.listen(8)
        hub.setblocking(False)
        code = (
            "from llmload.request.tokens import load_tokenizer\n"
            "print(load_tokenizer('org/tiny').count('Hello world'))\n"
            "try:\n    load_tokenizer('org/absent')\nexcept Exception as exc:\n    print(exc)\n"
        )
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0",
            "HF_ENDPOINT": f"http://127.0.0.1:{hub.getsockname()[1]}",
            "HF_HOME": str(tmp_path / "hf"),
            "PYTHONPATH": str(REPO_ROOT),
        }
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=60, check=False)  # fmt: skip
        with pytest.raises(BlockingIOError):
            hub.accept()
    finally:
        hub.close()
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "2"
    assert lines[1].startswith('cannot load tokenizer "org/absent": not a local path and hub access is disabled')
