"""Prompt files read into typed items: JSONL (``prompt`` or chat ``messages``) and ShareGPT JSON.

Formats:

- JSONL, one JSON object per line: ``{"prompt": "..."}`` or
  ``{"messages": [{"role": "user", "content": "..."}, ...]}``, each with an
  optional positive integer ``max_tokens``. Blank lines are ignored.
- ShareGPT (as used by vLLM ``benchmark_serving`` and SGLang ``bench_serving``):
  a JSON array of ``{"conversations": [{"from": "human", "value": "..."},
  {"from": "gpt", "value": "..."}, ...]}``. The first human turn is the
  prompt; the turn after it (the reply) is kept so its length can serve as the
  output length (``--output-tokens dataset``).

Text that cannot be sent as UTF-8 (a lone UTF-16 surrogate such as
``"\\ud83d"`` without its pair) makes its line bad.

A bad line or entry is skipped and reported as ``FILE:LINE: reason`` (the
line where a ShareGPT entry starts); a file with no usable item raises
``DatasetError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from llmload.errors import DatasetError

__all__ = ["DATASET_FORMATS", "Dataset", "DatasetFormat", "DatasetItem", "Message", "load_dataset"]

DatasetFormat = Literal["auto", "jsonl", "sharegpt"]
DATASET_FORMATS: tuple[DatasetFormat, ...] = ("auto", "jsonl", "sharegpt")

_HUMAN = frozenset({"human", "user"})
_MAX_PROBLEMS_KEPT = 100


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: its text.
        tool_call_id: an assistant tool call's id, or the id a ``tool`` message answers; None otherwise.
        tool_name: set on an assistant message that calls this tool (``--sessions`` tool steps).
        tool_args: that call's JSON arguments.
    """

    role: str
    content: str
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_args: str = "{}"

    def as_dict(self) -> dict[str, Any]:
        """The message as the chat API takes it (OpenAI ``tool_calls`` / ``tool_call_id`` for tool turns)."""
        if self.tool_name is not None:
            function = {"name": self.tool_name, "arguments": self.tool_args}
            call = {"id": self.tool_call_id, "type": "function", "function": function}
            return {"role": self.role, "content": self.content or None, "tool_calls": [call]}
        if self.tool_call_id is not None:
            return {"role": self.role, "tool_call_id": self.tool_call_id, "content": self.content}
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, slots=True)
class DatasetItem:
    """One usable prompt of a file.

    Attributes:
        messages: the prompt as chat messages (a ``prompt`` line is one user message).
        max_tokens: the line's own ``max_tokens``; None if it has none.
        reply: ShareGPT only: the text of the reply to the prompt; None otherwise.
    """

    messages: tuple[Message, ...]
    max_tokens: int | None = None
    reply: str | None = None


@dataclass(frozen=True, slots=True)
class Dataset:
    """The usable items of one file and what was wrong with the others.

    Attributes:
        path: the file.
        items: usable items in file order (at least one).
        skipped: number of bad lines or entries.
        problems: ``FILE:LINE: reason`` of the first ``100`` bad ones.
    """

    path: str
    items: tuple[DatasetItem, ...]
    skipped: int
    problems: tuple[str, ...]


class _Bad(Exception):  # noqa: N818 - control flow inside this module
    """One line or entry is unusable; the message says why."""


