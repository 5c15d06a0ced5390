"""Workloads: where prompts come from, as a deterministic stream per worker.

A ``Workload`` defines prompt number k (k = 0, 1, 2, ...) as a pure function
of the options, ``--seed`` and k:

- ``--prompt``: the same text every time;
- ``--dataset``: the file's usable items in an order shuffled once by the seed,
  cycled when exhausted;
- ``--input-tokens``: synthetic text of random common words. With a tokenizer
  the prompt is exactly N tokens, checked by tokenizing the generated text
  (as vLLM's random dataset intends but does not check, vllm-project/vllm
  #16420); without one, one word is taken as one token and lengths are
  approximate (``Workload.exact`` is False).

``--prefix-tokens K`` puts one K-token text, the same for every worker, in
front of the first message (synthetic prompts then total K + N tokens).
Worker r of n draws k = r, r + n, r + 2n, ... (``PromptStream``), so workers
never send the same item of a pass and the union does not depend on timing.
``Conversation`` keeps one user's multi-turn history (``--turns``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from llmload.errors import DatasetError
from llmload.request.tokens import TokenCounter
from llmload.settings.config import RunConfig
from llmload.workload.datasets import Dataset, DatasetFormat, DatasetItem, Message, load_dataset
from llmload.workload.session_file import SessionSpec, load_sessions
from llmload.workload.trace import Trace, TraceLine, TracePrompts, load_trace

__all__ = ["Conversation", "Prompt", "PromptStream", "Workload", "build_workload"]

# Common English words; most are one token in BPE vocabularies (GPT-2, Llama, Qwen).
_WORD_TEXT = """the of and to a in is it you that he was for on are with as his they be at one have this from
    or had by word but what some we can out other were all there when up use your how said an each she
    which do their time if will way about many then them write would like so these her long make thing
    see him two has look more day could go come did number sound no most people my over know water than
    call first who may down side been now find any new work part take get place made live where after
    back little only round man year came show every good me give our under name very through just form
    great think say help low line differ turn cause much mean before move right boy old too same tell
    does set three want air well also play small end put home read hand port large spell add even land
    here must big high such follow act why ask men change went light kind off need house picture try us
    again animal point mother world near build self earth father head stand own page should country found
    answer school grow study still learn plant cover food sun four between state keep eye never last let
    thought city tree cross farm hard start might story saw far sea draw left late run while press close
    night real life few north open seem together next white children begin got walk example ease paper
    group always music those both mark often letter until mile river car feet care second book carry took
    quick brown fox jumps lazy dog tokens words whole"""
_MAX_FIT_STEPS = 64
_APPROX_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt to send.

    Attributes:
        messages: the prompt as chat messages (completions send ``text``).
        max_tokens: this prompt's max_tokens; None = ``--max-tokens``.
        requested_tokens: the prompt length the workload intended ("requested
            ISL"): the tokenizer's count of ``text`` without special
            tokens, the synthetic target, or None when unknown. Chat templates
            add tokens on the server; the server's count is reported apart.
    """

    messages: tuple[Message, ...]
    max_tokens: int | None = None
    requested_tokens: int | None = None

    @property
    def text(self) -> str:
        """The message contents joined with newlines (the completions prompt)."""
        if len(self.messages) == 1:
            return self.messages[0].content
        return "\n".join(m.content for m in self.messages)


