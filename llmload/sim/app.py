"""The simulator's WSGI application: routing, request intake and reply writers.

Each generation request is written by its own handler greenlet (one per
connection, from ``gevent.pywsgi``). Streams use the WSGI ``write`` callable
so that every write is timed and a failed write (client gone) is seen at
once: the sequence leaves the engine and the request is counted as aborted.
Headers go out with the first chunk. A client that disconnects while its
request is still queued, or during a non-streaming request, is noticed at
the next write attempt.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

import gevent
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from llmload.sim.api_replies import (
    API_ENDPOINTS,
    MessagesStreamEncoder,
    ResponsesStreamEncoder,
    ResponseStore,
    encode_api_whole_reply,
    encode_embeddings,
    failure_event,
    parse_api_request,
)
from llmload.sim.config import SimConfig
from llmload.sim.engine import Engine, Sequence
from llmload.sim.faults import (
    IMMEDIATE_FAULTS,
    NO_FAULT,
    RETRY_AFTER_S,
    ErrorShape,
    FaultKind,
    FaultPlan,
    apply_reply_fault,
    encode_error,
    midstream_cut,
    plan_faults,
    plan_reply_fault,
)
from llmload.sim.metrics import SimMetrics
from llmload.sim.prefix_cache import PrefixCache, PrefixCacheCollector, prompt_tokens_of
from llmload.sim.protocol import Endpoint, ErrorReply, GenerationRequest, parse_generation_request
from llmload.sim.replies import ReplyPlan, StreamEncoder, encode_whole_reply, plan_reply
from llmload.sim.shaped_replies import PING, ShapedStreamEncoder, encode_shaped_whole_reply  # reply shapes
from llmload.sim.shapes import NO_SHAPE, ShapePlan, plan_shapes  # reply shapes

__all__ = ["MAX_BODY_BYTES", "SimApp"]

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest accepted request body; larger ones get 413."""

StartResponse = Callable[..., Callable[[bytes], object]]

_JSON = ("Content-Type", "application/json")
_SSE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache")]
_GENERATION = {e.value: e for e in Endpoint}


