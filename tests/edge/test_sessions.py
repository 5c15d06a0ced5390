"""Multi-turn sessions end to end: locust command lines run in this process against a scripted loopback server.

The session header is checked where it matters, at the server; think times by
the server's arrival times; per-turn and per-session figures in the results.
Each run is ``tests/edge/cluster.run_locust_here`` (``--processes 2``: a master and two workers
here), bounded by --num-requests, -t and a timeout.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from llmload.edge.users import ChatUser
from llmload.exporters.html import render_report
from llmload.testing import CF, C, ReceivedRequest, Reply, ScriptedServer, U, W, json_reply, sse
from tests.edge.cluster import run_locust_here

TIMEOUT_S = 90
THINK_S = 0.3


def received_s(server: ScriptedServer) -> dict[int, float]:
    """``id(request) -> when the server had received it`` (perf_counter s): the time its reply's schedule starts from.

    Read inside the server's ``with`` block. A time taken in the script instead comes later, by however
    long the server's thread waited to call it: on a busy machine, enough to shrink a gap by tens of ms.
    """
    return {id(request): server.send_log(k).arrived_s for k, request in enumerate(server.requests)}


class SessionScript:
    """Answers chat POSTs (after 5 ms) and keeps each request with its session header and history length.

    ``fail_turn``: answer HTTP 500 to every request of that turn (1 = first).
    """

    def __init__(self, fail_turn: int | None = None) -> None:
        self.fail_turn = fail_turn
        self.seen: list[tuple[ReceivedRequest, str | None, int]] = []
        self._lock = threading.Lock()

    def __call__(self, request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}))
        messages = request.json()["messages"]
        turn = (len(messages) + 1) // 2
        with self._lock:
            self.seen.append((request, request.headers.get("x-session-id"), turn))
        if turn == self.fail_turn:
            return json_reply(500, '{"error": {"message": "scripted failure"}}')
        return Reply([W(5, sse(C({"content": f"reply to turn {turn}"}), CF("stop"), U(10 * turn, 4), "[DONE]"))])


def _run(server: ScriptedServer, out: Path, *args: str) -> Any:
    return run_locust_here(
        ChatUser,
        ["--headless", "--only-summary", "-H", server.base_url, "-t", "60s",
         "--prometheus-port", "0", "--skip-preflight", "--turns", "3", "--session-header", "X-Session-ID",
         "--results-json", str(out), *args],
        users=1,
        timeout_s=TIMEOUT_S,
    )  # fmt: skip


@pytest.mark.parametrize("processes", [1, 2])
def test_issue21_sessions_send_their_header_hold_think_times_and_report_turns(tmp_path, processes):
    """One user per process, 12 requests: 4 sessions of 3 turns (2 per worker: their figures merge exactly)."""
    script = SessionScript()
    out = tmp_path / "r.json"
    spread = ("--processes", "2", "-u", "2", "-r", "10") if processes == 2 else ("-u", "1")
    with ScriptedServer(script) as server:
        proc = _run(server, out, *spread, "--num-requests", "12", "--think-time", str(THINK_S))
        received = received_s(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_session: dict[str | None, list[tuple[float, int]]] = defaultdict(list)
    for request, session, turn in script.seen:
        by_session[session].append((received[id(request)], turn))
    assert None not in by_session  # the header is on every request
    assert len(by_session) == 4  # 12 requests: 4 sessions of 3 turns, each its own value
    for requests in by_session.values():
        assert [turn for _, turn in requests] == [1, 2, 3]  # one session's turns, history growing
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(requests)]
        assert all(THINK_S <= gap < THINK_S + 0.25 for gap in gaps), gaps  # reply (~5 ms) + think time
    sessions = json.loads(out.read_text())["sessions"]
    assert sessions["completed"] == 4
    assert sessions["failed"] == 0
    assert sessions["turns_completed_mean"] == 3
    assert sessions["turns_per_session"] == 3
    assert sessions["session_header"] == "X-Session-ID"
    assert sessions["think_time"] == f"{THINK_S:g}"
    assert sessions["duration_s"]["count"] == 4
    assert sessions["duration_s"]["p50"] >= 2 * THINK_S  # two think times in each
    turns = sessions["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert [t["requests"] for t in turns] == [4, 4, 4]
    assert [t["prompt_tokens_mean"] for t in turns] == [10, 20, 30]  # the server's usage: prompt growth
    assert all(t["ttft_mean_s"] is not None and t["ttft_mean_s"] > 0.004 for t in turns)
    # the time series has each interval's mean TTFT by turn, and the HTML report charts it
    results = json.loads(out.read_text())
    total = [row for row in results["timeseries"] if row["endpoint"] is None]
    by_turn = [row["turn_ttft_mean_s"] for row in total if row["turn_ttft_mean_s"] is not None]
    assert {turn for means in by_turn for turn in means} == {"1", "2", "3"}
    assert all(value > 0.004 for means in by_turn for value in means.values())
    assert 'data-fields="ttft_turn1_mean_s,ttft_turn2_mean_s,ttft_turn3_mean_s"' in render_report([results])


def test_issue21_a_session_failing_mid_way_is_counted_failed(tmp_path):
    script = SessionScript(fail_turn=2)
    out = tmp_path / "r.json"
    with ScriptedServer(script) as server:
        proc = _run(server, out, "-u", "1", "--num-requests", "4", "--max-failure-ratio", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [turn for _, _, turn in script.seen] == [1, 2, 1, 2]  # a failed turn ends the session
    assert len({session for _, session, _ in script.seen}) == 2
    sessions = json.loads(out.read_text())["sessions"]
    assert (sessions["completed"], sessions["failed"], sessions["turns_completed_mean"]) == (0, 2, 1)
    assert [t["requests"] for t in sessions["turns"]] == [2, 2]
    assert sessions["turns"][1]["ttft_mean_s"] is None  # no success on turn 2


class AgentScript:
    """Answers chat POSTs and keeps each request with its session header and messages."""

    def __init__(self) -> None:
        self.seen: list[tuple[ReceivedRequest, str | None, list[dict[str, Any]]]] = []
        self._lock = threading.Lock()

    def __call__(self, request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}))
        with self._lock:
            self.seen.append((request, request.headers.get("x-session-id"), request.json()["messages"]))
        return Reply([W(2, sse(C({"content": "server reply"}), CF("stop"), U(10, 2), "[DONE]"))])


def test_issue21_agentic_session_file_sends_tool_turns_after_their_delays(tmp_path):
    script = AgentScript()
    out = tmp_path / "r.json"
    example = Path(__file__).resolve().parents[2] / "examples" / "agentic_sessions.jsonl"
    with ScriptedServer(script) as server:
        proc = run_locust_here(
            ChatUser,
            ["--headless", "--only-summary", "-H", server.base_url, "-t", "60s",
             "--prometheus-port", "0", "--skip-preflight", "--sessions", str(example), "--session-history",
             "dataset", "--session-header", "X-Session-ID", "-u", "1", "--num-requests", "7",
             "--results-json", str(out)],
            users=1,
            timeout_s=TIMEOUT_S,
        )  # fmt: skip
        received = received_s(server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_session: dict[str | None, list[tuple[float, list[dict[str, Any]]]]] = defaultdict(list)
    for request, session, messages in script.seen:
        by_session[session].append((received[id(request)], messages))
    agent, support = sorted(by_session.values(), key=len, reverse=True)
    assert [[m["role"] for m in msgs] for _, msgs in agent] == [
        ["system", "user"],
        ["system", "user", "assistant", "tool"],
        ["system", "user", "assistant", "tool", "assistant", "tool"],
        ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user"],
    ]
    call, result = agent[1][1][2], agent[1][1][3]
    assert call["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path": "src/parse.py"}'}
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert call["content"] == "server reply"  # the reply received becomes the tool call (no recorded one)
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(agent)]
    assert 0.2 <= gaps[0] < 0.45
    assert 1.5 <= gaps[1] < 1.75
    assert 4.0 <= gaps[2] < 4.25
    # --session-history dataset: the recorded assistant reply is the history, not the server's
    assert support[1][1][1]["content"].startswith("I am sorry to hear that")
    sessions = json.loads(out.read_text())["sessions"]
    assert (sessions["completed"], sessions["failed"]) == (2, 0)
    assert sessions["turns_per_session"] is None  # each session has its own steps (it read 1, --turns' default)
    assert [t["requests"] for t in sessions["turns"]] == [2, 2, 2, 1]
