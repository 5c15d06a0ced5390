"""Trace replay end to end: locust command lines run in this process against `llmload sim` or a scripted server.

``--processes 2`` runs a master and two workers here (``tests/edge/cluster.run_locust_here``); the
simulator is served in this process too. Every run is bounded by the trace's length, -t and a timeout.
The 300-line mooncake replay stays a process test (``tests/integration/test_trace_replay.py``): its
cached tokens hold only when the simulator takes the lines in trace order, which a simulator sharing
this traced process's event loop does not do at the run's start.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

from llmload.edge.users import CompletionUser
from llmload.testing import TF, ReceivedRequest, Reply, ScriptedServer, T, U, W, json_reply, sse
from tests.edge.cluster import CompletedRun, run_locust_here
from tests.integration.test_sim import metric_sum, metrics
from tests.simserver import serve

TIMEOUT_S = 120


@pytest.fixture
def cache_sim() -> Iterator[str]:
    with serve("--decode-step-ms", "2", "--prefix-cache-blocks", "100000", "--block-size", "16") as sim:
        yield sim.url


def run_locust(args: list[str], *, timeout_s: float) -> CompletedRun:
    """``locust -f locustfiles/completions.py ARGS`` run here."""
    assert args[:2] == ["-f", "locustfiles/completions.py"]
    return run_locust_here(CompletionUser, args[2:], users=1, timeout_s=timeout_s)


def test_issue21_bad_trace_lines_stop_the_run_before_load_naming_line_and_field(cache_sim, tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(
        b'{"timestamp": 4, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        b'{"timestamp": 5, "output_length": 2, "hash_ids": [1]}\n'
        b'{"timestamp": -1, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        b'{"timestamp": 3, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        b'{"timestamp": 9, "input_length": 10, "output_length": 2, "hash_ids": [1], "x": "\xff"}\n'
        b'{"timestamp": 10, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
    )
    args = ["-f", "locustfiles/completions.py", "--headless", "--only-summary", "-H", cache_sim, "-t", "30s",
            "--prometheus-port", "0", "-u", "2", "--trace", str(trace), "--ignore-eos", "--skip-preflight"]  # fmt: skip
    proc = run_locust(args, timeout_s=TIMEOUT_S)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{trace}:2: missing field 'input_length'" in proc.stderr
    assert f"{trace}:3: field 'timestamp' is negative" in proc.stderr
    assert "has 4 bad line(s), nothing was sent" in proc.stderr
    assert metric_sum(metrics(cache_sim), "llmload_sim_requests_completed_total") == 0

    out = tmp_path / "r.json"
    proc = run_locust([*args, "--trace-skip-bad", "--results-json", str(out)], timeout_s=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipped trace line {trace}:4: out of order" in proc.stderr
    assert f"skipped trace line {trace}:5: not UTF-8 text" in proc.stderr
    assert "2 requests over 0.006 s, 4 bad lines skipped" in proc.stderr
    assert json.loads(out.read_text())["requests"]["succeeded"] == 2
    assert metric_sum(metrics(cache_sim), "llmload_sim_requests_completed_total") == 2


def test_issue21_jsonl_trace_sends_its_own_prompts_once_with_the_session_header(tmp_path):
    """A jsonl trace's own prompts, each line once over two workers, each with its session's header value."""
    lines = [
        {"offset_s": i * 0.02, "prompt": f"line {i}", "max_tokens": 2, "session_id": f"s{i % 4}"} for i in range(40)
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    seen: list[tuple[str, str | None]] = []

    def script(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}))
        seen.append((request.json()["prompt"], request.headers.get("x-session-id")))
        return Reply([W(2, sse(T("ok"), TF("length"), U(2, 1), "[DONE]"))])

    with ScriptedServer(script) as server:
        proc = run_locust(
            ["-f", "locustfiles/completions.py", "--headless", "--only-summary", "-H", server.base_url, "-t", "60s",
             "--prometheus-port", "0", "--skip-preflight", "--processes", "2", "-u", "4", "-r", "100",
             "--trace", str(trace), "--session-header", "X-Session-ID"],
            timeout_s=TIMEOUT_S,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(seen) == sorted((line["prompt"], line["session_id"]) for line in lines)
    assert "trace " in proc.stderr
    assert "(jsonl, 40 requests over 0.780 s)" in proc.stderr


def test_issue21_a_sessions_trace_lines_go_to_one_worker_in_order_each_line_once(tmp_path):
    """Two workers: every line once, all of a session's lines from one worker, a turn only after the previous one.

    Which worker sent a line is read from its own ``--requests-log`` file: the server answers line i with
    i + 1 completion tokens. The server holds each reply 200 ms while a session's lines are 100 ms apart
    in the trace; its own log says when each request was received and when its reply's last byte went
    out, so a turn sent before the previous one completed arrives before that. (Times taken in the
    script instead lag the receipt by however long the server's thread waited, and a busy machine
    made two turns look 176 ms apart: 2026-12-04.)
    """
    names = ["s0", "s1", "s2", "s4", "s5"]  # crc32 mod 2: workers 0, 0, 0, 1, 1
    lines = [
        {"offset_s": i * 0.02, "prompt": f"line {i}", "max_tokens": 2, "session_id": names[i % 5]} for i in range(40)
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    arrived: dict[int, str | None] = {}

    def script(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}))
        i = int(request.json()["prompt"].split()[1])
        assert i not in arrived
        arrived[i] = request.headers.get("x-session-id")
        return Reply([W(200, sse(T("ok"), TF("length"), U(2, i + 1), "[DONE]"))])

    log = tmp_path / "req.jsonl"
    with ScriptedServer(script) as server:
        proc = run_locust(
            ["-f", "locustfiles/completions.py", "--headless", "--only-summary", "-H", server.base_url, "-t", "60s",
             "--prometheus-port", "0", "--skip-preflight", "--processes", "2", "-u", "8", "-r", "100",
             "--trace", str(trace), "--session-header", "X-Session-ID", "--requests-log", str(log)],
            timeout_s=TIMEOUT_S,
        )  # fmt: skip
        # the server's own times (one clock): when line i's request was received, when its reply ended
        sends = {
            int(request.json()["prompt"].split()[1]): server.send_log(k)
            for k, request in enumerate(server.requests)
            if request.method == "POST"
        }
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(arrived) == sorted(sends) == list(range(40))
    assert all(arrived[i] == line["session_id"] for i, line in enumerate(lines))
    worker_of: dict[int, str] = {}
    for path in sorted(tmp_path.glob("req.w*.jsonl")):
        for text in path.read_text().splitlines():
            record = json.loads(text)
            assert record["outcome"] == "ok", record
            worker_of[record["completion_tokens"] - 1] = path.name
    assert sorted(worker_of) == list(range(40))  # each line once, in one worker's log
    by_session: dict[str, set[str]] = {}
    for i, line in enumerate(lines):
        by_session.setdefault(line["session_id"], set()).add(worker_of[i])
    assert all(len(workers) == 1 for workers in by_session.values()), by_session
    assert len(set(worker_of.values())) == 2  # both workers sent sessions
    for name in names:
        turns = [sends[i] for i in range(40) if lines[i]["session_id"] == name]
        # each turn arrived after the previous turn's 200 ms reply had been sent whole
        for before, after in itertools.pairwise(turns):
            assert after.arrived_s >= before.writes_s[-1] >= before.arrived_s + 0.2, (name, before, after)
