"""Faults at every step of a user's request path never hang a run or hide a request (NC-10, a property).

Hypothesis draws, for each of N requests (``--num-requests N``), the step of the user's request path
that fails (or none) and how many users run; the run always ends with total + skipped == N. The users
are llmload's ``ChatUser`` in a Locust environment of this process, against a scripted server.
"""

from __future__ import annotations

from locust.env import Environment

import dataclasses
from typing import ClassVar

import gevent
import gevent.event
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llmload.edge.run_parts import RequestBudget
from llmload.edge.runtime import Runtime, attach
from llmload.edge.users import ChatUser
from llmload.exporters.console import format_summary
from llmload.exporters.results import RunOutcome, build_results, judge
from llmload.settings.config import RunConfig
from llmload.testing import CF, C, Reply, ScriptedServer, U, W, sse

STEPS = ("arrival", "prompt", "build", "connect", "post-bug", "post-oserror", "record-log", None)
SKIPPING = {"arrival", "prompt", "build", "connect", "post-bug"}  # the request is never measured


class InjectedFaultError(Exception):
    pass


def fail_if(user, step):
    if user.fault == step:
        if step == "build":
            raise UnicodeEncodeError("utf-8", "\ud83d", 0, 1, "surrogates not allowed")
        raise InjectedFaultError(f"injected at {step}")


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
    plan: ClassVar[list[str | None]] = []

    def _send(self, runtime):
        self.fault = self.plan.pop(0) if self.plan else None
        if self.fault == "record-log":
            runtime.process.requests_log.fail_next = True
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
            raise InjectedFaultError("injected at record-log")


def reply(request):
    return Reply([W(1, sse(C({"content": "a"}), CF("stop"), U(3, 1), "[DONE]"))])


def test_nc10_property_faults_at_every_step_of_the_request_path_never_hang_or_hide_requests() -> None:
    with ScriptedServer(reply) as server:

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(plan=st.lists(st.sampled_from(STEPS), min_size=1, max_size=12), users=st.integers(1, 3))
        @example(plan=["arrival"] * 12, users=1)  # one user skipping every request of the budget
        def check(plan, users):
            n = len(plan)
            done = gevent.event.Event()
            # the request budget is --num-requests N, as in a real run: a skipped request does not pause the
            # user (only a run without a request limit pauses, up to 1 s a skip: 10 skips in a row would take 5.5 s)
            runtime = Runtime(config=dataclasses.replace(RunConfig(), num_requests=n))
            runtime.process.model = "m"
            runtime.run.budget = RequestBudget(n, on_done=done.set)
            runtime.process.requests_log = OnceLog()
            environment = Environment(user_classes=[FaultyUser], host=server.base_url)
            attach(environment, runtime)
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
            total = runtime.run.totals().total()
            assert ended, f"the run did not end: plan {plan}, {total.requests_by_outcome}"
            assert not [
                t for t in tasks if t.exception is not None and not isinstance(t.exception, gevent.GreenletExit)
            ]
            skipped = sum(1 for step in plan if step in SKIPPING)
            assert (total.finished, total.skipped) == (n - skipped, skipped), (plan, total.requests_by_outcome)
            assert total.finished + total.skipped == n
            config = dataclasses.replace(RunConfig(), max_failure_ratio=1.0, num_requests=n)
            outcome = RunOutcome(runtime.run.totals(), config=config, host=server.base_url, model="m", users=users)
            results = build_results(outcome)
            verdict = judge(results)
            summary = format_summary(results)
            if skipped:
                assert verdict.exit_status == 1
                assert f"{skipped} of {n} requests were skipped" in verdict.text
                assert "Skipped (client fault, not sent):" in summary
                causes = {e["category"] for e in results["errors"]}
                for step in set(plan) & SKIPPING:
                    kind = "UnicodeEncodeError" if step == "build" else "InjectedFaultError"
                    assert f"skipped: {kind}" in causes, (step, causes)
            else:
                assert "skipped" not in verdict.text

        check()
