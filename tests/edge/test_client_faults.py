"""Faults while a user builds, sends or accounts a request never hang a run or hide a request.

End to end: locust command lines run in this process (``tests/edge/cluster.run_locust_here``,
NC-10). The hypothesis property (faults injected at
every step of a user's request path; a ``--num-requests N`` run always ends with
total + skipped == N) runs in process: ``tests/edge/test_user_faults.py``.
"""

from __future__ import annotations

import json

import pytest

from llmload.edge.users import ChatUser
from llmload.testing import ScriptedServer
from tests.edge.cluster import run_locust_here
from tests.edge.cluster import run_locustfile_here as run_locust
from tests.edge.test_workloads import CHAT_FILE, ChatScript, _posts

_LONE_SURROGATE_LINE = r'{"prompt": "Summarise this: great day \ud83d at the beach"}'


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_nc10_lone_surrogate_line_is_skipped_at_load_and_exactly_n_requests_are_sent(tmp_path, seed):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"prompt": "Tell me about the sea"}\n' + _LONE_SURROGATE_LINE + "\n")
    out = tmp_path / "r.json"
    with ScriptedServer(ChatScript()) as server:
        proc = run_locust(
            ["-f", CHAT_FILE, "--headless", "--only-summary", "-H", server.base_url, "-t", "60s",
             "-u", "2", "--num-requests", "4", "--dataset", str(dataset), "--seed", str(seed),
             "--results-json", str(out)],
            timeout_s=90,
        )  # fmt: skip
        posts = _posts(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{dataset}:2: lone surrogate '\\ud83d' at character 26" in proc.stderr
    assert proc.stderr.count("lone surrogate") == 1  # reported once, at load
    assert "Traceback" not in proc.stderr
    results = json.loads(out.read_text())
    assert (results["requests"]["total"], results["requests"]["skipped"]) == (4, 0)
    sent = [p["messages"][0]["content"] for p in posts if p["max_tokens"] != 2]  # not the preflight probe
    assert sent == ["Tell me about the sea"] * 4


class BrokenPromptUser(ChatUser):
    """A locustfile's user whose prompt source always fails."""

    def _next_prompt(self, runtime):
        raise RuntimeError("the prompt source is broken")


def test_repeated_client_fault_without_a_request_limit_pauses_instead_of_spinning(tmp_path):
    out = tmp_path / "r.json"
    with ScriptedServer(ChatScript()) as server:
        proc = run_locust_here(
            BrokenPromptUser,
            ["--headless", "--only-summary", "-H", server.base_url, "-t", "3s",
             "-u", "2", "-r", "2", "--results-json", str(out)],
            users=2,
            timeout_s=60,
        )  # fmt: skip
    results = json.loads(out.read_text())
    skipped = results["requests"]["skipped"]
    # Per user in 3 s: pauses of 0.05, 0.1, 0.2, 0.4, 0.8, 1, 1 s ... allow at most 8 skips each;
    # a busy loop would skip thousands.
    assert 2 <= skipped <= 16, (skipped, proc.stderr[-2000:])
    assert proc.stderr.count("a request was skipped") == 1  # logged once per cause
    assert proc.returncode == 1
