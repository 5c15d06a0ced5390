"""The fields whose JSON type servers vary → generated text, split into answer and reasoning (pure).

Servers disagree on the type of nearly every generated-text field of a chunk.
``read_delta`` and ``read_text`` accept every shape seen in the field and say,
for each piece of text, whether it is *content* (the answer: counts for the
time to first content token) or *reasoning* (a generated token for TTFT and
token counts, but not content):

- ``content`` / completions ``text``: a string, null, an object (one part) or
  a list of typed parts, nested to any depth (``NESTING_LIMIT``). A part is a
  string or an object whose ``type`` says what it holds:
  ``{"type": "text", "text": ...}`` (also ``output_text``, ``text_delta``,
  and ``"text": {"value": ...}`` as the Assistants API nests it) is content;
  ``{"type": "thinking", "thinking": [parts] | str}`` (Mistral Magistral,
  Anthropic-style gateways, also ``thinking_delta``), ``reasoning``, ``reasoning_text``,
  ``summary_text``, ``reasoning.text`` are reasoning, and everything nested in
  a reasoning part is reasoning. ``{"type": "refusal", "refusal": ...}`` is
  content. A typed part without any text field (images, audio, signatures,
  redacted reasoning) carries no streamed text and is skipped; the first one
  skipped is kept (``DeltaText.skipped``) so that a reply left empty by them
  says so.
- ``refusal``: content, in any of the shapes above.
- ``reasoning_content`` and ``reasoning`` (string, parts or null) are
  reasoning; a server that mirrors one text in both (kimi-code #3928) is
  counted once. ``thinking`` and OpenRouter's ``reasoning_details`` are read
  only when neither of those two carries text (OpenRouter mirrors
  ``reasoning`` in ``reasoning_details``).
- ``tool_calls`` (a list of calls, or one call object) and the legacy
  ``function_call``: the function ``name`` and ``arguments``; arguments are a
  string, or any other JSON value (an object, most often), JSON-encoded so it
  can be counted as text. A non-empty ``tool_calls`` is a generated token even
  before its text arrives.

Anything else — a number where text belongs, a part that is neither a string
nor an object, an untyped object without text — is not understood and raises
``SSEProtocolError`` naming the field path and its JSON type, e.g.
``choices[0].delta.content is a number (42)``.
"""

from __future__ import annotations

import json
from typing import Any

from llmload.errors import SSEProtocolError

__all__ = ["NESTING_LIMIT", "DeltaText", "describe", "read_delta", "read_text"]

NESTING_LIMIT = 8
"""Parts nested deeper than this are refused (no server nests more than 3)."""

_REASONING_TYPES = frozenset(
    {"thinking", "thinking_delta", "reasoning", "reasoning_text", "reasoning_content", "summary_text", "reasoning.text"}
)
_REASONING_KEYS = frozenset({"thinking", "reasoning", "reasoning_content"})
# where a part keeps its text, in the order looked at (the first one present is read, once)
_TEXT_KEYS = ("text", "content", "refusal", "value", "thinking", "reasoning", "reasoning_content", "summary")
_REASONING_PART_KEYS = ("thinking", "reasoning", "reasoning_content", "text", "content", "value", "summary")
_PARTS = "a string, a list of typed parts, an object or null"


class DeltaText:
    """The generated text of one delta, message or completions choice.

    Attributes:
        pieces: text fragments in order (content, reasoning and tool-call text).
        content: non-empty content (answer) text was seen.
        reasoning: non-empty reasoning text was seen.
        tool_call: a non-empty ``tool_calls`` (or a ``function_call``) was seen.
        shaped: some text came from a field that was not a plain string
            (parts, objects, mirrored reasoning): such deltas are never
            learned as a fast-path template.
        skipped: the first typed part without any text field that was
            skipped, as ``<path> has type '<type>'`` (an empty reply's message
            names it); None if none.
    """

    __slots__ = ("content", "pieces", "reasoning", "shaped", "skipped", "tool_call")

    def __init__(self) -> None:
        """Nothing seen yet."""
        self.pieces: list[str] = []
        self.content = self.reasoning = self.tool_call = self.shaped = False
        self.skipped: str | None = None

    def add(self, text: str, *, reasoning: bool) -> None:
        """Add a fragment of content (or of reasoning); empty text carries no token."""
        if text:
            self.pieces.append(text)
            if reasoning:
                self.reasoning = True
            else:
                self.content = True


def describe(value: Any) -> str:
    """The JSON type of ``value`` with a short sample, for messages: ``a number (42)``."""
    if value is None:
        return "null"
    kind = (
        "a boolean"
        if isinstance(value, bool)
        else "a number"
        if isinstance(value, int | float)
        else "a string"
        if isinstance(value, str)
        else "a list"
        if isinstance(value, list)
        else "an object"
        if isinstance(value, dict)
        else type(value).__name__
    )
    try:
        sample = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        sample = repr(value)
    return f"{kind} ({sample[:60]}{'…' if len(sample) > 60 else ''})"


def _refuse(path: str, value: Any, expected: str) -> SSEProtocolError:
    return SSEProtocolError(
        f"{path} is {describe(value)}; expected {expected} (a reply shape llmload does not read: "
        "report it with this message)"
    )


