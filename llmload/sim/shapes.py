"""Reply shapes of ``llmload sim``: valid replies in the shapes real servers and gateways send.

Every shape is off by default. Each ``--<shape>-rate P`` applies its shape to
a share P of the generation requests (1 = all), decided per request from
``--seed`` and the request's sequence number (as ``llmload.sim.faults`` does,
with a stream of draws of its own, one per shape, so enabling one shape never
moves another's choices). Unlike faults, shapes are not failures: the reply
is complete and counted as completed, its tokens in the token counters.

==========================  ====================================================
flag                        what the client gets
==========================  ====================================================
``--content-parts-rate``    chat: ``delta.content`` (``message.content``) as a
                            list of typed parts: the first ``--thinking-tokens``
                            tokens as ``{"type": "thinking", "thinking": [text
                            part]}``, the rest alternately a ``[{"type": "text",
                            "text": ...}]`` list and a plain string
``--object-arguments-rate`` chat: the reply is one tool call whose
                            ``function.arguments`` is a JSON object
                            (``{"text": " word"}`` per token), not a string;
                            ``finish_reason`` ``tool_calls``; takes precedence
                            over ``--content-parts-rate``
``--hidden-reasoning-rate`` the engine generates ``--hidden-reasoning-tokens``
                            more tokens before the reply that are never sent;
                            ``usage.completion_tokens`` counts them and
                            ``completion_tokens_details.reasoning_tokens`` says
                            how many
``--hold-after-done-rate``  streams: the body stays open ``--hold-after-done-s``
                            seconds after ``[DONE]`` (with ``: ping`` comments
                            every ``--hold-ping-s`` seconds if > 0) before it
                            ends
``--unterminated-end-rate`` streams: the finish chunk carries ``usage`` and is
                            followed by one ``\\n`` only; no ``[DONE]``, then
                            the body ends
``--logprobs-tokens-rate``  streams: ``--tokens-per-chunk`` tokens per chunk,
                            each listed in ``logprobs.content`` (chat) or
                            ``logprobs.tokens`` (completions); no ``usage``
                            even when asked for
``--no-stream-rate``        ``stream: true`` answered with one
                            ``application/json`` body, ``usage`` included
==========================  ====================================================

``--metric-names vllm|sglang:|sglang_`` is not per request: it picks the
server vocabulary ``GET /metrics`` publishes beside the ``llmload_sim_``
ground truth (``llmload.sim.metrics``).

Shaped streams are built by ``ShapedStreamEncoder`` (``json.dumps`` per
chunk); unshaped ones keep ``llmload.sim.replies.StreamEncoder``'s byte
templates, so the shapes cost nothing when off. Shaped streams never carry
per-chunk ``usage`` (``continuous_usage_stats``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
from dataclasses import dataclass
from enum import Enum

from llmload.errors import ConfigError
from llmload.sim.protocol import Endpoint, GenerationRequest
from llmload.sim.replies import ReplyPlan

__all__ = [
    "NO_SHAPE",
    "PING",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "MetricNames",
    "ShapeConfig",
    "ShapePlan",
    "ShapedStreamEncoder",
    "add_shape_arguments",
    "encode_shaped_whole_reply",
    "plan_shapes",
    "shape_config_from",
]

PING = b": ping\n\n"
"""The comment sent every ``--hold-ping-s`` while a stream is held open."""
TOOL_NAME = "lookup"
"""The function name of ``--object-arguments-rate`` tool calls."""
TOOL_CALL_ID = "call_sim_0"
"""Their call id."""


class MetricNames(Enum):
    """Which server's names ``GET /metrics`` publishes beside the ground truth."""

    VLLM = "vllm"
    SGLANG_COLON = "sglang:"
    SGLANG_UNDERSCORE = "sglang_"


_RATES = (
    "content_parts_rate",
    "object_arguments_rate",
    "hidden_reasoning_rate",
    "hold_after_done_rate",
    "unterminated_end_rate",
    "logprobs_tokens_rate",
    "no_stream_rate",
)
"""The shapes' rate fields, in the order of their draws."""


