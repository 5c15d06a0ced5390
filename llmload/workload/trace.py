"""Timed traces: one request per line, replayed at the line's time, each line sent once over all workers.

Formats (JSON Lines; blank lines are ignored):

- ``mooncake`` (the Mooncake/FAST'25 trace layout): ``timestamp`` (ms),
  ``input_length`` and ``output_length`` (tokens) and ``hash_ids``: one id
  per block of ``--trace-block-tokens`` prompt tokens (512 in Mooncake's
  traces, the last block possibly partial); two requests with the same
  leading ids share exactly that prompt prefix.
- ``jsonl``: a time, ``offset_s`` (seconds) or ``timestamp_ms``; then
  ``input_tokens`` (optionally ``hash_ids``), or ``prompt`` (text) or
  ``messages`` (chat); optional ``output_tokens`` or ``max_tokens``, and
  ``session_id`` (a string).

``auto`` takes ``mooncake`` when the first object has ``hash_ids`` or
``input_length``. Times are offsets from the first line's time, in file
order: a time earlier than the previous line's is a bad line, as are missing
or negative fields, text that is not UTF-8, and a ``hash_ids`` list that does
not fit ``input_length``. Every line is checked before any load; the trace is
refused naming the first bad lines, or (``--trace-skip-bad``) they are
skipped and counted.

Prompts for lengths are built of single-token words: block id ``h`` is
always the same text, so shared ids mean a shared prefix; with a tokenizer
every prompt is exactly ``input_length`` tokens (checked by counting),
without one a word is taken as a token (approximate). Line i of a trace goes
to worker ``i mod n`` of n, or, when it has a ``session_id``, to the worker
its session hashes to (``trace_rank``: all of a session's lines on one
worker); that worker sends it at ``start + offset / --trace-speed``, and a
session's line not before its previous line has completed (``edge.replay``).
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llmload.errors import DatasetError
from llmload.request.tokens import TokenCounter
from llmload.workload.datasets import Message

__all__ = [
    "TRACE_FORMATS",
    "Trace",
    "TraceCursor",
    "TraceFormat",
    "TraceLine",
    "TracePrompts",
    "load_trace",
    "trace_rank",
    "trace_shares",
]

TraceFormat = Literal["auto", "mooncake", "jsonl"]
TRACE_FORMATS: tuple[TraceFormat, ...] = ("auto", "mooncake", "jsonl")

_PROBLEMS_KEPT = 100
_PROBLEMS_SHOWN = 3
_BLOCKS_KEPT = 4096
_MAX_FIT_STEPS = 64


@dataclass(frozen=True, slots=True)
class TraceLine:
    """One request of a trace.

    Attributes:
        line: its 1-based line number in the file.
        offset_s: seconds from the trace's first line to its send time (before ``--trace-speed``).
        input_tokens: prompt length to build; None when the line has its own text.
        output_tokens: max_tokens of the request; None = ``--max-tokens``.
        hash_ids: prompt block ids (shared ids = shared prefix); empty = no sharing.
        messages: the line's own prompt (``prompt``/``messages``); None = built from the lengths.
        session_id: the line's session, or None.
    """

    line: int
    offset_s: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    hash_ids: tuple[int, ...] = ()
    messages: tuple[Message, ...] | None = None
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """The usable lines of a trace file, in file (and time) order.

    Attributes:
        path: the file.
        format: ``mooncake`` or ``jsonl`` (as detected or given).
        lines: the usable lines (at least one).
        skipped: bad lines skipped (``--trace-skip-bad``).
        problems: ``FILE:LINE: reason`` of the first bad lines.
        block_tokens: tokens per ``hash_ids`` block.
    """

    path: str
    format: str
    lines: tuple[TraceLine, ...]
    skipped: int
    problems: tuple[str, ...]
    block_tokens: int

    @property
    def duration_s(self) -> float:
        """Seconds from the first line's time to the last's (at speed 1)."""
        return self.lines[-1].offset_s if self.lines else 0.0

    def describe(self) -> str:
        """One line for the log."""
        text = f"trace {self.path} ({self.format}, {len(self.lines)} requests over {self.duration_s:.3f} s"
        return text + (f", {self.skipped} bad lines skipped)" if self.skipped else ")")


class _Bad(Exception):  # noqa: N818 - control flow inside this module
    """One line is unusable; the message names the field and why."""


def load_trace(path: str, fmt: str = "auto", *, skip_bad: bool = False, block_tokens: int = 512) -> Trace:
    """Read and check every line of ``path`` (before any load).

    Raises:
        DatasetError: the file cannot be read; a line is bad and ``skip_bad``
            is False (the message names the line, the field and the fix); or no
            line is usable.
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise DatasetError(f"cannot read --trace {path!r}: {exc.strerror}; pass a readable JSONL trace") from None
    parsed: list[tuple[int, Any]] = []
    for line_no, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            parsed.append((line_no, json.loads(line.decode("utf-8"))))
        except UnicodeDecodeError as exc:
            parsed.append((line_no, _Bad(f"not UTF-8 text ({exc.reason} at byte {exc.start} of the line)")))
        except ValueError as exc:
            parsed.append((line_no, _Bad(f"invalid JSON ({exc})")))
    kind = fmt if fmt != "auto" else _detect(parsed)
    lines: list[TraceLine] = []
    problems: list[str] = []
    skipped = 0
    first_ms: float | None = None
    last_ms = -math.inf
    for line_no, obj in parsed:
        try:
            if isinstance(obj, _Bad):
                raise obj
            if not isinstance(obj, dict):
                raise _Bad(f"expected a JSON object, got {type(obj).__name__}")
            time_ms = _time_ms(obj, kind)
            span_ms = time_ms - (first_ms if first_ms is not None else time_ms)
            if not math.isfinite(time_ms) or span_ms > _MAX_SPAN_MS:
                raise _Bad(
                    f"its time is {span_ms / 1000.0:g} s after the first line's, more than a trace spans "
                    f"(at most {_MAX_SPAN_MS / 86_400_000:g} days): check the unit ('offset_s' is seconds, "
                    "'timestamp_ms' and mooncake's 'timestamp' milliseconds)"
                )
            if time_ms < last_ms:
                raise _Bad(
                    f"out of order: its time {time_ms:g} ms is before the previous line's {last_ms:g} ms "
                    "(sort the trace by time)"
                )
            entry = _read_mooncake(obj, block_tokens) if kind == "mooncake" else _read_jsonl(obj, block_tokens)
        except _Bad as bad:
            skipped += 1
            if len(problems) < _PROBLEMS_KEPT:
                problems.append(f"{path}:{line_no}: {bad}")
            continue
        last_ms = time_ms
        first_ms = time_ms if first_ms is None else first_ms
        lines.append(_at(entry, line_no, (time_ms - first_ms) / 1000.0))
    if problems and not skip_bad:
        shown = "; ".join(problems[:_PROBLEMS_SHOWN])
        more = f" (and {skipped - _PROBLEMS_SHOWN} more bad lines)" if skipped > _PROBLEMS_SHOWN else ""
        raise DatasetError(
            f"--trace {path!r} ({kind}) has {skipped} bad line(s), nothing was sent: {shown}{more}. "
            "Fix them, or pass --trace-skip-bad to skip bad lines (they are counted)"
        )
    if not lines:
        raise DatasetError(
            f"no usable request in --trace {path!r} ({kind}, {skipped} bad, 0 usable); "
            "a mooncake line needs timestamp, input_length, output_length and hash_ids"
        )
    return Trace(path, kind, tuple(lines), skipped, tuple(problems), block_tokens)


