"""Session files (``--sessions``): recorded chats and agentic sessions, one session per JSON line.

A line is ``{"id": ..., "system": ..., "steps": [...]}`` (``id`` and
``system`` optional). Each step is one request, sent after the previous one
ended and after the step's pause:

- ``{"user": TEXT, "max_tokens": M, "think_s": S, "assistant": TEXT}``: a user
  message (``{"user_tokens": N}`` instead of text: N tokens of synthetic text,
  exact in the tokenizer's tokens when one is given, else N words);
  ``think_s`` (default ``--think-time``) is waited first; ``assistant`` is the
  recorded reply, put in the history instead of the server's with
  ``--session-history dataset``.
- ``{"tool": NAME, "result": TEXT, "delay_s": S, "max_tokens": M}``: the
  previous reply becomes an assistant message calling tool NAME (OpenAI
  ``tool_calls``, arguments ``args`` if given), its result is appended as a
  ``tool`` message (``{"result_tokens": N}``: N tokens, as ``user_tokens``), and the request is
  sent ``delay_s`` (the tool's run time, default 0) after the previous reply.

Steps depend on the ones before: each request carries the history so far.
Every line is checked before load; a bad line is refused naming its line
number and field. Worker r of n plays sessions r, r + n, ... (cycled).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any

from llmload.errors import DatasetError
from llmload.request.tokens import TokenCounter
from llmload.workload.datasets import Message

__all__ = ["SessionPlayer", "SessionSpec", "SessionStep", "SessionStream", "load_sessions"]

_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "was",
    "for",
    "on",
    "are",
    "with",
    "as",
    "be",
    "at",
    "have",
    "this",
    "from",
    "or",
    "by",
    "word",
    "but",
    "what",
    "some",
    "we",
    "can",
    "out",
    "other",
    "were",
    "all",
    "there",
    "when",
    "up",
    "use",
    "your",
    "how",
    "said",
    "each",
    "which",
    "do",
    "their",
    "time",
    "if",
    "will",
    "way",
    "about",
    "many",
    "then",
    "them",
)


@dataclass(frozen=True, slots=True)
class SessionStep:
    """One request of a session.

    Attributes:
        kind: ``user`` or ``tool``.
        text: the user message or the tool result.
        max_tokens: the request's max_tokens; None = ``--max-tokens``.
        pause_s: wait before sending (think time or tool delay); None = ``--think-time`` (user steps).
        tool: the tool's name (tool steps).
        args: the tool call's JSON arguments (tool steps).
        assistant: the recorded reply (user steps), or None.
    """

    kind: str
    text: str
    max_tokens: int | None = None
    pause_s: float | None = None
    tool: str = ""
    args: str = "{}"
    assistant: str | None = None


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One recorded session: ``line`` in its file, an id, an optional system prompt and its steps."""

    line: int
    id: str
    system: str | None
    steps: tuple[SessionStep, ...]


class _Bad(Exception):  # noqa: N818 - control flow inside this module
    """One line is unusable."""