@dataclass(frozen=True, slots=True)
class ShapeConfig:
    """Reply-shape settings; rates are shares of generation requests (0 off, 1 all).

    Attributes:
        content_parts_rate: chat content as a list of typed parts, thinking parts first.
        thinking_tokens: tokens sent as thinking parts at the start of a parts reply.
        object_arguments_rate: chat replies as one tool call with object arguments.
        hidden_reasoning_rate: replies with unsent reasoning tokens counted in usage.
        hidden_reasoning_tokens: how many (generated by the engine, so they take decode time).
        hold_after_done_rate: streams whose body stays open after ``[DONE]``.
        hold_after_done_s: how long, seconds.
        hold_ping_s: seconds between ``: ping`` comments while held; 0 for silence.
        unterminated_end_rate: streams whose last event lacks its blank line and ``[DONE]``.
        logprobs_tokens_rate: streams of several tokens per chunk, counted in ``logprobs``, no usage.
        tokens_per_chunk: tokens per chunk of those streams (the last chunk may hold fewer).
        no_stream_rate: ``stream: true`` answered with one JSON body.
        metric_names: the server vocabulary of ``GET /metrics``.
    """

    content_parts_rate: float = 0.0
    thinking_tokens: int = 2
    object_arguments_rate: float = 0.0
    hidden_reasoning_rate: float = 0.0
    hidden_reasoning_tokens: int = 100
    hold_after_done_rate: float = 0.0
    hold_after_done_s: float = 15.0
    hold_ping_s: float = 0.0
    unterminated_end_rate: float = 0.0
    logprobs_tokens_rate: float = 0.0
    tokens_per_chunk: int = 3
    no_stream_rate: float = 0.0
    metric_names: MetricNames = MetricNames.VLLM

    def __post_init__(self) -> None:
        for name in _RATES:
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ConfigError(f"{_flag(name)} must be a share within 0..1 (1 = every request), got {value}")
        for name, minimum in (("thinking_tokens", 0), ("hidden_reasoning_tokens", 1), ("tokens_per_chunk", 1)):
            value = getattr(self, name)
            if value < minimum:
                raise ConfigError(f"{_flag(name)} must be an integer >= {minimum}, got {value}")
        for name in ("hold_after_done_s", "hold_ping_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{_flag(name)} must be seconds >= 0, got {value}")

    @property
    def enabled(self) -> bool:
        """True when any request can get a shape."""
        return any(getattr(self, name) > 0 for name in _RATES)


@dataclass(frozen=True, slots=True)
class ShapePlan:
    """The shapes decided for one request (see the module table).

    Attributes:
        content_parts: chat content as typed parts.
        thinking_tokens: how many of them (the first ones) are thinking parts.
        object_arguments: a tool call with object arguments (chat only).
        hidden_tokens: unsent reasoning tokens generated first; 0 for none.
        hold_s: seconds the stream stays open after ``[DONE]``; 0.0 for none.
        ping_s: seconds between ``: ping`` comments while held; 0.0 for none.
        unterminated: the last event lacks its blank line and no ``[DONE]`` follows.
        tokens_per_chunk: tokens per streamed chunk (1 unless ``logprobs``).
        logprobs: tokens listed in ``logprobs``, no usage.
        no_stream: a stream request answered with one JSON body.
    """

    content_parts: bool = False
    thinking_tokens: int = 0
    object_arguments: bool = False
    hidden_tokens: int = 0
    hold_s: float = 0.0
    ping_s: float = 0.0
    unterminated: bool = False
    tokens_per_chunk: int = 1
    logprobs: bool = False
    no_stream: bool = False

    @property
    def shapes_stream(self) -> bool:
        """Whether the stream's bytes differ from the plain ones (``ShapedStreamEncoder`` is needed)."""
        return any((self.content_parts, self.object_arguments, self.hidden_tokens, self.unterminated, self.logprobs))