_MAX_SPAN_MS = 366 * 86_400_000.0
"""The longest span a trace may have, first line to last (ms): public traces span an hour to four months."""


def _detect(parsed: Sequence[tuple[int, Any]]) -> str:
    for _, obj in parsed:
        if isinstance(obj, dict):
            return "mooncake" if "hash_ids" in obj or "input_length" in obj else "jsonl"
    return "jsonl"


def _at(entry: TraceLine, line_no: int, offset_s: float) -> TraceLine:
    return TraceLine(
        line_no, offset_s, entry.input_tokens, entry.output_tokens, entry.hash_ids, entry.messages, entry.session_id
    )


def _number(obj: dict[str, Any], name: str) -> float:
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Bad(f"field {name!r} must be a finite number, got {value!r:.40}")
    if value < 0:
        raise _Bad(f"field {name!r} is negative ({value!r}); times and lengths are >= 0")
    return float(value)


def _count(obj: dict[str, Any], name: str, *, required: bool) -> int | None:
    if name not in obj:
        if required:
            raise _Bad(f"missing field {name!r}")
        return None
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"field {name!r} must be an integer, got {value!r:.40}")
    if value < 1:
        raise _Bad(f"field {name!r} must be >= 1, got {value}")
    return value


def _time_ms(obj: dict[str, Any], kind: str) -> float:
    if kind == "mooncake":
        if "timestamp" not in obj:
            raise _Bad("missing field 'timestamp' (milliseconds)")
        return _number(obj, "timestamp")
    for name, scale in (("offset_s", 1000.0), ("timestamp_ms", 1.0), ("timestamp", 1.0)):
        if name in obj:
            return _number(obj, name) * scale
    raise _Bad("missing time: give 'offset_s' (seconds) or 'timestamp_ms'")