def load_sessions(path: str, counter: TokenCounter | None = None) -> tuple[SessionSpec, ...]:
    """Read and check every session of ``path``.

    With ``counter`` (``--tokenizer``), the synthetic text of ``user_tokens`` /
    ``result_tokens`` is exactly that many of its tokens (checked by counting);
    without one, that many words (approximate tokens).

    Raises:
        DatasetError: the file cannot be read, or a line is bad (naming it and the field), or an
            exact length is unreachable with ``counter``.
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise DatasetError(f"cannot read --sessions {path!r}: {exc.strerror}; pass a readable JSONL file") from None
    specs = []
    for line_no, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            try:
                obj = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise _Bad(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
            except ValueError as exc:
                raise _Bad(f"invalid JSON ({exc})") from None
            specs.append(_session(obj, line_no, counter))
        except _Bad as bad:
            raise DatasetError(
                f"--sessions {path}:{line_no}: {bad}; fix the line (see docs/guides/traces-sessions.md)"
            ) from None
    if not specs:
        raise DatasetError(f'--sessions {path!r} has no session; write one JSON object per line with "steps"')
    return tuple(specs)


def _text_or_tokens(
    obj: dict[str, Any], text_key: str, tokens_key: str, where: str, seed: str, *, counter: TokenCounter | None
) -> str:
    text = obj.get(text_key)
    if isinstance(text, str):
        return text
    n = obj.get(tokens_key)
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        rng = random.Random(seed)
        words = rng.choices(_WORDS, k=n)
        return " ".join(words) if counter is None else _exact(words, n, counter, rng, f"{where}.{tokens_key}")
    raise _Bad(f"{where} needs a string {text_key!r} or a positive integer {tokens_key!r}")


def _exact(words: list[str], target: int, counter: TokenCounter, rng: random.Random, where: str) -> str:
    """Trim or pad ``words`` at the end until their text is ``target`` tokens of ``counter``."""
    text = " ".join(words)
    for _ in range(4 * target + 20):
        got = counter.count(text)
        if got == target:
            return text
        if got > target and words:
            words.pop()
        else:
            words.append(rng.choice(_WORDS))
        text = " ".join(words)
    raise _Bad(
        f"{where}: cannot build exactly {target} tokens with this tokenizer (got {counter.count(text)}); "
        "use another tokenizer, or give the text itself"
    )


def _seconds(obj: dict[str, Any], key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _Bad(f"{where}.{key} must be seconds >= 0, got {value!r:.40}")
    return float(value)


def _session(obj: Any, line_no: int, counter: TokenCounter | None) -> SessionSpec:
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object, got {type(obj).__name__}")
    steps_raw = obj.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        raise _Bad("needs a non-empty 'steps' list")
    system = obj.get("system")
    if system is not None and not isinstance(system, str):
        raise _Bad("'system' must be a string")
    steps = []
    for i, step in enumerate(steps_raw):
        where = f"steps[{i}]"
        if not isinstance(step, dict):
            raise _Bad(f"{where} must be an object")
        max_tokens = step.get("max_tokens")
        bad_max = isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        if max_tokens is not None and bad_max:
            raise _Bad(f"{where}.max_tokens must be a positive integer, got {max_tokens!r:.40}")
        seed = f"{line_no}:{i}"
        if "tool" in step:
            if i == 0:
                raise _Bad(f"{where} is a tool step, but a session starts with a user step")
            if not isinstance(step["tool"], str) or not step["tool"]:
                raise _Bad(f"{where}.tool must be the tool's name")
            text = _text_or_tokens(step, "result", "result_tokens", where, seed, counter=counter)
            args = json.dumps(step.get("args", {}))
            pause = _seconds(step, "delay_s", where) or 0.0
            steps.append(SessionStep("tool", text, max_tokens, pause, step["tool"], args))
        elif "user" in step or "user_tokens" in step:
            text = _text_or_tokens(step, "user", "user_tokens", where, seed, counter=counter)
            assistant = step.get("assistant")
            if assistant is not None and not isinstance(assistant, str):
                raise _Bad(f"{where}.assistant must be a string")
            steps.append(SessionStep("user", text, max_tokens, _seconds(step, "think_s", where), assistant=assistant))
        else:
            raise _Bad(f"{where} needs 'user' (or 'user_tokens') or 'tool'")
    session_id = obj.get("id")
    return SessionSpec(line_no, str(session_id) if session_id is not None else f"line{line_no}", system, tuple(steps))


class SessionPlayer:
    """One user's way through one recorded session: the history so far and the next step.

    Args:
        spec: the session.
        history_from_dataset: put each user step's recorded ``assistant`` reply in the
            history (when it has one) instead of the server's reply.
    """

    def __init__(self, spec: SessionSpec, *, history_from_dataset: bool = False) -> None:
        self.spec = spec
        self._from_dataset = history_from_dataset
        self._history: list[Message] = [] if spec.system is None else [Message("system", spec.system)]
        self._step = 0
        self._last_reply = ""

    @property
    def next_step(self) -> SessionStep | None:
        """The step about to be sent; None when the session is over."""
        return self.spec.steps[self._step] if self._step < len(self.spec.steps) else None

    def messages(self) -> tuple[Message, ...]:
        """The next request's messages: the history, then the step's user message or tool call and result.

        Raises:
            IndexError: the session is over.
        """
        step = self.spec.steps[self._step]
        if step.kind == "user":
            return (*self._history, Message("user", step.text))
        call_id = f"call_{self.spec.line}_{self._step}"
        call = Message("assistant", self._last_reply, tool_call_id=call_id, tool_name=step.tool, tool_args=step.args)
        return (*self._history, call, Message("tool", step.text, tool_call_id=call_id))

    def record_reply(self, sent: tuple[Message, ...], reply: str) -> None:
        """The step was answered with ``reply``: it and its reply become the history."""
        step = self.spec.steps[self._step]
        self._step += 1
        kept = step.assistant if self._from_dataset and step.assistant is not None else reply
        self._last_reply = kept
        next_step = self.next_step
        if next_step is not None and next_step.kind == "tool":
            self._history = list(sent)  # the reply becomes the tool call of the next step
        else:
            self._history = [*sent, Message("assistant", kept)]


class SessionStream:
    """Worker ``rank`` of ``stride``: sessions rank, rank + stride, ... of the file, cycled."""

    def __init__(self, specs: tuple[SessionSpec, ...], rank: int, stride: int) -> None:
        if not specs or not 0 <= rank < stride:
            raise ValueError(f"need sessions and 0 <= rank < stride, got {len(specs)}, {rank}, {stride}")
        self._specs = specs
        self._k = rank
        self._stride = stride

    def next(self) -> SessionSpec:
        """The next session of this worker."""
        spec = self._specs[self._k % len(self._specs)]
        self._k += self._stride
        return spec