class Workload:
    """Prompt number k of a run, for any k >= 0 (see the module docstring)."""

    def __init__(
        self,
        config: RunConfig,
        counter: TokenCounter | None = None,
        dataset: Dataset | None = None,
        trace: Trace | None = None,
    ) -> None:
        """Prepare the prompt source of ``config``.

        Args:
            config: the run's options (prompt source, lengths, prefix, seed).
            counter: tokenizer for exact synthetic lengths and requested
                prompt lengths; None = approximate lengths.
            dataset: the loaded ``config.dataset`` (``build_workload`` loads it).
            trace: the loaded ``config.trace`` (``build_workload`` loads it).

        Raises:
            DatasetError: an exact length cannot be reached with this tokenizer.
        """
        self.config = config
        self.dataset = dataset
        self._counter = counter
        words = tuple(_WORD_TEXT.split())
        self._pool = _single_token_words(words, counter) if counter is not None else words
        self.trace = trace
        self.sessions: tuple[SessionSpec, ...] = ()
        self._trace_prompts = None if trace is None else TracePrompts(trace, counter, self._pool, config.seed)
        self._order: list[int] = []
        if dataset is not None:
            self._order = list(range(len(dataset.items)))
            random.Random(f"{config.seed}:order").shuffle(self._order)
        self.prefix = ""
        if config.prefix_tokens:
            rng = random.Random(f"{config.seed}:prefix")
            self.prefix = self._fit("", config.prefix_tokens, rng)
        # requested length of --prompt, with and without the prefix (counted once)
        self._fixed_tokens = {
            with_prefix: self._count(self._with_prefix(config.prompt, self.prefix if with_prefix else ""))
            for with_prefix in (False, True)
        }
        # requested length of each dataset item, with and without the prefix: the tokenizer
        # runs once per item, not once per request (a long prompt costs milliseconds to count)
        self._item_tokens: dict[tuple[int, bool], int | None] = {}

    @property
    def exact(self) -> bool:
        """True when prompt lengths are tokenizer-checked (a tokenizer was given)."""
        return self._counter is not None

    @property
    def prompts_vary(self) -> bool:
        """True when requests' prompts differ in length (dataset, trace, sessions, synthetic); False: one ``--prompt``.

        Conversations (``--turns``) only grow from the first turn's prompt, so they do not vary below it.
        """
        config = self.config
        return bool(self.sessions or self.trace is not None or self.dataset is not None or config.input_tokens)

    def describe(self) -> str:
        """One line for the log: the source and whether lengths are exact."""
        config = self.config
        if self.sessions:
            steps = sum(len(s.steps) for s in self.sessions)
            text = f"sessions {config.sessions} ({len(self.sessions)} sessions, {steps} steps)"
        elif self.trace is not None:
            text = self.trace.describe()
        elif self.dataset is not None:
            text = f"dataset {self.dataset.path} ({len(self.dataset.items)} prompts"
            text += f", {self.dataset.skipped} bad lines skipped)" if self.dataset.skipped else ")"
        elif config.input_tokens is not None:
            text = f"synthetic prompts of {_length_text(config)} tokens"
        else:
            text = "fixed --prompt"
        if config.prefix_tokens:
            text += f", shared prefix of {config.prefix_tokens} tokens"
        if config.turns > 1:
            text += f", {config.turns}-turn conversations"
        if not self.exact and (config.input_tokens is not None or config.prefix_tokens or self.trace is not None):
            text += "; lengths are approximate (one word taken as one token): pass --tokenizer for exact ones"
        return text

    def prompt_at(self, k: int, *, with_prefix: bool = True) -> Prompt:
        """Return prompt number ``k`` (deterministic for the options and seed).

        Args:
            k: the prompt's position in the global sequence, >= 0.
            with_prefix: put the shared prefix in front (False for later turns
                of a conversation, whose history is already a common prefix).

        Raises:
            DatasetError: an exact synthetic length cannot be reached.
        """
        config = self.config
        # seeding from a string hashes it (SHA-512): only when something is drawn
        drawn = config.input_tokens is not None or config.output_tokens is not None
        rng = random.Random(f"{config.seed}:{k}") if drawn else None
        prefix = self.prefix if with_prefix else ""
        item: DatasetItem | None = None
        if config.input_tokens is not None and rng is not None:
            n = config.input_tokens.draw(rng)
            target = n + (config.prefix_tokens if prefix else 0)
            text = self._fit(prefix + " " if prefix else "", target, rng)
            messages: tuple[Message, ...] = (Message("user", text),)
            requested: int | None = target
        elif self.dataset is not None:
            index = self._order[k % len(self._order)]
            item = self.dataset.items[index]
            first = item.messages[0]
            messages = (Message(first.role, self._with_prefix(first.content, prefix)), *item.messages[1:])
            if self._counter is None:
                requested = None
            elif (index, bool(prefix)) in self._item_tokens:
                requested = self._item_tokens[index, bool(prefix)]
            else:
                requested = self._item_tokens[index, bool(prefix)] = self._count("\n".join(m.content for m in messages))
        else:
            messages = (Message("user", self._with_prefix(config.prompt, prefix)),)
            requested = self._fixed_tokens[bool(prefix)]
        return Prompt(messages=messages, max_tokens=self._max_tokens(item, rng), requested_tokens=requested)

    def trace_prompt(self, line: TraceLine) -> Prompt:
        """The prompt of trace line ``line`` (``llmload.workload.trace``); the shared prefix is not added.

        Raises:
            DatasetError: no trace is loaded, or an exact length cannot be reached.
        """
        if self._trace_prompts is None:
            raise DatasetError("no --trace is loaded; trace lines have no prompt")
        messages = self._trace_prompts.messages(line)
        requested = line.input_tokens
        if line.messages is not None:
            requested = self._count("\n".join(m.content for m in messages))
        return Prompt(messages=messages, max_tokens=line.output_tokens, requested_tokens=requested)

    def stream(self, rank: int = 0, stride: int = 1) -> PromptStream:
        """The prompts of worker ``rank`` of ``stride`` workers (0 <= rank < stride)."""
        return PromptStream(self, rank, stride)

    # ── internals ───────────────────────────────────────────────────────────
    def _with_prefix(self, text: str, prefix: str | None = None) -> str:
        prefix = self.prefix if prefix is None else prefix
        return f"{prefix}\n{text}" if prefix else text

    def _count(self, text: str) -> int | None:
        return self._counter.count(text) if self._counter is not None else None

    def _max_tokens(self, item: DatasetItem | None, rng: random.Random | None) -> int | None:
        config = self.config
        if config.output_tokens is not None and rng is not None:
            return config.output_tokens.draw(rng)
        if item is None:
            return None
        if config.output_from_dataset and item.reply is not None:
            reply_tokens = self._count(item.reply)
            return max(1, reply_tokens if reply_tokens is not None else len(_APPROX_TOKEN.findall(item.reply)))
        return item.max_tokens

    def _fit(self, head: str, target: int, rng: random.Random) -> str:
        """``head`` followed by random words, ``target`` tokens in all (exact with a tokenizer)."""
        counter = self._counter
        pool = self._pool
        head_tokens = counter.count(head) if counter is not None else len(_APPROX_TOKEN.findall(head))
        words = rng.choices(pool, k=max(target - head_tokens, 0))
        text = head + " ".join(words)
        if counter is None:
            return text
        for _ in range(_MAX_FIT_STEPS):
            got = counter.count(text)
            if got == target:
                return text
            if got > target and words:
                words.pop()
            else:
                words.append(rng.choice(pool))
            text = head + " ".join(words)
        raise DatasetError(
            f"cannot build a prompt of exactly {target} tokens with tokenizer "
            f"{self.config.tokenizer!r} (got {counter.count(text)}); use another tokenizer, "
            "or drop --tokenizer for approximate lengths"
        )