def _hash_ids(obj: dict[str, Any], input_tokens: int, block_tokens: int, *, required: bool) -> tuple[int, ...]:
    if "hash_ids" not in obj:
        if required:
            raise _Bad("missing field 'hash_ids'")
        return ()
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(type(h) is int and h >= 0 for h in ids):
        raise _Bad(f"field 'hash_ids' must be a list of integers >= 0, got {ids!r:.60}")
    if ids and not (len(ids) - 1) * block_tokens < input_tokens <= len(ids) * block_tokens:
        raise _Bad(
            f"field 'hash_ids' has {len(ids)} block(s) of {block_tokens} tokens, which does not fit "
            f"input length {input_tokens}; pass the trace's block size with --trace-block-tokens"
        )
    return tuple(ids)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"field {name!r} must be a string, got {value!r:.40}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Bad(
            f"field {name!r} has a lone surrogate at character {exc.start}: it cannot be sent as UTF-8"
        ) from None
    return value


def _read_mooncake(obj: dict[str, Any], block_tokens: int) -> TraceLine:
    input_tokens = _count(obj, "input_length", required=True)
    assert input_tokens is not None
    output_tokens = _count(obj, "output_length", required=True)
    ids = _hash_ids(obj, input_tokens, block_tokens, required=True)
    return TraceLine(0, 0.0, input_tokens, output_tokens, ids)


def _read_jsonl(obj: dict[str, Any], block_tokens: int) -> TraceLine:
    output_tokens = _count(obj, "output_tokens", required=False) or _count(obj, "max_tokens", required=False)
    session = obj.get("session_id")
    session_id = None if session is None else _text(session, "session_id")
    sources = [name for name in ("input_tokens", "prompt", "messages") if name in obj]
    if len(sources) != 1:
        raise _Bad(f"needs exactly one of 'input_tokens', 'prompt' or 'messages', got {sources or 'none'}")
    if sources[0] == "input_tokens":
        input_tokens = _count(obj, "input_tokens", required=True)
        assert input_tokens is not None
        ids = _hash_ids(obj, input_tokens, block_tokens, required=False)
        return TraceLine(0, 0.0, input_tokens, output_tokens, ids, None, session_id)
    if sources[0] == "prompt":
        prompt = _text(obj["prompt"], "prompt")
        if not prompt.strip():
            raise _Bad("field 'prompt' is empty")
        messages: tuple[Message, ...] = (Message("user", prompt),)
    else:
        raw = obj["messages"]
        if not isinstance(raw, list) or not raw:
            raise _Bad("field 'messages' must be a non-empty list of {'role', 'content'}")
        out = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or "role" not in item or "content" not in item:
                raise _Bad(f"messages[{i}] needs 'role' and 'content'")
            out.append(
                Message(_text(item["role"], f"messages[{i}].role"), _text(item["content"], f"messages[{i}].content"))
            )
        messages = tuple(out)
    return TraceLine(0, 0.0, None, output_tokens, (), messages, session_id)