def load_dataset(path: str, fmt: DatasetFormat = "auto") -> Dataset:
    """Read ``path`` as ``fmt`` (``auto``: ``.json`` or a leading ``[`` means ShareGPT, else JSONL).

    Raises:
        DatasetError: the file cannot be read, is not UTF-8, is not the
            format asked for, or has no usable item; the message names the
            file (and for bad items the first problems with line numbers).
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise DatasetError(
            f"cannot read --dataset {path!r}: {exc.strerror}; pass a readable JSONL or ShareGPT JSON file"
        ) from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"--dataset {path!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if fmt == "auto":
        fmt = "sharegpt" if path.endswith(".json") or text.lstrip().startswith("[") else "jsonl"
    items: list[DatasetItem] = []
    problems: list[str] = []
    skipped = 0
    for line_no, parsed in _sharegpt_entries(path, text) if fmt == "sharegpt" else _jsonl_lines(text):
        try:
            item = _read_sharegpt(parsed) if fmt == "sharegpt" else _read_jsonl(parsed)
            _check_encodable(item)
        except _Bad as bad:
            skipped += 1
            if len(problems) < _MAX_PROBLEMS_KEPT:
                problems.append(f"{path}:{line_no}: {bad}")
            continue
        items.append(item)
    if not items:
        first = f"; first problem: {problems[0]}" if problems else ""
        raise DatasetError(
            f"no usable prompt in --dataset {path!r} ({fmt}, {skipped} bad, 0 usable){first}. "
            'Each JSONL line needs "prompt" or "messages"; each ShareGPT entry a human turn'
        )
    return Dataset(path=path, items=tuple(items), skipped=skipped, problems=tuple(problems))


def _check_encodable(item: DatasetItem) -> None:
    """Refuse text that cannot be sent as UTF-8: a lone UTF-16 surrogate (``\\ud83d`` without its pair)."""
    texts = [(f"messages[{i}].content", m.content) for i, m in enumerate(item.messages)]
    texts += [(f"messages[{i}].role", m.role) for i, m in enumerate(item.messages)]
    for where, text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = text[exc.start : exc.end]
            raise _Bad(
                f"lone surrogate {bad!r} at character {exc.start} of {where}: it cannot be sent as UTF-8 "
                "(a \\uXXXX escape of half a surrogate pair); write the character itself or its full pair"
            ) from None


# ── JSONL ───────────────────────────────────────────────────────────────────
def _jsonl_lines(text: str) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((line_no, json.loads(line)))
        except ValueError as exc:
            out.append((line_no, _Bad(f"invalid JSON ({exc})")))
    return out


def _read_jsonl(obj: Any) -> DatasetItem:
    if isinstance(obj, _Bad):
        raise obj
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object, got {type(obj).__name__}")
    if "prompt" in obj and "messages" in obj:
        raise _Bad('has both "prompt" and "messages"; keep one')
    if "prompt" in obj:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise _Bad(f'"prompt" must be a non-empty string, got {prompt!r:.80}')
        messages: tuple[Message, ...] = (Message("user", prompt),)
    elif "messages" in obj:
        messages = _messages(obj["messages"])
    else:
        raise _Bad(f'needs "prompt" or "messages" (keys: {sorted(obj)[:8]})')
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise _Bad(f'"max_tokens" must be a positive integer, got {max_tokens!r}')
    return DatasetItem(messages=messages, max_tokens=max_tokens)


def _messages(raw: Any) -> tuple[Message, ...]:
    if not isinstance(raw, list) or not raw:
        raise _Bad(f'"messages" must be a non-empty list, got {raw!r:.80}')
    out: list[Message] = []
    for i, message in enumerate(raw):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(role, str) or not role or not isinstance(content, str):
            raise _Bad(f'messages[{i}] needs string "role" and "content", got {message!r:.80}')
        out.append(Message(role, content))
    if not any(m.content.strip() for m in out):
        raise _Bad('"messages" has no non-empty content')
    return tuple(out)


# ── ShareGPT ────────────────────────────────────────────────────────────────
def _sharegpt_entries(path: str, text: str) -> list[tuple[int, Any]]:
    """Decode a top-level JSON array element by element, keeping each element's line number.

    Raises:
        DatasetError: the text is not a JSON array.
    """
    decoder = json.JSONDecoder()
    pos = _skip_space(text, 0)
    if not text.startswith("[", pos):
        raise DatasetError(
            f"--dataset {path!r} is not a ShareGPT JSON array (it does not start with '['); "
            "pass --dataset-format jsonl for one JSON object per line"
        )
    out: list[tuple[int, Any]] = []
    line_no, counted_to = 1, 0
    pos = _skip_space(text, pos + 1)
    while pos < len(text) and text[pos] != "]":
        line_no += text.count("\n", counted_to, pos)
        counted_to = pos
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{path}:{exc.lineno}: invalid JSON in the ShareGPT array ({exc.msg}); "
                "fix the file (it must be one JSON array)"
            ) from None
        out.append((line_no, obj))
        pos = _skip_space(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_space(text, pos + 1)
        elif pos < len(text) and text[pos] != "]":
            line_no += text.count("\n", counted_to, pos)
            raise DatasetError(f"{path}:{line_no}: expected ',' or ']' in the ShareGPT array")
    return out


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _read_sharegpt(obj: Any) -> DatasetItem:
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object, got {type(obj).__name__}")
    turns = obj.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise _Bad('needs a non-empty "conversations" list')
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("from") not in _HUMAN:
            continue
        prompt = turn.get("value")
        if not isinstance(prompt, str) or not prompt.strip():
            raise _Bad(f'conversations[{i}] (the first human turn) has no text "value"')
        reply = None
        if i + 1 < len(turns) and isinstance(turns[i + 1], dict):
            value = turns[i + 1].get("value")
            reply = value if isinstance(value, str) else None
        return DatasetItem(messages=(Message("user", prompt),), reply=reply)
    raise _Bad('no human turn ("from": "human") in "conversations"')