class SimApp:
    """WSGI callable serving the OpenAI-compatible endpoints of one simulator.

    Args:
        config: served model, context length and seed.
        engine: the shared step loop.
        metrics: ground-truth counters to update.
        registry: rendered by ``GET /metrics``.
        clock: monotonic seconds, for TTFT and duration.
        wall_clock: Unix seconds, only for the ``created`` fields.
    """

    def __init__(
        self,
        *,
        config: SimConfig,
        engine: Engine,
        metrics: SimMetrics,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._engine = engine
        self._metrics = metrics
        self._registry = registry
        self._clock = clock
        self._wall_clock = wall_clock
        self._accepted = 0
        self._started_s = clock()
        self._responses = ResponseStore()  # finished Responses replies, for previous_response_id
        self._prefix_cache: PrefixCache | None = None
        self._prefix_metrics: PrefixCacheCollector | None = None
        if config.prefix_cache_blocks > 0:
            self._prefix_cache = PrefixCache(config.prefix_cache_blocks, config.block_size)
            self._prefix_metrics = PrefixCacheCollector(self._prefix_cache, config.model)
            registry.register(self._prefix_metrics)
        created = int(wall_clock())
        self._models_body = json.dumps(
            {
                "object": "list",
                "data": [
                    {
                        "id": config.model,
                        "object": "model",
                        "created": created,
                        "owned_by": "llmload-sim",
                        "root": config.model,
                        "parent": None,
                        "max_model_len": config.max_model_len,
                    }
                ],
            },
            separators=(",", ":"),
        ).encode()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Route one request."""
        received_s = self._clock()
        received_ns = environ.get("llmload.sim.received_ns") or 0
        if received_ns:  # the request's bytes reached the kernel this long ago
            received_s -= max(0, time.time_ns() - received_ns) * 1e-9
        method = environ["REQUEST_METHOD"]
        path = environ["PATH_INFO"]
        endpoint = _GENERATION.get(path)
        if endpoint is not None:
            if method != "POST":
                return self._error(start_response, path, ErrorReply(405, "MethodNotAllowed", f"use POST {path}"))
            return self._generate(environ, start_response, endpoint, received_s)
        if path in ("/v1/models", "/health", "/metrics"):
            if method != "GET":
                return self._error(start_response, path, ErrorReply(405, "MethodNotAllowed", f"use GET {path}"))
            if path == "/v1/models":
                return _respond(start_response, "200 OK", _JSON, self._models_body)
            if path == "/health":
                return _respond(start_response, "200 OK", ("Content-Type", "text/plain"), b"")
            return _respond(
                start_response,
                "200 OK",
                ("Content-Type", CONTENT_TYPE_LATEST),
                generate_latest(self._registry),
            )
        reply = ErrorReply(
            404,
            "NotFoundError",
            f"no route {method} {path}; serving /v1/models, {', '.join(e.value for e in Endpoint)}, /health, /metrics",
        )
        return self._error(start_response, "other", reply)

    def _error(self, start_response: StartResponse, endpoint_label: str, reply: ErrorReply) -> Iterable[bytes]:
        self._metrics.rejected.labels(endpoint_label, str(reply.status)).inc()
        return _respond(start_response, reply.status_line, _JSON, reply.body())

    def _generate(
        self, environ: dict[str, Any], start_response: StartResponse, endpoint: Endpoint, received_s: float
    ) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > MAX_BODY_BYTES:
            reply = ErrorReply(413, "BadRequestError", f"request body of {length} bytes exceeds {MAX_BODY_BYTES}")
            return self._error(start_response, endpoint.value, reply)
        raw = environ["wsgi.input"].read(MAX_BODY_BYTES + 1)
        inputs = 1
        if endpoint in API_ENDPOINTS:
            api = parse_api_request(endpoint, raw, self._config.model, self._config.max_model_len, self._responses)
            if isinstance(api, ErrorReply):
                return self._error(start_response, endpoint.value, api)
            parsed, inputs = api
        else:
            generation = parse_generation_request(endpoint, raw, self._config.model, self._config.max_model_len)
            if isinstance(generation, ErrorReply):
                return self._error(start_response, endpoint.value, generation)
            parsed = generation
        self._accepted += 1
        if self._prefix_cache is not None:
            cached = self._prefix_cache.admit(prompt_tokens_of(endpoint, raw))
            parsed = dataclasses.replace(parsed, cached_tokens=min(cached, parsed.prompt_tokens))
        cfg = self._config
        faulting = received_s - self._started_s >= cfg.faults.faults_after_s
        fault = plan_faults(cfg.faults, cfg.seed, self._accepted, parsed.stream) if faulting else NO_FAULT
        m = self._metrics.endpoints[endpoint]
        if fault.failure in IMMEDIATE_FAULTS:
            m.faults[fault.failure].inc()
            return self._immediate_fault(start_response, fault.failure)
        if endpoint is Endpoint.EMBEDDINGS:
            return self._embed(start_response, parsed, inputs, received_s)
        plan = plan_reply(parsed, cfg.seed, self._accepted, cfg.output_len_mean)
        reply_fault = (
            plan_reply_fault(cfg.faults, cfg.seed, self._accepted) if faulting and fault.failure is None else None
        )
        plan = apply_reply_fault(plan, reply_fault, cfg.faults, cfg.seed, parsed.max_tokens)
        prefix = "chatcmpl" if endpoint is Endpoint.CHAT else "cmpl"
        request_id = f"{prefix}-sim{cfg.seed}-{self._accepted}"
        if endpoint is Endpoint.RESPONSES:
            parsed = dataclasses.replace(parsed, stored_as=f"resp_{request_id}")  # the reply's id (the encoders')
        # reply shapes (chat and completions only)
        shape = NO_SHAPE if endpoint in API_ENDPOINTS else plan_shapes(cfg.shapes, cfg.seed, self._accepted, parsed)
        streamed = parsed.stream and not shape.no_stream
        seq = Sequence(parsed.prompt_tokens, shape.hidden_tokens + len(plan.words), wake_per_token=streamed)
        seq.cached_tokens = parsed.cached_tokens or 0
        if cfg.queue_delay_ms > 0:
            gevent.sleep(cfg.queue_delay_ms / 1000.0)
        if fault.stall_s:
            m.faults[FaultKind.STALL].inc()
        if streamed:
            encoder: StreamEncoder | ShapedStreamEncoder | ResponsesStreamEncoder | MessagesStreamEncoder
            if endpoint is Endpoint.RESPONSES:
                encoder = ResponsesStreamEncoder(parsed, request_id, int(self._wall_clock()), cfg.model)
            elif endpoint is Endpoint.MESSAGES:
                encoder = MessagesStreamEncoder(parsed, request_id, int(self._wall_clock()), cfg.model)
            elif shape.shapes_stream:
                encoder = ShapedStreamEncoder(parsed, shape, request_id, int(self._wall_clock()), cfg.model)
            else:
                encoder = StreamEncoder(parsed, request_id, int(self._wall_clock()), cfg.model)
            self._stream(
                start_response=start_response,
                request=parsed,
                plan=plan,
                seq=seq,
                encoder=encoder,
                received_s=received_s,
                fault=fault,
                reply_fault=reply_fault,
                shape=shape,
            )
            return []
        return self._whole(
            start_response=start_response,
            request=parsed,
            plan=plan,
            seq=seq,
            request_id=request_id,
            received_s=received_s,
            fault=fault,
            reply_fault=reply_fault,
            shape=shape,
        )

    def _immediate_fault(self, start_response: StartResponse, kind: FaultKind) -> Iterable[bytes]:
        """Answer an overload, fail or error_200 fault at once (the engine never sees the request)."""
        faults = self._config.faults
        if kind is FaultKind.ERROR_200:
            body = encode_error(faults.fail_shape, 500, "llmload sim: injected error in a 200 reply")
            return _respond(start_response, "200 OK", _JSON, body)
        if kind is FaultKind.OVERLOAD:
            status = faults.overload_status
            body = encode_error(faults.fail_shape, status, "llmload sim: injected overload, retry later")
            start_response(
                f"{status} {HTTPStatus(status).phrase}",
                [_JSON, ("Content-Length", str(len(body))), ("Retry-After", str(RETRY_AFTER_S))],
            )
            return [body]
        status = faults.fail_status
        body = encode_error(faults.fail_shape, status, "llmload sim: injected failure")
        return _respond(start_response, f"{status} {HTTPStatus(status).phrase}", _JSON, body)

    def _stream(
        self,
        *,
        start_response: StartResponse,
        request: GenerationRequest,
        plan: ReplyPlan,
        seq: Sequence,
        encoder: StreamEncoder | ShapedStreamEncoder | ResponsesStreamEncoder | MessagesStreamEncoder,
        received_s: float,
        fault: FaultPlan,
        reply_fault: FaultKind | None = None,
        shape: ShapePlan = NO_SHAPE,
    ) -> None:
        m = self._metrics.endpoints[request.endpoint]
        engine = self._engine
        clock = self._clock
        write = start_response("200 OK", _SSE_HEADERS)
        words = plan.words
        cut = midstream_cut(len(words)) if fault.failure is not None else None
        written = 0
        first_token_s = 0.0
        hidden, group = shape.hidden_tokens, shape.tokens_per_chunk  # reply shapes
        ended: FaultKind | bool | None = False  # True: completed; a FaultKind: ended by that fault
        try:
            if fault.stall_s:
                write(b"")  # headers now; the first token comes after the stall
                gevent.sleep(fault.stall_s)
            engine.submit(seq)
            out: list[bytes] = []
            if request.endpoint is not Endpoint.COMPLETIONS:  # chat's role chunk, the typed APIs' opening events
                out.append(encoder.role_chunk())
            while True:
                need = hidden + written + group - 1  # reply shapes: hidden tokens are never written
                while seq.generated <= need and not seq.done:
                    engine.wait_for_tokens(seq, need)
                visible = max(0, seq.generated - hidden)
                generated = visible if cut is None else min(visible, cut)
                encoder.add_tokens(words, written, generated, out)
                if generated == cut:
                    if fault.failure is FaultKind.MIDSTREAM_ERROR and request.endpoint in API_ENDPOINTS:
                        out.append(failure_event(request.endpoint))  # the API's own failure event
                    elif fault.failure is FaultKind.MIDSTREAM_ERROR:
                        out.append(_midstream_error_event(self._config.faults.fail_shape))
                elif seq.done:
                    encoder.add_end(plan.finish_reason, generated, out)
                write(b"".join(out))
                out.clear()
                if written == 0:
                    first_token_s = clock()
                    m.ttft_s.observe(first_token_s - received_s)
                    self._metrics.vllm.ttft_s.observe(first_token_s - received_s)
                written = generated
                if generated == cut:
                    engine.abort(seq)
                    ended = fault.failure
                    break
                if seq.done:
                    ended = True
                    break
        finally:
            if ended is True:
                self._count_reply(
                    request, hidden + written, received_s, plan.finish_reason, first_token_s, reply_fault=reply_fault
                )
            elif isinstance(ended, FaultKind):
                m.faults[ended].inc()
            else:
                engine.abort(seq)
                m.aborted.inc()
        if ended is FaultKind.DROP:
            raise _ConnectionDroppedError
        if ended is True and shape.hold_s:
            _hold_after_done(write, shape)

    def _whole(
        self,
        *,
        start_response: StartResponse,
        request: GenerationRequest,
        plan: ReplyPlan,
        seq: Sequence,
        request_id: str,
        received_s: float,
        fault: FaultPlan,
        reply_fault: FaultKind | None = None,
        shape: ShapePlan = NO_SHAPE,
    ) -> Iterable[bytes]:
        completed = False
        created, model = int(self._wall_clock()), self._config.model
        try:
            if fault.stall_s:
                gevent.sleep(fault.stall_s)
            self._engine.submit(seq)
            self._engine.wait_for_tokens(seq, seq.target_tokens - 1)
            if request.endpoint in API_ENDPOINTS:
                body = encode_api_whole_reply(request, plan, request_id, created, model)
            elif shape is NO_SHAPE:
                body = encode_whole_reply(request, plan, request_id, created, model)
            else:  # reply shapes
                body = encode_shaped_whole_reply(
                    request, plan, shape, request_id=request_id, created_unix=created, model=model
                )
            write = start_response("200 OK", [_JSON, ("Content-Length", str(len(body)))])
            if fault.failure is FaultKind.DROP:
                write(body[: len(body) // 2])
            else:
                write(body)
                completed = True
        finally:
            if completed:
                tokens = shape.hidden_tokens + len(plan.words)
                self._count_reply(request, tokens, received_s, plan.finish_reason, None, reply_fault=reply_fault)
            elif fault.failure is FaultKind.DROP and seq.done:
                self._metrics.endpoints[request.endpoint].faults[FaultKind.DROP].inc()
            else:
                self._engine.abort(seq)
                self._metrics.endpoints[request.endpoint].aborted.inc()
        if fault.failure is FaultKind.DROP:
            raise _ConnectionDroppedError
        return []

    def _embed(
        self, start_response: StartResponse, request: GenerationRequest, inputs: int, received_s: float
    ) -> Iterable[bytes]:
        """Answer an embeddings batch after its prefill and one engine step (no completion tokens)."""
        seq = Sequence(request.prompt_tokens, 1, wake_per_token=False)
        completed = False
        try:
            if self._config.queue_delay_ms > 0:
                gevent.sleep(self._config.queue_delay_ms / 1000.0)
            self._engine.submit(seq)
            self._engine.wait_for_tokens(seq, 0)
            body = encode_embeddings(inputs, request.prompt_tokens, self._config.model, self._config.seed)
            write = start_response("200 OK", [_JSON, ("Content-Length", str(len(body)))])
            write(body)
            completed = True
        finally:
            if completed:
                self._count_completed(request, 0, received_s, "stop", None)
            else:
                self._engine.abort(seq)
                self._metrics.endpoints[request.endpoint].aborted.inc()
        return []

    def _count_reply(
        self,
        request: GenerationRequest,
        completion_tokens: int,
        received_s: float,
        finish_reason: str,
        first_token_s: float | None,
        *,
        reply_fault: FaultKind | None,
    ) -> None:
        """Count a reply written to the end: an injected reply fault, a completion, or (``SHORT``) both."""
        if reply_fault is not None:
            self._metrics.endpoints[request.endpoint].faults[reply_fault].inc()
        if reply_fault is None or reply_fault is FaultKind.SHORT:
            self._count_completed(request, completion_tokens, received_s, finish_reason, first_token_s)
        if request.stored_as is not None:
            self._responses.keep(request.stored_as, request.prompt_tokens + completion_tokens)

    def _count_completed(
        self,
        request: GenerationRequest,
        completion_tokens: int,
        received_s: float,
        finish_reason: str,
        first_token_s: float | None,
    ) -> None:
        """Count a reply written to the end, in the ground truth and the vLLM-named metrics alike."""
        m = self._metrics.endpoints[request.endpoint]
        v = self._metrics.vllm
        now = self._clock()
        m.completed.inc()
        m.prompt_tokens.inc(request.prompt_tokens)
        if self._prefix_metrics is not None:
            self._prefix_metrics.completed_cached_tokens[request.endpoint.value] += request.cached_tokens or 0
        m.completion_tokens.inc(completion_tokens)
        m.duration_s.observe(now - received_s)
        v.success[finish_reason].inc()
        v.prompt_tokens.inc(request.prompt_tokens)
        v.generation_tokens.inc(completion_tokens)
        v.e2e_s.observe(now - received_s)
        if first_token_s is not None and completion_tokens > 1:
            v.tpot_s.observe((now - first_token_s) / (completion_tokens - 1))


class _ConnectionDroppedError(ConnectionResetError):
    """Raised out of the WSGI app to close the connection mid-reply (``--drop-rate``).

    ``gevent.pywsgi`` treats ECONNRESET as a client that went away: it closes
    the socket without a log line and without the chunked terminator, so the
    client sees the body end early.
    """

    def __init__(self) -> None:
        super().__init__(errno.ECONNRESET, "llmload sim: injected connection drop")


def _midstream_error_event(shape: ErrorShape) -> bytes:
    """The in-band error event of ``--midstream-error-rate``, then ``[DONE]`` (as vLLM ends it)."""
    body = encode_error(shape, 500, "llmload sim: injected engine failure mid-stream")
    if shape is ErrorShape.VLLM:  # vLLM wraps its error response in {"error": ...} mid-stream
        body = b'{"error":' + body + b"}"
    return b"data: " + body + b"\n\ndata: [DONE]\n\n"


# ── reply shapes ─────────────────────────────────────────────────────────────


def _hold_after_done(write: Callable[[bytes], object], shape: ShapePlan) -> None:
    """Keep a complete stream's body open ``shape.hold_s`` after ``[DONE]``, pinging every ``ping_s``.

    The reply was counted as completed before; a client that closed the
    connection ends the hold at the next ping, silently (pywsgi then drops the
    connection without the chunked terminator).
    """
    deadline = time.perf_counter() + shape.hold_s
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        gevent.sleep(min(left, shape.ping_s) if shape.ping_s else left)
        if shape.ping_s and deadline - time.perf_counter() > 0:
            try:
                write(PING)
            except OSError:
                return


def _respond(start_response: StartResponse, status: str, content_type: tuple[str, str], body: bytes) -> list[bytes]:
    start_response(status, [content_type, ("Content-Length", str(len(body)))])
    return [body]