class TracePrompts:
    """The prompt text of each trace line: deterministic, shared blocks give shared prefixes.

    Args:
        trace: the checked trace.
        counter: tokenizer for exact lengths; None = one word taken as one token.
        words: single-token words to build text of (``Workload`` picks them for the tokenizer).
        seed: ``--seed``; the same seed gives the same text for every block.
    """

    def __init__(self, trace: Trace, counter: TokenCounter | None, words: Sequence[str], seed: int) -> None:
        self.trace = trace
        self._counter = counter
        self._words = words
        self._seed = seed
        self._blocks: OrderedDict[int, list[str]] = OrderedDict()

    def messages(self, line: TraceLine) -> tuple[Message, ...]:
        """The chat messages of ``line`` (its own, or one user message of built text).

        Raises:
            DatasetError: an exact length cannot be reached with this tokenizer.
        """
        if line.messages is not None:
            return line.messages
        return (Message("user", self.text(line)),)

    def text(self, line: TraceLine) -> str:
        """Built prompt text of a length line: its blocks' words, then words unique to the line."""
        target = line.input_tokens or 0
        words: list[str] = []
        block = self.trace.block_tokens
        for h in line.hash_ids:
            words.extend(self._block(h)[: min(block, target - len(words))])
        if len(words) < target:
            rng = random.Random(f"{self._seed}:trace-line:{line.line}")
            words.extend(rng.choices(self._words, k=target - len(words)))
        return self._fit(words, target, line)

    def _block(self, block_id: int) -> list[str]:
        words = self._blocks.get(block_id)
        if words is None:
            rng = random.Random(f"{self._seed}:trace-block:{block_id}")
            words = rng.choices(self._words, k=self.trace.block_tokens)
            self._blocks[block_id] = words
            if len(self._blocks) > _BLOCKS_KEPT:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(block_id)
        return words

    def _fit(self, words: list[str], target: int, line: TraceLine) -> str:
        """Join ``words``; with a tokenizer, trim or pad the end until the text is ``target`` tokens."""
        text = " ".join(words)
        counter = self._counter
        if counter is None:
            return text
        rng = random.Random(f"{self._seed}:trace-fit:{line.line}")
        for _ in range(_MAX_FIT_STEPS):
            got = counter.count(text)
            if got == target:
                return text
            if got > target and words:
                words.pop()
            else:
                words.append(rng.choice(self._words))
            text = " ".join(words)
        raise DatasetError(
            f"--trace line {line.line}: cannot build a prompt of exactly {target} tokens with this tokenizer "
            f"(got {counter.count(text)}); use another tokenizer, or drop --tokenizer for approximate lengths"
        )


def trace_rank(line: TraceLine, index: int, stride: int) -> int:
    """The worker (of ``stride``) that sends trace line ``index``: a session's lines all go to one worker.

    A line with a ``session_id`` goes to ``crc32(session_id) mod stride`` (the
    same on every worker and every run); a line without one to ``index mod stride``.
    """
    if line.session_id is None:
        return index % stride
    return zlib.crc32(line.session_id.encode("utf-8")) % stride


def trace_shares(trace: Trace, stride: int) -> list[int]:
    """How many lines of ``trace`` each of ``stride`` workers sends (``trace_rank``); they add up to all lines."""
    shares = [0] * stride
    for index, line in enumerate(trace.lines):
        shares[trace_rank(line, index, stride)] += 1
    return shares


class TraceCursor:
    """Worker ``rank`` of ``stride``: its trace lines (``trace_rank``), in time order, with their send offsets.

    Args:
        trace: the checked trace (the same on every worker).
        rank, stride: this worker's position and the number of workers.
        speed: ``--trace-speed``; offsets are divided by it.
    """

    def __init__(self, trace: Trace, rank: int, stride: int, speed: float = 1.0) -> None:
        if not 0 <= rank < stride:
            raise ValueError(f"worker rank must be in [0, {stride}), got {rank}")
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.trace = trace
        self.speed = speed
        self._mine = [line for index, line in enumerate(trace.lines) if trace_rank(line, index, stride) == rank]
        self._next = 0
        self._turns: dict[str, int] = {}

    @property
    def remaining(self) -> int:
        """Lines of this worker not taken yet."""
        return len(self._mine) - self._next

    @property
    def next_due_offset_s(self) -> float | None:
        """Scaled offset of the next line not taken yet; None when all are taken."""
        if self._next >= len(self._mine):
            return None
        return self._mine[self._next].offset_s / self.speed

    def take(self) -> tuple[TraceLine, float] | None:
        """The next line of this worker and its scaled offset (seconds from the replay start); None when done."""
        taken = self.take_turn()
        return None if taken is None else (taken[0], taken[1])

    def take_turn(self) -> tuple[TraceLine, float, int] | None:
        """As ``take``, with the line's turn: its 0-based position among its session's lines (0 without one)."""
        if self._next >= len(self._mine):
            return None
        line = self._mine[self._next]
        self._next += 1
        turn = 0
        if line.session_id is not None:
            turn = self._turns.get(line.session_id, 0)
            self._turns[line.session_id] = turn + 1
        return line, line.offset_s / self.speed, turn
