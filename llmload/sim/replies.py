"""What the simulator answers: reply length, words, and their exact bytes.

Token model for replies: every generated token is one word from a fixed
64-word vocabulary, written with a leading space (``" word"``), and every
streamed content chunk carries exactly one token. Reply length and words are
a pure function of ``--seed`` and the request's sequence number (1 for the
first generation request the process accepts, 2 for the next, ...), so a
sequential run is reproducible byte for byte (``id`` and ``created`` aside).

Reply length: with ``ignore_eos`` exactly ``max_tokens`` (finish_reason
``"length"``). Otherwise the end-of-sequence token comes after a geometric
number of tokens with mean ``--output-len-mean`` (a constant chance of EOS per
token, as a sampling model has), raised to ``min_tokens``; if that reaches
``max_tokens`` the reply is cut there with ``"length"``, else it ends with
``"stop"``.

Chunk shapes follow vLLM's OpenAI server, compact JSON: the chat stream opens
with ``delta {"role": "assistant", "content": ""}``, then one content chunk
per token, then a chunk with an empty delta (``text ""`` for completions) and
the ``finish_reason``, then (``include_usage``) a ``"choices": []`` chunk
with ``usage``, then ``data: [DONE]``. Chunks are pre-encoded templates: a
token costs one bytes join, no ``json.dumps``.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from llmload.sim.protocol import Endpoint, GenerationRequest

__all__ = ["VOCABULARY", "WORD_BYTES", "ReplyPlan", "StreamEncoder", "encode_whole_reply", "plan_reply"]

VOCABULARY: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at",
    "by", "from", "this", "which", "or", "an", "are", "be", "model", "token", "load", "server",
    "batch", "queue", "stream", "time", "first", "next", "fast", "slow", "small", "large", "data",
    "test", "value", "result", "request", "reply", "engine", "step", "cache", "memory", "text",
    "word", "line", "point", "light", "river", "stone", "cloud", "green", "blue", "north", "south",
    "winter", "summer", "morning", "evening", "simple", "clear",
)  # fmt: skip
"""The reply vocabulary: ASCII words that need no JSON escaping."""

WORD_BYTES: tuple[bytes, ...] = tuple(f" {w}".encode() for w in VOCABULARY)
"""Every vocabulary word as written in a reply (``b" word"``)."""
_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class ReplyPlan:
    """The reply decided when a request is accepted.

    Attributes:
        words: one entry per generated token, each ``b" word"`` (JSON-safe).
        finish_reason: ``"stop"`` (end of sequence) or ``"length"`` (max_tokens).
    """

    words: list[bytes]
    finish_reason: str


def plan_reply(request: GenerationRequest, seed: int, sequence_number: int, output_len_mean: float) -> ReplyPlan:
    """Decide the reply's length and words from the seed and the request's sequence number."""
    rng = random.Random(f"llmload-sim/{seed}/{sequence_number}")
    if request.ignore_eos:
        length, finish_reason = request.max_tokens, "length"
    else:
        eos_chance = 1.0 / output_len_mean
        drawn = 1  # tokens up to and including the one before EOS
        if eos_chance < 1.0:
            drawn += int(math.log(1.0 - rng.random()) / math.log(1.0 - eos_chance))
        drawn = max(drawn, request.min_tokens)
        if drawn >= request.max_tokens:
            length, finish_reason = request.max_tokens, "length"
        else:
            length, finish_reason = drawn, "stop"
    return ReplyPlan(words=rng.choices(WORD_BYTES, k=length), finish_reason=finish_reason)


def _usage_json(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> bytes:
    usage = b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d' % (
        prompt_tokens,
        completion_tokens,
        prompt_tokens + completion_tokens,
    )
    if cached_tokens is not None:
        usage += b',"prompt_tokens_details":{"cached_tokens":%d}' % cached_tokens
    return usage + b"}"


class StreamEncoder:
    """Byte templates of one request's SSE chunks.

    Args:
        request: the validated request (endpoint and stream options).
        request_id: the ``id`` of every chunk.
        created_unix: the ``created`` field, wall-clock seconds.
        model: the served model name.
    """

    __slots__ = (
        "_cached_tokens",
        "_chat",
        "_continuous",
        "_head",
        "_include_usage",
        "_prompt_tokens",
        "_token_head",
        "_token_tail",
        "_token_tail_open",
    )

    def __init__(self, request: GenerationRequest, request_id: str, created_unix: int, model: str) -> None:
        self._chat = request.endpoint is Endpoint.CHAT
        self._include_usage = request.include_usage
        self._continuous = request.continuous_usage
        self._prompt_tokens = request.prompt_tokens
        self._cached_tokens = request.cached_tokens
        kind = "chat.completion.chunk" if self._chat else "text_completion"
        self._head = (
            b"data: {"
            + f'"id":{json.dumps(request_id)},"object":"{kind}","created":{created_unix},'
            f'"model":{json.dumps(model)},"choices":'.encode()
        )
        field = b'[{"index":0,"delta":{"content":"' if self._chat else b'[{"index":0,"text":"'
        self._token_head = self._head + field
        close = b'"}' if self._chat else b'"'
        self._token_tail_open = close + b',"logprobs":null,"finish_reason":null}]'  # before usage / "}"
        self._token_tail = self._token_tail_open + b"}\n\n"

    def role_chunk(self) -> bytes:
        """Return the chat stream's opening chunk (``delta`` with the role and empty content)."""
        return (
            self._head
            + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
            + self._usage_suffix(0)
        )

    def _usage_suffix(self, completion_tokens: int) -> bytes:
        if self._continuous:
            return b',"usage":' + _usage_json(self._prompt_tokens, completion_tokens, self._cached_tokens) + b"}\n\n"
        return b"}\n\n"

    def add_tokens(self, words: list[bytes], start: int, stop: int, out: list[bytes]) -> None:
        """Append the chunks of tokens ``words[start:stop]`` to ``out`` (one chunk per token)."""
        head = self._token_head
        if self._continuous:
            tail = self._token_tail_open
            for i in range(start, stop):
                out.extend((head, words[i], tail, self._usage_suffix(i + 1)))
            return
        tail = self._token_tail
        for i in range(start, stop):
            out.extend((head, words[i], tail))

    def add_end(self, finish_reason: str, completion_tokens: int, out: list[bytes]) -> None:
        """Append the finish chunk, the usage chunk (if asked for) and ``[DONE]`` to ``out``."""
        empty = b'{"index":0,"delta":{},' if self._chat else b'{"index":0,"text":"",'
        out.append(
            self._head
            + b"["
            + empty
            + b'"logprobs":null,"finish_reason":"'
            + finish_reason.encode()
            + b'"}]'
            + self._usage_suffix(completion_tokens)
        )
        if self._include_usage:
            usage = _usage_json(self._prompt_tokens, completion_tokens, self._cached_tokens)
            out.append(self._head + b'[],"usage":' + usage + b"}\n\n")
        out.append(_DONE)


def encode_whole_reply(
    request: GenerationRequest, plan: ReplyPlan, request_id: str, created_unix: int, model: str
) -> bytes:
    """Return the non-streaming JSON body (``usage`` included) of a finished reply."""
    text = b"".join(plan.words).decode()
    if request.endpoint is Endpoint.CHAT:
        kind = "chat.completion"
        choice: dict[str, object] = {"index": 0, "message": {"role": "assistant", "content": text}}
    else:
        kind = "text_completion"
        choice = {"index": 0, "text": text}
    choice["logprobs"] = None
    choice["finish_reason"] = plan.finish_reason
    completion_tokens = len(plan.words)
    usage: dict[str, object] = {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": request.prompt_tokens + completion_tokens,
    }
    if request.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": request.cached_tokens}
    body = {
        "id": request_id,
        "object": kind,
        "created": created_unix,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }
    return json.dumps(body, separators=(",", ":")).encode()