class PromptStream:
    """Worker ``rank`` of ``stride``: prompts k = rank, rank + stride, rank + 2·stride, ..."""

    __slots__ = ("_k", "_stride", "workload")

    def __init__(self, workload: Workload, rank: int, stride: int) -> None:
        """Start at k = ``rank``.

        Raises:
            ValueError: not 0 <= rank < stride.
        """
        if not 0 <= rank < stride:
            raise ValueError(f"worker rank must be in [0, {stride}), got {rank}")
        self.workload = workload
        self._k = rank
        self._stride = stride

    def next(self, *, with_prefix: bool = True) -> Prompt:
        """Return the next prompt of this stream (see ``Workload.prompt_at``)."""
        k = self._k
        self._k = k + self._stride
        return self.workload.prompt_at(k, with_prefix=with_prefix)


class Conversation:
    """One user's multi-turn chat: each turn sends the history plus a new user message.

    After ``turns`` turns the history is dropped and a new conversation starts.
    The reply of each turn is appended as an ``assistant`` message.
    """

    __slots__ = ("_counter", "_history", "_turn", "turns")

    def __init__(self, turns: int, counter: TokenCounter | None = None) -> None:
        """``turns`` >= 1; ``counter`` counts the requested length of turns after the first."""
        self.turns = turns
        self._counter = counter
        self._history: list[Message] = []
        self._turn = 0

    @property
    def starting(self) -> bool:
        """True when the next turn opens a new conversation."""
        return self._turn == 0

    def next_prompt(self, new: Prompt) -> Prompt:
        """Return ``new`` with the conversation so far in front of it."""
        if not self._history:
            return new
        messages = (*self._history, *new.messages)
        text = "\n".join(m.content for m in messages)
        requested = self._counter.count(text) if self._counter is not None else None
        return Prompt(messages=messages, max_tokens=new.max_tokens, requested_tokens=requested)

    def record_reply(self, sent: Prompt, reply: str | None) -> None:
        """Remember the turn just sent and its reply (None or "" after a failure ends the conversation)."""
        self._turn += 1
        if not reply or self._turn >= self.turns:
            self._history.clear()
            self._turn = 0
            return
        self._history = [*sent.messages, Message("assistant", reply)]


def build_workload(config: RunConfig, counter: TokenCounter | None = None) -> Workload:
    """Load ``config.dataset`` (if any) and return the run's workload.

    Raises:
        DatasetError: the dataset is unusable, or an exact length cannot be reached.
    """
    dataset = None
    if config.dataset is not None:
        fmt: DatasetFormat = "auto"
        if config.dataset_format == "jsonl":
            fmt = "jsonl"
        elif config.dataset_format == "sharegpt":
            fmt = "sharegpt"
        dataset = load_dataset(config.dataset, fmt)
    trace = None
    if config.trace is not None:
        trace = load_trace(
            config.trace, config.trace_format, skip_bad=config.trace_skip_bad, block_tokens=config.trace_block_tokens
        )
    workload = Workload(config, counter, dataset, trace)
    if config.sessions is not None:
        workload.sessions = load_sessions(config.sessions, counter)
    return workload


def _single_token_words(words: Sequence[str], counter: TokenCounter) -> Sequence[str]:
    """The ``words`` that are one token and add one token after a space (all of them if none do)."""
    singles = [w for w in words if counter.count(w) == 1 and counter.count(f"{w} {w}") == 2]
    return singles or words


def _length_text(config: RunConfig) -> str:
    spec = config.input_tokens
    if spec is None:
        return "?"
    if spec.low is not None:
        return f"{spec.low}-{spec.high}"
    return f"{spec.mean}" + (f" ± {spec.stddev:g}" if spec.stddev else "")