NO_SHAPE = ShapePlan()
"""The plan of every request when no shape is configured."""


def plan_shapes(config: ShapeConfig, seed: int, sequence_number: int, request: GenerationRequest) -> ShapePlan:
    """Decide the shapes of the ``sequence_number``-th accepted request (1-based).

    Chat-only shapes are dropped for /v1/completions, stream-only ones for
    whole replies; a request answered without streaming (``no_stream``) keeps
    only the shapes of whole replies (parts, object arguments, hidden reasoning).
    """
    if not config.enabled:
        return NO_SHAPE
    rng = random.Random(f"llmload-sim-shapes/{seed}/{sequence_number}")
    drawn = {name: rng.random() < getattr(config, name) for name in _RATES}
    chat = request.endpoint is Endpoint.CHAT
    stream = request.stream and not drawn["no_stream_rate"]
    object_arguments = chat and drawn["object_arguments_rate"]
    logprobs = stream and drawn["logprobs_tokens_rate"]
    unterminated = stream and drawn["unterminated_end_rate"]
    held = stream and drawn["hold_after_done_rate"] and not unterminated
    content_parts = chat and drawn["content_parts_rate"] and not object_arguments
    return ShapePlan(
        content_parts=content_parts,
        thinking_tokens=config.thinking_tokens if content_parts else 0,
        object_arguments=object_arguments,
        hidden_tokens=config.hidden_reasoning_tokens if drawn["hidden_reasoning_rate"] else 0,
        hold_s=config.hold_after_done_s if held else 0.0,
        ping_s=config.hold_ping_s if held else 0.0,
        unterminated=unterminated,
        tokens_per_chunk=config.tokens_per_chunk if logprobs else 1,
        logprobs=logprobs,
        no_stream=request.stream and drawn["no_stream_rate"],
    )


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _usage(prompt_tokens: int, completion_tokens: int, hidden_tokens: int) -> dict[str, object]:
    usage: dict[str, object] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if hidden_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": hidden_tokens}
    return usage


def _finish_reason(plan: ShapePlan, planned: str) -> str:
    return "tool_calls" if plan.object_arguments and planned == "stop" else planned


