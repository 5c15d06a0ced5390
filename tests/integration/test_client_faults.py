"""Faults while a user builds, sends or accounts a request never hang a run or hide a request.

End to end with `locust` subprocesses (NC-10), and a hypothesis property run
in a subprocess of its own (importing Locust monkey-patches the standard
library): faults injected at every step of a user's request path, the run
with ``--num-requests N`` always ends with total + skipped == N.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.procs import run_locust
from tests.integration.test_sim import REPO_ROOT
from tests.integration.test_workloads import CHAT_FILE, ChatScript, _posts

pytestmark = [pytest.mark.integration]

_LONE_SURROGATE_LINE = r'{"prompt": "Summarise this: great day \ud83d at the beach"}'


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_nc10_lone_surrogate_line_is_skipped_at_load_and_exactly_n_requests_are_sent(tmp_path, seed):
    from llmload.testing import ScriptedServer

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


# One process, N requests by a few users against a scripted server; hypothesis draws, for each
# request, the step of the user's request path that fails (or none) and how many users run.
_PROPERTY_SCRIPT = r"""
import json, sys, time
import gevent
from locust.env import Environment
from hypothesis import HealthCheck, example, given, settings, strategies as st
from llmload.settings.config import RunConfig
import dataclasses
from llmload.exporters.console import format_summary
from llmload.exporters.results import RunOutcome, build_results, judge
from llmload.edge.runtime import RequestBudget, Runtime
from llmload.testing import CF, C, Reply, ScriptedServer, U, W, sse
from llmload.net.transport import GeventHTTPTransport
from llmload.edge.users import ChatUser

STEPS = ("arrival", "prompt", "build", "connect", "post-bug", "post-oserror", "record-log", None)
SKIPPING = {"arrival", "prompt", "build", "connect", "post-bug"}  # the request is never measured


class InjectedFault(Exception):
    pass


def fail_if(user, step):
    if user.fault == step:
        if step == "build":
            raise UnicodeEncodeError("utf-8", "\ud83d", 0, 1, "surrogates not allowed")
        raise InjectedFault(f"injected at {step}")


class FaultyTransport:
    def __init__(self, inner, user):
        self.inner, self.user = inner, user

    def connect(self):
        fail_if(self.user, "connect")
        self.inner.connect()

    def post(self, path, body, headers):
        fail_if(self.user, "post-bug")
        if self.user.fault == "post-oserror":
            raise ConnectionResetError("injected reset")
        return self.inner.post(path, body, headers)


class FaultyUser(ChatUser):
    abstract = True
    plan = []

    def _send(self, runtime):
        self.fault = self.plan.pop(0) if self.plan else None
        if self.fault == "record-log":
            runtime.requests_log.fail_next = True
        return super()._send(runtime)

    def _wait_for_arrival(self, runtime):
        fail_if(self, "arrival")
        return super()._wait_for_arrival(runtime)

    def _next_prompt(self, runtime):
        fail_if(self, "prompt")
        return super()._next_prompt(runtime)

    def _request_for(self, runtime, prompt):
        fail_if(self, "build")
        return super()._request_for(runtime, prompt)

    @property
    def _client(self):
        client = ChatUser._client.fget(self)
        if not isinstance(client._transport, FaultyTransport):
            client._transport = FaultyTransport(client._transport, self)
        return client


class OnceLog:
    fail_next = False

    def write(self, record):
        if self.fail_next:
            self.fail_next = False
            raise InjectedFault("injected at record-log")


def reply(request):
    return Reply([W(1, sse(C({"content": "a"}), CF("stop"), U(3, 1), "[DONE]"))])


