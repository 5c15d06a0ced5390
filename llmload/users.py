"""Locust users that send LLM requests and account for them exactly.

Each task sends one request, reads the whole reply as bytes arrive, turns it
into a ``RequestRecord`` (``llmload.client``), adds it to this process's
``LLMStats`` and fires exactly one Locust ``request`` event whose response
time is the full E2E time (not time to headers, locust #2443) and whose
``exception`` is set for every failure, so Locust's console and web UI stay
meaningful.

Users run a closed loop (no think time): ``-u 1024`` means 1,024 requests in
flight at most.
"""

from __future__ import annotations

from locust import User, constant, task

import time
from typing import ClassVar

from gevent import GreenletExit

from llmload.client import StreamingClient
from llmload.payloads import LLMRequest, build_chat_request, build_completion_request
from llmload.record import RequestRecord
from llmload.runtime import Runtime
from llmload.transport import GeventHTTPTransport

__all__ = ["ChatUser", "CompletionUser", "LLMUser"]


class LLMRequestFailed(Exception):  # noqa: N818 - shown to Locust users as the failure type
    """Carries a failed request's error category and message into Locust's failure table."""


class LLMUser(User):
    """Base class: one keep-alive connection per user, one request per task iteration."""

    abstract = True
    wait_time = constant(0)
    endpoint: ClassVar[str] = ""

    def on_start(self) -> None:
        """Open this user's connection (lazily, on the first request)."""
        runtime = _runtime(self)
        self._transport = GeventHTTPTransport(
            self.host or self.environment.host or "",
            headers=runtime.headers,
            timeouts=runtime.config.timeouts,
            insecure=runtime.config.insecure,
        )
        self._client = StreamingClient(
            self._transport,
            token_counter=runtime.token_counter,
            total_timeout_s=runtime.config.timeouts.total_s,
        )

    def on_stop(self) -> None:
        """Close the connection."""
        transport = getattr(self, "_transport", None)
        if transport is not None:
            transport.close()

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None) -> LLMRequest:
        """Return the next request to send (``max_tokens`` overrides the option, for probes)."""
        raise NotImplementedError

    @task
    def generate(self) -> None:
        """Send one request if the run's budget allows, else wait for the run to stop."""
        runtime = _runtime(self)
        if runtime.blocked is not None or runtime.model is None or not runtime.budget.try_acquire():
            # Nothing to send in this run: park until the runner stops this user.
            runtime.idle.wait()
            return
        request = self.build_request(runtime)
        started = time.perf_counter()
        runtime.in_flight += 1
        try:
            record = self._client.run(request)
        except GreenletExit:
            runtime.stats.add_cancelled(self.endpoint, request.model)
            raise
        finally:
            runtime.in_flight -= 1
        elapsed_s = time.perf_counter() - started
        runtime.stats.add(record)
        if runtime.window_delta is not None:  # single process with the Prometheus exporter
            runtime.window_delta.add(record)
        if runtime.requests_log is not None:
            runtime.requests_log.write(record)
        runtime.budget.release()
        self._fire(request, record, elapsed_s)

    def _fire(self, request: LLMRequest, record: RequestRecord, elapsed_s: float) -> None:
        e2e_s = record.e2e_s if record.ok and record.e2e_s is not None else elapsed_s
        exception = None
        if not record.ok:
            error = record.error
            detail = f"{error.category}: {error.message}" if error else record.outcome.value
            exception = LLMRequestFailed(detail)
        self.environment.events.request.fire(
            request_type="POST",
            name=request.path,
            response_time=e2e_s * 1000.0,
            response_length=record.completion_tokens.value or 0,
            exception=exception,
            context={"model": request.model},
            response=None,
            url=request.path,
        )


class CompletionUser(LLMUser):
    """Sends ``POST /v1/completions`` with the configured prompt."""

    abstract = False
    endpoint = "completions"

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None) -> LLMRequest:
        """Build a completions request from the run configuration."""
        config = runtime.config
        return build_completion_request(
            model=runtime.model or "",
            prompt=config.prompt,
            max_tokens=max_tokens or config.max_tokens,
            temperature=config.temperature,
            ignore_eos=config.ignore_eos,
            stream=config.stream,
        )


class ChatUser(LLMUser):
    """Sends ``POST /v1/chat/completions`` with the prompt as one user message."""

    abstract = False
    endpoint = "chat"

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None) -> LLMRequest:
        """Build a chat request from the run configuration."""
        config = runtime.config
        return build_chat_request(
            model=runtime.model or "",
            messages=[{"role": "user", "content": config.prompt}],
            max_tokens=max_tokens or config.max_tokens,
            temperature=config.temperature,
            ignore_eos=config.ignore_eos,
            stream=config.stream,
        )


def _runtime(user: User) -> Runtime:
    runtime: Runtime | None = getattr(user.environment, "llmload", None)
    if runtime is None:
        raise RuntimeError(
            "llmload is not installed on this Locust environment; run a locustfile from "
            "llmload's locustfiles/ or call llmload.hooks.install(environment.events) in yours"
        )
    return runtime