def read_text(value: Any, path: str, into: DeltaText, *, reasoning: bool = False) -> None:
    """Read a text field of any shape (string, parts, object, null) into ``into``.

    Raises:
        SSEProtocolError: a part that is not understood (the message names its path and JSON type).
    """
    if type(value) is str:
        into.add(value, reasoning=reasoning)
    elif value is not None:
        into.shaped = True
        _parts(value, path, into, reasoning, 0)


def _parts(value: Any, path: str, into: DeltaText, reasoning: bool, depth: int) -> None:
    if depth > NESTING_LIMIT:
        raise SSEProtocolError(f"{path} nests parts more than {NESTING_LIMIT} deep; expected flat typed parts")
    if isinstance(value, str):
        into.add(value, reasoning=reasoning)
    elif isinstance(value, list):
        for i, part in enumerate(value):
            if part is not None:
                _parts(part, f"{path}[{i}]", into, reasoning, depth + 1)
    elif isinstance(value, dict):
        _part(value, path, into, reasoning, depth)
    elif value is not None:
        raise _refuse(path, value, _PARTS)


def _part(part: dict[str, Any], path: str, into: DeltaText, reasoning: bool, depth: int) -> None:
    kind = part.get("type")
    if kind is not None and not isinstance(kind, str):
        raise _refuse(f"{path}.type", kind, "a string")
    thinking = reasoning or kind in _REASONING_TYPES
    for key in _REASONING_PART_KEYS if thinking else _TEXT_KEYS:
        text = part.get(key)
        if text is not None:
            _parts(text, f"{path}.{key}", into, thinking or key in _REASONING_KEYS, depth + 1)
            return
    if kind is None and part:
        raise _refuse(path, part, 'a typed part ({"type": "text", "text": ...}) or a string')
    # a typed part without text (image, audio, signature, redacted reasoning): nothing streamed
    if into.skipped is None:
        into.skipped = f"{path} has type {kind!r}"


def read_delta(delta: Any, path: str, into: DeltaText) -> None:
    """Read a chat ``delta`` or ``message`` object into ``into``.

    Raises:
        SSEProtocolError: ``delta`` is not an object, or one of its text fields is not understood.
    """
    if type(delta) is not dict:
        raise _refuse(path, delta, "an object")
    content = delta.get("content")
    if type(content) is str:
        into.add(content, reasoning=False)
    elif content is not None:
        read_text(content, f"{path}.content", into)
    if "refusal" in delta:
        read_text(delta["refusal"], f"{path}.refusal", into)
    if "reasoning_content" in delta or "reasoning" in delta or "thinking" in delta or "reasoning_details" in delta:
        _reasoning(delta, path, into)
    if "tool_calls" in delta or "function_call" in delta:
        _tool_calls(delta, path, into)


def _reasoning(delta: dict[str, Any], path: str, into: DeltaText) -> None:
    texts = []
    for key in ("reasoning_content", "reasoning"):
        part = DeltaText()
        read_text(delta.get(key), f"{path}.{key}", part, reasoning=True)
        into.shaped = into.shaped or part.shaped
        texts.append("".join(part.pieces))
    first, second = texts
    if first and second:
        into.shaped = True  # mirrored (or two texts): never a fast-path template
        into.add(first, reasoning=True)
        if second != first:  # the same text in both fields is one text (kimi-code #3928)
            into.add(second, reasoning=True)
    elif first or second:
        into.add(first or second, reasoning=True)
    else:  # only when the two usual fields are silent: these mirror them on some gateways
        for key in ("thinking", "reasoning_details"):
            if delta.get(key) is not None:
                read_text(delta[key], f"{path}.{key}", into, reasoning=True)
                return


def _tool_calls(delta: dict[str, Any], path: str, into: DeltaText) -> None:
    calls = delta.get("tool_calls")
    if isinstance(calls, dict):
        calls = [calls]
        into.shaped = True
    elif calls is not None and not isinstance(calls, list):
        raise _refuse(f"{path}.tool_calls", calls, "a list of tool calls or null")
    listed: list[tuple[str, Any]] = [(f"{path}.tool_calls[{i}]", call) for i, call in enumerate(calls or ())]
    if delta.get("function_call") is not None:
        listed.append((f"{path}.function_call", {"function": delta["function_call"]}))
    for call_path, call in listed:
        if call is None:
            continue
        if not isinstance(call, dict):
            raise _refuse(call_path, call, "a tool call object")
        into.tool_call = True
        function = call.get("function")
        if function is None:
            continue
        if not isinstance(function, dict):
            raise _refuse(f"{call_path}.function", function, "an object with name and arguments")
        name = function.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise _refuse(f"{call_path}.function.name", name, "a string")
            if name:
                into.pieces.append(name)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            if arguments:
                into.pieces.append(arguments)
        elif arguments is not None:  # an object (or any JSON value): counted as the JSON text a model writes
            into.shaped = True
            into.pieces.append(json.dumps(arguments, separators=(",", ":"), ensure_ascii=False))