with ScriptedServer(reply) as server:

    @settings(max_examples=int(sys.argv[1]), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(plan=st.lists(st.sampled_from(STEPS), min_size=1, max_size=12), users=st.integers(1, 3))
    @example(plan=["arrival"] * 12, users=1)  # one user skipping every request of the budget
    def run(plan, users):
        n = len(plan)
        done = gevent.event.Event()
        # the request budget is --num-requests N, as in a real run: a skipped request does not pause the
        # user (only a run without a request limit pauses, up to 1 s a skip: 10 skips in a row would take 5.5 s)
        runtime = Runtime(config=dataclasses.replace(RunConfig(), num_requests=n))
        runtime.model = "m"
        runtime.budget = RequestBudget(n, on_done=done.set)
        runtime.requests_log = OnceLog()
        environment = Environment(user_classes=[FaultyUser], host=server.base_url)
        environment.llmload = runtime
        FaultyUser.plan = list(plan)
        population = [FaultyUser(environment) for _ in range(users)]

        def loop(user):
            user.on_start()
            while True:
                user.generate()

        tasks = [gevent.spawn(loop, u) for u in population]
        ended = done.wait(timeout=5)  # a dozen loopback requests take well under a second
        for task in tasks:
            task.kill(block=True, timeout=5)
        for user in population:
            user.on_stop()
        total = runtime.run_stats().total()
        assert ended, f"the run did not end: plan {plan}, {total.requests_by_outcome}"
        assert not [t for t in tasks if t.exception is not None and not isinstance(t.exception, gevent.GreenletExit)]
        skipped = sum(1 for step in plan if step in SKIPPING)
        assert (total.finished, total.skipped) == (n - skipped, skipped), (plan, total.requests_by_outcome)
        assert total.finished + total.skipped == n
        config = dataclasses.replace(RunConfig(), max_failure_ratio=1.0, num_requests=n)
        outcome = RunOutcome(runtime.run_stats(), config=config, host=server.base_url, model="m", users=users)
        results = build_results(outcome)
        verdict = judge(results)
        summary = format_summary(results)
        if skipped:
            assert verdict.exit_status == 1 and f"{skipped} of {n} requests were skipped" in verdict.text
            assert f"Skipped (client fault, not sent):" in summary
            causes = {e["category"] for e in results["errors"]}
            for step in set(plan) & SKIPPING:
                kind = "UnicodeEncodeError" if step == "build" else "InjectedFault"
                assert f"skipped: {kind}" in causes, (step, causes)
        else:
            assert "skipped" not in verdict.text

    started = time.monotonic()
    run()
    print(json.dumps({"ok": True, "seconds": round(time.monotonic() - started, 1)}))
"""


def test_nc10_property_faults_at_every_step_of_the_request_path_never_hang_or_hide_requests(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _PROPERTY_SCRIPT, "40"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO_ROOT,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-5000:])
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is True


_ALWAYS_FAILING_LOCUSTFILE = """
from llmload.edge.hooks import install
from llmload.edge.users import ChatUser


class BrokenPromptUser(ChatUser):
    def _next_prompt(self, runtime):
        raise RuntimeError("the prompt source is broken")


install()
"""


def test_repeated_client_fault_without_a_request_limit_pauses_instead_of_spinning(tmp_path):
    from llmload.testing import ScriptedServer

    locustfile = tmp_path / "broken.py"
    locustfile.write_text(_ALWAYS_FAILING_LOCUSTFILE)
    out = tmp_path / "r.json"
    with ScriptedServer(ChatScript()) as server:
        proc = run_locust(
            ["-f", str(locustfile), "--headless", "--only-summary", "-H", server.base_url, "-t", "3s",
             "-u", "2", "-r", "2", "--results-json", str(out)],
            timeout_s=60,
        )  # fmt: skip
    results = json.loads(out.read_text())
    skipped = results["requests"]["skipped"]
    # Per user in 3 s: pauses of 0.05, 0.1, 0.2, 0.4, 0.8, 1, 1 s ... allow at most 8 skips each;
    # a busy loop would skip thousands.
    assert 2 <= skipped <= 16, (skipped, proc.stderr[-2000:])
    assert proc.stderr.count("a request was skipped") == 1  # logged once per cause
    assert proc.returncode == 1
