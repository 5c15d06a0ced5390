"""Degenerate output: replies that are well-formed but could not be a healthy model's answer (pure, cheap).

A broken model under load looks exactly like a fast one (short, quick
replies), so these replies are failures in their own categories, never fast
successes. The rules need no tokenizer and bounded memory:

- **empty**: no generated token at all. That is ``Outcome.EMPTY`` (category
  ``empty response``), decided by the client before these rules.
- **repeated token** (``DEGENERATE_REPEATED``): the reply's pieces are the
  texts of its token-bearing events (or, when it has fewer than
  ``MIN_REPEAT_UNITS`` of them, e.g. a non-streamed reply, the
  whitespace-separated words of its text); with at least
  ``MIN_REPEAT_UNITS`` pieces, one piece makes up ``REPEAT_SHARE`` (90 %) of
  them or more. The piece is looked for at five fixed positions (second,
  quarter, middle, three quarters, last) and counted only when it is at two
  of them: a piece with a 90 % share is, unless the other 10 % sit exactly
  there; a healthy reply costs five look-ups.
- **same text** (``DEGENERATE_SAME_TEXT``): the reply's text (by hash) of at
  least ``MIN_SAME_TEXT_PIECES`` token events is that of at least
  ``MIN_SAME_TEXT_REPLIES`` and of ``SAME_TEXT_SHARE`` (90 %) or more of the
  last ``SAME_TEXT_WINDOW`` successful replies this process got for the endpoint
  and model, and those replies answered at least two different prompts (by
  hash). One process's view (``SameTextWatch``): each process lets the first
  replies through before the rule can hold (at most four per endpoint and
  model), and a workload that sends one prompt only is never flagged (the
  same prompt may well get the same answer). Short replies are exempt:
  classification-style prompts legitimately share one-word answers; the
  90 % share keeps a canned answer to some of the prompts (a refusal) a
  success: the rule is "the same text for (nearly) every prompt".

All of it runs once per reply at its end, over the pieces the reply reader
kept; nothing runs per token.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

__all__ = [
    "DEGENERATE_REPEATED",
    "DEGENERATE_SAME_TEXT",
    "MIN_REPEAT_UNITS",
    "MIN_SAME_TEXT_PIECES",
    "MIN_SAME_TEXT_REPLIES",
    "REPEAT_SHARE",
    "SAME_TEXT_SHARE",
    "SAME_TEXT_WINDOW",
    "SAMPLE_CHARS",
    "SameTextWatch",
    "repeated_piece",
    "sample_of",
]

DEGENERATE_REPEATED = "degenerate: repeated token"
DEGENERATE_SAME_TEXT = "degenerate: same text"
MIN_REPEAT_UNITS = 16
REPEAT_SHARE = 0.9
MIN_SAME_TEXT_PIECES = 8
MIN_SAME_TEXT_REPLIES = 5
SAME_TEXT_SHARE = 0.9
SAME_TEXT_WINDOW = 32
SAMPLE_CHARS = 200
"""Characters of a degenerate reply's text kept as its sample."""


def repeated_piece(pieces: Sequence[str], text: str | None = None) -> tuple[str, int, int] | None:
    """The piece that makes up ``REPEAT_SHARE`` or more of the reply, its count and the unit count; else None.

    ``pieces``: the texts of the reply's token-bearing events, in order;
    ``text``: their join, if the caller has it (a short reply is split into words).
    """
    units: Sequence[str] = pieces
    if len(units) < MIN_REPEAT_UNITS:
        units = ("".join(pieces) if text is None else text).split()
    n = len(units)
    if n < MIN_REPEAT_UNITS:
        return None
    probes = (units[1], units[n // 4], units[n // 2], units[(3 * n) // 4], units[n - 1])
    if len(set(probes)) == len(probes):
        return None  # a healthy reply: five different pieces (one set, no scan)
    for piece in probes:
        if probes.count(piece) > 1:  # a piece with a 90 % share is at two probes or more; the first such
            count = units.count(piece)
            return (piece, count, n) if count >= REPEAT_SHARE * n else None
    return None  # unreachable: the set above found two probes alike


def sample_of(text: str) -> str:
    """The first ``SAMPLE_CHARS`` characters of ``text`` (with "…" when cut), as a bounded sample."""
    return text if len(text) <= SAMPLE_CHARS else text[:SAMPLE_CHARS] + "…"


class _Window:
    """The latest replies of one (endpoint, model): (text hash, prompt hash) pairs, oldest first."""

    __slots__ = ("last_prompt", "prompt_run", "recent", "texts")

    def __init__(self) -> None:
        self.recent: deque[tuple[int, int]] = deque()
        self.texts: dict[int, int] = {}  # text hash -> replies of the window with that text
        self.last_prompt = 0  # the prompt hash of the latest reply
        self.prompt_run = 0  # how many of the latest replies, in a row, answered that prompt


class SameTextWatch:
    """One process's recent successful replies per (endpoint, model), by text and prompt hash (bounded).

    Shared by every user of a process (gevent: no locks needed). Memory:
    ``SAME_TEXT_WINDOW`` pairs of ints per (endpoint, model).
    """

    __slots__ = ("_recent",)

    def __init__(self) -> None:
        """A watch that has seen nothing."""
        self._recent: dict[tuple[str, str], _Window] = {}

    def repeats(self, key: tuple[str, str], text: str, prompt: str) -> int | None:
        """Note a successful reply; return how many of the window share its text if the same-text rule holds, else None.

        ``key``: (endpoint, model); ``text``: the reply's generated text;
        ``prompt``: the prompt it answered. Replies of fewer than
        ``MIN_SAME_TEXT_PIECES`` token events should not be passed (the caller
        knows the count).
        """
        window = self._recent.get(key)
        if window is None:
            window = self._recent[key] = _Window()
        recent, counts = window.recent, window.texts
        text_hash, prompt_hash = hash(text), hash(prompt)
        if len(recent) == SAME_TEXT_WINDOW:
            old, _ = recent.popleft()
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        recent.append((text_hash, prompt_hash))
        if prompt_hash == window.last_prompt:
            window.prompt_run += 1
        else:
            window.last_prompt, window.prompt_run = prompt_hash, 1
        same = counts[text_hash] = counts.get(text_hash, 0) + 1
        if same < MIN_SAME_TEXT_REPLIES or same < SAME_TEXT_SHARE * len(recent):
            return None
        if window.prompt_run >= len(recent):
            return None  # every reply of the window answered one prompt (the common case of a fixed prompt)
        first_prompt = next(p for t, p in recent if t == text_hash)
        return same if any(t == text_hash and p != first_prompt for t, p in recent) else None
