"""A ``--processes`` launch and the master's port: a port another run holds is refused before anything forks.

Real ``locust`` processes (the fork and the bind are the operating system's), on 127.0.0.1,
each bounded by a subprocess timeout. The port another run holds is held the way Locust's
master holds it: a zmq ROUTER socket bound to it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import zmq

from llmload.testing import CF, ROLE, C, Reply, ScriptedServer, U, W, json_reply, sse
from tests.checks import MODELS, models_route
from tests.integration.procs import free_port
from tests.integration.test_sim import REPO_ROOT

pytestmark = [pytest.mark.integration]

_RESULTS_LINE = "LLMLOAD_RESULTS "


def _locust(args: list[str], timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    """``python -m locust ARGS`` as typed: no master port added (``procs.locust_argv`` adds one)."""
    argv = [sys.executable, "-m", "locust", *args, "--prometheus-port", "0"]
    return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)


@pytest.mark.parametrize("bind_too", [False, True], ids=["--master-port", "--master-bind-port and --master-port"])
def test_second_processes_launch_on_a_taken_master_port_is_refused_before_load_in_one_line(tmp_path, bind_too):
    """Issue 24: a second ``--processes 2`` launch while another run's master held the port ended in
    Locust's raw ``RPCError: Socket bind failure`` traceback (exit status 1), after its forked workers
    had dialled the other run's master. Now: one line naming the port and the fix, the blocked results
    with the values given, exit status 2, nothing forked, nothing sent to the other master or the server."""
    out = tmp_path / "r.json"
    port = free_port()
    context = zmq.Context()
    other = context.socket(zmq.ROUTER)  # the other run's master
    try:
        other.bind(f"tcp://127.0.0.1:{port}")
        with ScriptedServer(lambda _request: json_reply(200, MODELS)) as server:
            proc = _locust(
                ["-f", "locustfiles/chat.py", "--headless", "--processes", "2", "--master-bind-host", "127.0.0.1",
                 *(["--master-bind-port", str(port)] if bind_too else []), "--master-port", str(port),
                 "-H", server.base_url, "-u", "2", "-r", "2", "--num-requests", "4", "--results-json", str(out)]
            )  # fmt: skip
            sent = list(server.requests)
        joined = other.poll(timeout=500)  # a forked worker would have said client_ready by now
    finally:
        other.close(linger=0)
        context.term()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("llmload: error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"llmload: error: --processes 2: the master port 127.0.0.1:{port} is already in use")
    assert ("pass --master-bind-port " if bind_too else "pass --master-port ") in lines[0]
    assert lines[0].endswith("or stop the other run")
    assert joined == 0  # no worker of this launch joined the other run
    assert sent == []  # refused before the preflight, too
    results = json.loads(out.read_text())
    assert results["exit_status"] == 2
    assert results["blocked"] == lines[0].removeprefix("llmload: error: ")
    given = {"--processes": "2", "--master-port": str(port)}
    assert results["run"]["refused_options"] == {**given, **({"--master-bind-port": str(port)} if bind_too else {})}
    assert results["run"]["num_requests"] == 4
    printed = [line for line in proc.stdout.splitlines() if line.startswith(_RESULTS_LINE)]
    assert [json.loads(line[len(_RESULTS_LINE) :]) for line in printed] == [results]


def test_processes_with_master_port_alone_moves_the_master_to_that_port(tmp_path):
    """The fix the refusal names works: ``--processes 2 --master-port P`` (no --master-bind-port) binds the
    master at P, where the forked workers dial (the master stayed at 5557 and the run was refused)."""
    out = tmp_path / "r.json"
    port = free_port()
    reply = Reply(writes=[W(5, sse(ROLE, C({"content": "hi"}), CF("stop"), U(3, 1), "[DONE]"))])
    with ScriptedServer(models_route(reply)) as server:
        proc = _locust(
            ["-f", "locustfiles/chat.py", "--headless", "--processes", "2", "--master-bind-host", "127.0.0.1",
             "--master-port", str(port), "-H", server.base_url, "-u", "2", "-r", "2", "--num-requests", "6",
             "--results-json", str(out)],
            timeout_s=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["run"]["workers"] == 2
    assert results["requests"]["succeeded"] == 6
    assert results["run"]["refused_options"] == {}
