"""Locust users that send LLM requests and account for them exactly.

Each task sends one request, reads the whole reply as bytes arrive, turns it
into a ``RequestRecord`` (``llmload.request.client``), hands it to
``Runtime.hand_off`` (the run's series, the live window, the requests log)
and fires exactly one Locust ``request`` event whose response time is the
full E2E time (not time to headers, locust #2443) and whose ``exception`` is
set for every failure, so Locust's console and web UI stay meaningful.

Users run a closed loop (no think time): ``-u 1024`` means 1,024 requests in
flight at most.

Prompts come from the process's ``PromptStream`` (``llmload.workload.prompts``); with
``--turns`` each user keeps its own ``Conversation``. ``--warmup-requests``
are sent first (``WarmupGate``) and never reach the statistics, the requests
log or Locust's request event.
"""

from __future__ import annotations

from locust import User, constant, task
from locust.exception import StopUser

import dataclasses
import logging
import random
import time
import traceback
from typing import ClassVar

import gevent
from gevent import GreenletExit

from llmload.edge.replay import TracedRequest, finish_trace_line, take_trace_line
from llmload.edge.run_parts import WarmupGate
from llmload.edge.runtime import Runtime, runtime_of
from llmload.net.transport import GeventHTTPTransport
from llmload.net.turns import TURN_BUDGET_NS
from llmload.request.client import StreamingClient
from llmload.request.failures import grouped_error, skip_pause_s, throttle_pause_s
from llmload.request.payloads import LLMRequest, build_chat_request, build_completion_request
from llmload.request.record import ErrorInfo, Outcome, RequestRecord
from llmload.workload.datasets import Message
from llmload.workload.prompts import Conversation, Prompt
from llmload.workload.session_file import SessionPlayer, SessionStream
from llmload.workload.sessions import Session

__all__ = ["ChatUser", "CompletionUser", "LLMUser"]

log = logging.getLogger(__name__)


