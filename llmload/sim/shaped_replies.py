"""The bytes of shaped replies of ``llmload sim`` (the shapes and their flags: ``llmload.sim.shapes``).

Shaped streams are built by ``ShapedStreamEncoder`` (``json.dumps`` per
chunk); unshaped ones keep ``llmload.sim.replies.StreamEncoder``'s byte
templates, so the shapes cost nothing when off. Shaped streams never carry
per-chunk ``usage`` (``continuous_usage_stats``).
"""

from __future__ import annotations

import json

from llmload.sim.protocol import Endpoint, GenerationRequest
from llmload.sim.replies import ReplyPlan
from llmload.sim.shapes import ShapePlan

__all__ = ["PING", "TOOL_CALL_ID", "TOOL_NAME", "ShapedStreamEncoder", "encode_shaped_whole_reply"]

PING = b": ping\n\n"
"""The comment sent every ``--hold-ping-s`` while a stream is held open."""
TOOL_NAME = "lookup"
"""The function name of ``--object-arguments-rate`` tool calls."""
TOOL_CALL_ID = "call_sim_0"
"""Their call id."""


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