class ShapedStreamEncoder:
    """SSE chunks of one shaped stream; the same calls as ``llmload.sim.replies.StreamEncoder``.

    Args:
        request: the validated request.
        plan: its shapes (``ShapePlan.shapes_stream`` true).
        request_id: the ``id`` of every chunk.
        created_unix: the ``created`` field.
        model: the served model name.
    """

    __slots__ = ("_base", "_chat", "_include_usage", "_plan", "_prompt_tokens", "_tool_started")

    def __init__(
        self, request: GenerationRequest, plan: ShapePlan, request_id: str, created_unix: int, model: str
    ) -> None:
        self._chat = request.endpoint is Endpoint.CHAT
        self._plan = plan
        self._include_usage = request.include_usage and not plan.logprobs
        self._prompt_tokens = request.prompt_tokens
        kind = "chat.completion.chunk" if self._chat else "text_completion"
        self._base: dict[str, object] = {"id": request_id, "object": kind, "created": created_unix, "model": model}
        self._tool_started = False

    def _event(self, choices: list[object], usage: dict[str, object] | None = None, *, end: bytes = b"\n\n") -> bytes:
        chunk = {**self._base, "choices": choices}
        if usage is not None:
            chunk["usage"] = usage
        return b"data: " + _compact(chunk) + end

    def role_chunk(self) -> bytes:
        """The chat stream's opening chunk (role; empty content, or null content before a tool call)."""
        content = None if self._plan.object_arguments else ""
        delta = {"role": "assistant", "content": content}
        return self._event([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def add_tokens(self, words: list[bytes], start: int, stop: int, out: list[bytes]) -> None:
        """Append the chunks of ``words[start:stop]``: one per token, or one for them all (``logprobs``)."""
        if start >= stop:
            return
        if self._plan.logprobs:
            out.append(self._event([self._choice(words, start, stop)]))
            return
        for i in range(start, stop):
            out.append(self._event([self._choice(words, i, i + 1)]))

    def _choice(self, words: list[bytes], start: int, stop: int) -> dict[str, object]:
        texts = [w.decode() for w in words[start:stop]]
        text = "".join(texts)
        choice: dict[str, object] = {"index": 0}
        if not self._chat:
            choice["text"] = text
        elif self._plan.object_arguments:
            call: dict[str, object] = {"index": 0, "function": {"arguments": {"text": text}}}
            if not self._tool_started:  # the first delta names the call, as OpenAI's streams do
                self._tool_started = True
                call = {
                    "index": 0,
                    "id": TOOL_CALL_ID,
                    "type": "function",
                    "function": {"name": TOOL_NAME, "arguments": {"text": text}},
                }
            choice["delta"] = {"tool_calls": [call]}
        elif self._plan.content_parts:
            choice["delta"] = {"content": _content_part(text, start, self._plan)}
        else:
            choice["delta"] = {"content": text}
        choice["logprobs"] = _logprobs(texts, chat=self._chat) if self._plan.logprobs else None
        choice["finish_reason"] = None
        return choice

    def add_end(self, finish_reason: str, completion_tokens: int, out: list[bytes]) -> None:
        """Append the end: finish chunk, usage (if asked and not ``logprobs``), ``[DONE]`` (unless unterminated).

        ``completion_tokens`` counts the streamed tokens; the hidden reasoning tokens are added here.
        """
        plan = self._plan
        reason = _finish_reason(plan, finish_reason)
        choice: dict[str, object] = {"index": 0, "delta": {}} if self._chat else {"index": 0, "text": ""}
        choice.update({"logprobs": None, "finish_reason": reason})
        usage = _usage(self._prompt_tokens, completion_tokens + plan.hidden_tokens, plan.hidden_tokens)
        if plan.unterminated:  # usage in the finish chunk, one "\n", no [DONE]
            out.append(self._event([choice], usage if self._include_usage else None, end=b"\n"))
            return
        out.append(self._event([choice]))
        if self._include_usage:
            out.append(self._event([], usage))
        out.append(b"data: [DONE]\n\n")


def _content_part(text: str, index: int, plan: ShapePlan) -> object:
    """The typed-parts shapes: thinking parts first, then a list of one text part and a plain string in turn."""
    if index < plan.thinking_tokens:
        return [{"type": "thinking", "thinking": [{"type": "text", "text": text}]}]
    if (index - plan.thinking_tokens) % 2 == 0:
        return [{"type": "text", "text": text}]
    return text


def _logprobs(texts: list[str], *, chat: bool) -> dict[str, object]:
    """One entry per token: chat's ``content`` list, or the completions API's parallel lists."""
    if chat:
        return {
            "content": [{"token": t, "logprob": -0.5, "bytes": list(t.encode()), "top_logprobs": []} for t in texts]
        }
    return {"tokens": texts, "token_logprobs": [-0.5] * len(texts), "top_logprobs": None, "text_offset": None}


def encode_shaped_whole_reply(
    request: GenerationRequest, reply: ReplyPlan, plan: ShapePlan, *, request_id: str, created_unix: int, model: str
) -> bytes:
    """The JSON body of a finished reply in ``plan``'s whole-reply shapes (parts, object arguments, reasoning)."""
    texts = [w.decode() for w in reply.words]
    text = "".join(texts)
    if request.endpoint is Endpoint.CHAT:
        kind = "chat.completion"
        message: dict[str, object] = {"role": "assistant", "content": text}
        if plan.object_arguments:
            function = {"name": TOOL_NAME, "arguments": {"text": text}}
            message["content"] = None
            message["tool_calls"] = [{"id": TOOL_CALL_ID, "type": "function", "function": function}]
        elif plan.content_parts:
            thinking = "".join(texts[: plan.thinking_tokens])
            answer = "".join(texts[plan.thinking_tokens :])
            parts: list[object] = []
            if thinking:
                parts.append({"type": "thinking", "thinking": [{"type": "text", "text": thinking}]})
            parts.append({"type": "text", "text": answer})
            message["content"] = parts
        choice: dict[str, object] = {"index": 0, "message": message}
    else:
        kind = "text_completion"
        choice = {"index": 0, "text": text}
    choice["logprobs"] = None
    choice["finish_reason"] = _finish_reason(plan, reply.finish_reason)
    body = {
        "id": request_id,
        "object": kind,
        "created": created_unix,
        "model": model,
        "choices": [choice],
        "usage": _usage(request.prompt_tokens, len(reply.words) + plan.hidden_tokens, plan.hidden_tokens),
    }
    return _compact(body)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the reply-shape flags (defaults from ``ShapeConfig``) to ``parser``."""
    d = ShapeConfig()
    g = parser.add_argument_group("reply shapes (valid replies as real servers send them; all off by default)")
    share = "share (1 = all) of "
    g.add_argument(
        "--content-parts-rate",
        type=float,
        default=d.content_parts_rate,
        help=share + "requests whose chat content is a list of typed parts, thinking parts first",
    )
    g.add_argument("--thinking-tokens", type=int, default=d.thinking_tokens, help="thinking parts of such replies")
    g.add_argument(
        "--object-arguments-rate",
        type=float,
        default=d.object_arguments_rate,
        help=share + "chat requests answered with a tool call whose arguments are a JSON object, not a string",
    )
    g.add_argument(
        "--hidden-reasoning-rate",
        type=float,
        default=d.hidden_reasoning_rate,
        help=share + "requests with --hidden-reasoning-tokens unsent reasoning tokens counted in usage",
    )
    g.add_argument(
        "--hidden-reasoning-tokens",
        type=int,
        default=d.hidden_reasoning_tokens,
        help="reasoning tokens generated before the reply and never sent",
    )
    g.add_argument(
        "--hold-after-done-rate",
        type=float,
        default=d.hold_after_done_rate,
        help=share + "streams whose body stays open --hold-after-done-s after [DONE]",
    )
    g.add_argument(
        "--hold-after-done-s", type=float, default=d.hold_after_done_s, help="seconds the body stays open after [DONE]"
    )
    g.add_argument(
        "--hold-ping-s", type=float, default=d.hold_ping_s, help="send ': ping' every S seconds while held; 0 = silent"
    )
    g.add_argument(
        "--unterminated-end-rate",
        type=float,
        default=d.unterminated_end_rate,
        help=share + "streams whose last event (finish + usage) ends with one newline and no [DONE]",
    )
    g.add_argument(
        "--logprobs-tokens-rate",
        type=float,
        default=d.logprobs_tokens_rate,
        help=share + "streams with --tokens-per-chunk tokens per chunk listed in logprobs, no usage",
    )
    g.add_argument("--tokens-per-chunk", type=int, default=d.tokens_per_chunk, help="tokens per logprobs chunk")
    g.add_argument(
        "--no-stream-rate",
        type=float,
        default=d.no_stream_rate,
        help=share + "stream requests answered with one application/json body",
    )
    g.add_argument(
        "--metric-names",
        choices=[m.value for m in MetricNames],
        default=d.metric_names.value,
        help="server names /metrics publishes beside llmload_sim_: vLLM's, or SGLang's spelled sglang: or sglang_",
    )


def shape_config_from(values: dict[str, object]) -> ShapeConfig:
    """Pop the reply-shape flags out of parsed ``values`` (``vars(namespace)``) and build a ``ShapeConfig``.

    Raises:
        ConfigError: a value is out of range (see ``ShapeConfig``).
    """
    picked = {f.name: values.pop(f.name) for f in dataclasses.fields(ShapeConfig)}
    picked["metric_names"] = MetricNames(picked["metric_names"])
    return ShapeConfig(**picked)  # type: ignore[arg-type]