class LLMUser(User):
    """Base class: one keep-alive connection per user, one request per task iteration."""

    abstract = True
    wait_time = constant(0)
    endpoint: ClassVar[str] = ""

    def on_start(self) -> None:
        """Prepare this user; its connection and client are made by its first request.

        Spawning happens in one loop turn for a whole batch of users (1,024 at
        ``-r 1024``), while replies to the first requests may already be
        waiting: users that will never send (``--num-requests`` used up) cost
        nothing, and those that will pay for their client just before they send.
        """
        self._transport: GeventHTTPTransport | None = None
        self._client_or_none: StreamingClient | None = None
        runtime = _runtime(self)
        turns = runtime.process.config.turns
        self._conversation = Conversation(turns, runtime.process.token_counter) if turns > 1 else None
        self._session = Session(turns) if turns > 1 else None
        self._player: SessionPlayer | None = None  # --sessions: the recorded session this user plays
        self._throttled_streak = 0  # throttled replies in a row
        self._skipped_streak = 0  # requests skipped by a client fault in a row
        self._traced: TracedRequest | None = None  # the trace line being sent
        self._rng_or_none: random.Random | None = None  # think times, back-off jitter (``_rng``)

    def on_stop(self) -> None:
        """Close the connection."""
        transport = getattr(self, "_transport", None)
        if transport is not None:
            transport.close()

    @property
    def _rng(self) -> random.Random:
        """This user's unseeded generator of think times and back-off jitter (made on first use: 2.5 KiB a user)."""
        rng = self._rng_or_none
        if rng is None:
            rng = self._rng_or_none = random.Random()
        return rng

    @property
    def _client(self) -> StreamingClient:
        """This user's client over its own keep-alive connection (made on first use)."""
        client = self._client_or_none
        if client is None:
            runtime = _runtime(self)
            config = runtime.process.config
            self._transport = GeventHTTPTransport(
                self.host or self.environment.host or "",
                headers=self.connection_headers(runtime),
                timeouts=config.timeouts,
                insecure=config.insecure,
                addresses=runtime.process.addresses,
                turns=runtime.process.turns,
                proxy=runtime.process.proxy,
            )
            client = self._client_or_none = StreamingClient(
                self._transport,
                token_counter=runtime.process.token_counter,
                total_timeout_s=config.timeouts.total_s,
                keep_text=config.turns > 1 or config.sessions is not None,
                compare_tokens=runtime.process.token_counter is not None,
                wall_clock=runtime.now_unix,
                same_text=runtime.run.same_text,
            )
        return client

    @classmethod
    def connection_headers(cls, runtime: Runtime) -> dict[str, str]:
        """Headers sent with every request of this user's connection (and its preflight probe): the run's."""
        return runtime.process.headers

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None, prompt: Prompt | None = None) -> LLMRequest:
        """Return a request for ``prompt``.

        Args:
            runtime: the process's run state.
            max_tokens: overrides every other max_tokens (probes); a probe
                without ``prompt`` uses the workload's first prompt and does
                not advance the prompt stream.
            prompt: what to send; default: the next prompt of this process's stream.
        """
        raise NotImplementedError

    @task
    def generate(self) -> None:
        """Send one request if the run's budget allows, else wait for the run to stop.

        Nothing escapes this task when the run stops: a ``KeyboardInterrupt``
        that reaches this greenlet (Ctrl-C before llmload's SIGINT handler
        was installed) is handed to Locust's main greenlet, which stops the
        run, and this user ends quietly; its in-flight request is cancelled.
        """
        try:
            self._generate()
        except KeyboardInterrupt as exc:
            interrupt = _runtime(self).process.interrupt_main
            if interrupt is None:
                raise
            interrupt()
            raise GreenletExit from exc

    def _generate(self) -> None:
        runtime = _runtime(self)
        if runtime.run.budget.closed:
            raise StopUser  # started after this process's run ended (a late spawn message): send nothing
        if runtime.run.blocked is not None or runtime.process.model is None:
            runtime.process.idle.wait()  # nothing to send in this run: park until the runner stops this user
            return
        warmup = runtime.run.warmup
        if warmup is not None and not warmup.done:
            if warmup.try_acquire():
                self._warm_up(runtime, warmup)
                return
            warmup.wait()
        if not runtime.run.budget.try_acquire():
            runtime.process.idle.wait()
            return
        self._counted = False
        pause_s = 0.0
        try:
            pause_s = self._send(runtime)
            self._skipped_streak = 0
        except StopUser:
            runtime.run.budget.release()
            raise
        except Exception as exc:  # building, sending or accounting the request failed: skip it, go on
            self._skip(runtime, exc)
            self._skipped_streak += 1
            if (
                runtime.run.schedule is None
                and runtime.run.trace is None
                and runtime.process.config.num_requests is None
            ):
                # A fault that repeats would otherwise spin the user at full CPU until -t ends.
                pause_s = skip_pause_s(self._skipped_streak)
        finally:
            finish_trace_line(runtime, self._traced)  # its session's next trace line may go
            self._traced = None
        runtime.run.budget.release()
        if pause_s > 0:
            gevent.sleep(pause_s)

    def _send(self, runtime: Runtime) -> float:
        """Send one request of the budget and account for it (``self._counted`` once it is in the stats).

        Returns how long to pause before the next request: closed loop, after
        a throttled reply (``throttle_pause_s``); 0 otherwise (the open-loop
        schedule is never changed).
        """
        intended_s: float | None
        trace_session: str | None = None
        if runtime.run.trace is not None:
            traced = self._traced = take_trace_line(runtime)
            if traced is None:
                raise StopUser  # this process's trace share is all sent
            intended_s, prompt, trace_session = traced.intended_s, traced.prompt, traced.session_id
        elif runtime.run.session_stream is not None:
            intended_s = self._wait_for_arrival(runtime)
            prompt = self._session_prompt(runtime.run.session_stream)
        else:
            intended_s = self._wait_for_arrival(runtime)
            prompt = self._next_prompt(runtime)
        request = self._request_for(runtime, prompt)
        session, header = self._session, runtime.process.config.session_header
        session_value = trace_session if trace_session is not None else session.id if session is not None else None
        if session_value is not None and header:
            request = dataclasses.replace(request, headers=(*request.headers, (header, session_value)))
        runtime.process.turns.yield_if_turn_over(TURN_BUDGET_NS)  # the send and its connection, if any
        slot = runtime.run.concurrency
        if slot is not None:
            slot.acquire()
        if runtime.run.budget.closed:  # the run ended while this user waited for its arrival or a slot
            if slot is not None:
                slot.release()
            raise StopUser
        client = self._client
        started = time.perf_counter()
        run = runtime.run  # the run this request belongs to, should a new run start before it ends
        run.in_flight += 1
        try:
            record = client.run(request)
            if runtime.process.learn_usage_refused(self.endpoint, record):
                request = self._request_for(runtime, prompt)  # once more, without stream_options
                record = client.run(request)
        except BaseException as exc:
            # The stop (GreenletExit from the runner, a KeyboardInterrupt, SystemExit) ended the
            # request mid-read: cancelled, if the server got it. client.run raises no Exception
            # for a per-request failure; one that does escape is a bug and is not a cancellation.
            if not isinstance(exc, Exception) and client.request_sent:
                runtime.count_cancelled(self.endpoint, request.model)
                runtime.run.sends.note(started, intended_s)
            raise
        finally:
            run.in_flight -= 1
            if slot is not None:
                slot.release()
        elapsed_s = time.perf_counter() - started
        runtime.run.sends.note(started, intended_s)
        if intended_s is not None:
            record.dispatch_delay_s = max(0.0, started - intended_s)
        think_s = 0.0
        if session is not None and not session.account(record, started, started + elapsed_s):
            think_s = self._pause_before_next_turn(runtime, prompt, record)
        elif session is not None:
            self._player = None  # the session ended: the next request starts the next one
        slo = runtime.process.config.slo
        met_slo = slo is not None and slo.met_by(record)
        self._counted = True  # from here on a fault does not count it again (as skipped)
        runtime.hand_off(record, met_slo=met_slo)
        runtime.process.note_not_streamed(self.endpoint, request.stream, record)
        self._note_reply(prompt, record)
        self._fire(request, record, elapsed_s)
        if record.outcome is not Outcome.THROTTLED:
            self._throttled_streak = 0
            return think_s
        self._throttled_streak += 1
        if runtime.run.schedule is not None or runtime.run.trace is not None:
            return 0.0
        return throttle_pause_s(
            record.retry_after_s, self._throttled_streak, runtime.process.config.max_retry_after_s, self._rng.random()
        )

    def _note_reply(self, prompt: Prompt, record: RequestRecord) -> None:
        """Keep a counted reply in this user's conversation (``--turns``); a failure ends the conversation."""
        if self._conversation is not None:
            self._conversation.record_reply(prompt, record.output_text if record.ok else None)

    def _session_prompt(self, stream: SessionStream) -> Prompt:
        """The next step of this user's recorded session (a new session after the last one ended)."""
        player = self._player
        if player is None or player.next_step is None:
            player = self._player = SessionPlayer(
                stream.next(), history_from_dataset=_runtime(self).process.config.session_history == "dataset"
            )
            self._session = Session(len(player.spec.steps))
        step = player.next_step
        assert step is not None
        return Prompt(messages=player.messages(), max_tokens=step.max_tokens)

    def _pause_before_next_turn(self, runtime: Runtime, prompt: Prompt, record: RequestRecord) -> float:
        """Seconds to wait before the session's next turn: its tool delay or think time, else ``--think-time``."""
        player = self._player
        if player is not None:
            player.record_reply(prompt.messages, record.output_text or "")
            step = player.next_step
            if step is not None and step.pause_s is not None:
                return step.pause_s
        think = runtime.process.config.think_time
        return think.draw(self._rng) if think is not None else 0.0

    def _skip(self, runtime: Runtime, exc: Exception) -> None:
        """Count a request the client could not build, send or measure; log each cause once, with its traceback.

        A request already counted (the fault came after its record reached
        the statistics) is not counted again.
        """
        cause = f"{type(exc).__name__}: {exc}"
        if not self._counted:
            record = RequestRecord(
                endpoint=self.endpoint,
                model=runtime.process.model or "",
                started_at_unix=runtime.now_unix(),
                outcome=Outcome.SKIPPED,
                error=ErrorInfo(f"skipped: {type(exc).__name__}", cause[:500]),
            )
            runtime.hand_off(record, log_it=False)  # never sent: not a line of the requests log
        key = f"{type(exc).__name__}:{_where(exc)}"
        if key not in runtime.process.faults_reported:
            runtime.process.faults_reported.add(key)
            log.error(
                "llmload: %s: %s (logged once per cause)",
                "accounting a counted request failed" if self._counted else "a request was skipped",
                cause,
                exc_info=exc,
            )

    def _request_for(self, runtime: Runtime, prompt: Prompt) -> LLMRequest:
        """The request for ``prompt``, built once per process and prompt (bodies of a fixed prompt repeat)."""
        cache = runtime.process.request_cache
        if cache.config is not runtime.process.config or cache.model != runtime.process.model:
            cache.reset(runtime.process.config, runtime.process.model)
        key = (self.endpoint, prompt)
        request = cache.requests.get(key)
        if request is None:
            request = self.build_request(runtime, prompt=prompt)
            cache.keep(key, request)
        return request

    def _next_prompt(self, runtime: Runtime) -> Prompt:
        conversation = self._conversation
        if conversation is None:
            return _draw(runtime)
        return conversation.next_prompt(_draw(runtime, with_prefix=conversation.starting))

    def _warm_up(self, runtime: Runtime, warmup: WarmupGate) -> None:
        """Send one warm-up request; nothing about it is counted or reported."""
        request = self.build_request(runtime, prompt=_draw(runtime))
        ok = False
        try:
            ok = self._client.run(request).ok
        finally:
            warmup.release(ok=ok)

    @staticmethod
    def _wait_for_arrival(runtime: Runtime) -> float | None:
        """Open loop: take the next arrival of this process's schedule and sleep until it is due.

        Returns the intended send time (``time.perf_counter`` seconds), or None in
        closed-loop runs. Arrivals are absolute offsets from one start, so a late
        wake-up never delays the following arrivals (the schedule cannot drift); an arrival
        that finds every user busy is taken late by the next free user, and that
        wait is recorded as dispatch delay (coordinated omission made visible).
        """
        schedule = runtime.run.schedule
        if schedule is None:
            return None
        if runtime.run.schedule_start_s == 0.0:
            runtime.run.schedule_start_s = time.perf_counter()  # after warm-up: the schedule starts with load
        intended_s = runtime.run.schedule_start_s + schedule.next_offset_s()
        delay_s = intended_s - time.perf_counter()
        if delay_s > 0:
            runtime.process.turns.due(time.time_ns() + int(delay_s * 1e9))  # the loop holds no poll past it
            gevent.sleep(delay_s)
        return intended_s

    def _fire(self, request: LLMRequest, record: RequestRecord, elapsed_s: float) -> None:
        e2e_s = record.e2e_s if record.ok and record.e2e_s is not None else elapsed_s
        self.environment.events.request.fire(
            request_type="POST",
            name=request.path,
            response_time=e2e_s * 1000.0,
            response_length=record.completion_tokens.value or 0,
            exception=grouped_error(record, _runtime(self).run.failure_samples),
            context={"model": request.model},
            response=None,
            url=request.path,
        )


class CompletionUser(LLMUser):
    """Sends ``POST /v1/completions``; a chat-style prompt is sent as its joined message text."""

    abstract = False
    endpoint = "completions"

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None, prompt: Prompt | None = None) -> LLMRequest:
        """Build a completions request (see ``LLMUser.build_request``)."""
        config = runtime.process.config
        prompt = _prompt_for(runtime, max_tokens, prompt)
        return build_completion_request(
            model=runtime.process.model or "",
            prompt=prompt.text,
            max_tokens=max_tokens or prompt.max_tokens or config.max_tokens,
            temperature=config.temperature,
            ignore_eos=config.ignore_eos,
            stream=config.stream,
            requested_prompt_tokens=prompt.requested_tokens,
            extra=config.extra_body,
            max_tokens_field=config.max_tokens_field,
            include_usage=runtime.process.include_usage(cls.endpoint),
            path=config.endpoint_path,
        )


class ChatUser(LLMUser):
    """Sends ``POST /v1/chat/completions`` with the prompt's messages."""

    abstract = False
    endpoint = "chat"

    @classmethod
    def build_request(cls, runtime: Runtime, max_tokens: int | None = None, prompt: Prompt | None = None) -> LLMRequest:
        """Build a chat request (see ``LLMUser.build_request``)."""
        config = runtime.process.config
        prompt = _prompt_for(runtime, max_tokens, prompt)
        return build_chat_request(
            model=runtime.process.model or "",
            messages=[m.as_dict() for m in prompt.messages],
            max_tokens=max_tokens or prompt.max_tokens or config.max_tokens,
            temperature=config.temperature,
            ignore_eos=config.ignore_eos,
            stream=config.stream,
            requested_prompt_tokens=prompt.requested_tokens,
            extra=config.extra_body,
            max_tokens_field=config.max_tokens_field,
            include_usage=runtime.process.include_usage(cls.endpoint),
            path=config.endpoint_path,
        )


def _prompt_for(runtime: Runtime, max_tokens: int | None, prompt: Prompt | None) -> Prompt:
    if prompt is not None:
        return prompt
    if max_tokens is not None and runtime.process.workload is not None:
        return runtime.process.workload.prompt_at(0)  # a probe: do not advance the stream
    return _draw(runtime)


def _draw(runtime: Runtime, *, with_prefix: bool = True) -> Prompt:
    """The next prompt of this process (the plain ``--prompt`` before a workload exists)."""
    if runtime.run.prompts is not None:
        return runtime.run.prompts.next(with_prefix=with_prefix)
    if runtime.process.workload is not None:
        return runtime.process.workload.prompt_at(0, with_prefix=with_prefix)
    return Prompt(messages=(Message("user", runtime.process.config.prompt),))


def _where(exc: BaseException) -> str:
    """``file:line`` where ``exc`` was raised (the innermost frame); "" if unknown."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def _runtime(user: User) -> Runtime:
    runtime = runtime_of(user.environment)
    if runtime is None:
        raise RuntimeError(
            "llmload is not installed on this Locust environment; run a locustfile from "
            "llmload's locustfiles/ or call llmload.edge.hooks.install(environment.events) in yours"
        )
    return runtime
