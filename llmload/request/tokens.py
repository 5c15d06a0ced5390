"""Token accounting with provenance: server usage, else a local tokenizer, else chunk counts.

Precedence (the same as vLLM's ``benchmark_serving`` and guidellm):

1. the server's ``usage`` block (``TokenSource.SERVER``), when it adds up
   with the stream (``read_usage``);
2. the tokens listed in ``logprobs`` (``logprobs.content`` for chat,
   ``logprobs.tokens`` for completions), when every token-bearing event
   listed them (``TokenSource.LOGPROBS``): exact even when a server groups
   several tokens per chunk and sends no usage;
3. a local tokenizer run *once* on the joined text, never per chunk and never
   with special tokens (``TokenSource.TOKENIZER``) — counting each chunk
   separately or adding BOS inflates output lengths (kubernetes-sigs/
   inference-perf #564, eugr/llama-benchy #18, ray-project/llmperf #35);
4. for completions only, the number of token-bearing stream events, a lower
   bound when servers group tokens (``TokenSource.CHUNKS``);
5. unknown (``TokenSource.UNKNOWN``), never silently zero.

Usage that does not add up is detected and said (``UsageNote``, counted per
note in the results): per-chunk usage is read as cumulative or incremental
from the stream itself, usage below the number of token-bearing events is
not used, reasoning tokens that usage counts but the stream never
carried are kept out of TPOT, reasoning above the completion count is read
as counted apart, and a count above what the streamed text can hold (fewer
bytes than tokens) makes TPOT unknown (``resolve_output_tokens``). A usage
detail (reasoning or cached prompt tokens) that is not a token count is
unknown, never 0, and noted (``DETAIL_UNREADABLE``), as a bad
``completion_tokens`` or ``prompt_tokens`` fails the stream.

``transformers`` is imported only inside ``load_tokenizer`` so that
``import llmload`` stays light.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from llmload.errors import TokenizerError
from llmload.request.chunks import ReplyAccumulator, UsageValue
from llmload.request.record import TokenCount, TokenSource, UsageNote

__all__ = [
    "HFTokenCounter",
    "OutputTokens",
    "TokenCounter",
    "UsageReading",
    "load_tokenizer",
    "read_usage",
    "resolve_completion_tokens",
    "resolve_output_tokens",
    "resolve_output_tokens_by_rules",
    "resolve_prompt_tokens",
]


class TokenCounter(Protocol):
    """Counts the tokens of a text without any special tokens (no BOS/EOS)."""

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``; 0 for the empty string."""
        ...


class HFTokenCounter:
    """A ``TokenCounter`` over a Hugging Face tokenizer.

    Accepts either a ``transformers`` tokenizer (anything with
    ``encode(text, add_special_tokens=...) -> list[int]``) or a bare
    ``tokenizers.Tokenizer`` (whose ``encode`` returns an ``Encoding``).
    Special tokens are never added, whatever the tokenizer's post-processor
    or ``add_bos_token`` setting says.
    """

    __slots__ = ("_encode_ids", "name")

    def __init__(self, tokenizer: Any, *, name: str = "") -> None:
        """Wrap ``tokenizer``; ``name`` labels it in reports (e.g. the path)."""
        self.name = name or type(tokenizer).__name__
        from tokenizers import Tokenizer

        if isinstance(tokenizer, Tokenizer):
            # a bare tokenizers.Tokenizer: encode() returns an Encoding
            def encode_ids(text: str) -> Sequence[int]:
                ids: Sequence[int] = tokenizer.encode(text, add_special_tokens=False).ids
                return ids
        else:

            def encode_ids(text: str) -> Sequence[int]:
                ids: Sequence[int] = tokenizer.encode(text, add_special_tokens=False)
                return ids

        self._encode_ids = encode_ids

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text`` without special tokens."""
        if not text:
            return 0
        return len(self._encode_ids(text))


def load_tokenizer(name_or_path: str, *, allow_download: bool = False) -> HFTokenCounter:
    """Load a tokenizer from a local directory, a ``tokenizer.json`` file or the local HF cache.

    Args:
        name_or_path: a directory with tokenizer files, a ``tokenizer.json``
            path, or a hub id already present in the local cache.
        allow_download: permit fetching from the Hugging Face hub. Off by
            default: a load generator must never stall or fail mid-run on a
            hub request (vllm-project/guidellm #103: a served model name is
            not a hub id). When off, a hub id is looked up in the local cache
            by this function and transformers only ever sees a local
            directory: ``from_pretrained(name, local_files_only=True)`` alone
            still sends a request (huggingface_hub 1.x/2.x fetch
            ``/api/agent-harnesses`` while building request headers).

    Raises:
        TokenizerError: the tokenizer cannot be loaded; the message says what
            to pass instead.
    """
    fix = "pass --tokenizer PATH or rely on server-reported usage"
    hub_fix = f"add --allow-download to fetch it from the Hugging Face hub, {fix}"
    if name_or_path.endswith(".json") and os.path.isfile(name_or_path):
        try:
            from tokenizers import Tokenizer

            return HFTokenCounter(Tokenizer.from_file(name_or_path), name=name_or_path)
        except Exception as exc:  # the tokenizers library raises plain Exception subclasses
            raise TokenizerError(f'cannot load tokenizer file "{name_or_path}": {exc}; {fix}') from exc
    source = name_or_path
    if not allow_download and not os.path.exists(name_or_path):
        source = _cached_snapshot(name_or_path) or ""
        if not source:
            raise TokenizerError(
                f'cannot load tokenizer "{name_or_path}": not a local path and hub access is disabled; {hub_fix}'
            )
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=not allow_download)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... for bad sources
        if os.path.exists(name_or_path):
            raise TokenizerError(f'cannot load tokenizer from local path "{name_or_path}": {exc}; {fix}') from exc
        if not allow_download:
            raise TokenizerError(
                f'cannot load tokenizer "{name_or_path}": not a local path and hub access is disabled; {hub_fix}'
            ) from exc
        raise TokenizerError(f'cannot load tokenizer "{name_or_path}": {exc}; {fix}') from exc
    if tokenizer is None:
        raise TokenizerError(f'cannot load tokenizer "{name_or_path}": no tokenizer files found; {fix}')
    return HFTokenCounter(tokenizer, name=name_or_path)


def _cached_snapshot(repo_id: str) -> str | None:
    """The local HF cache directory holding ``repo_id``'s tokenizer files, or None (filesystem only)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        for filename in ("tokenizer_config.json", "tokenizer.json"):
            path = try_to_load_from_cache(repo_id, filename)
            if isinstance(path, str):
                return os.path.dirname(path)
    except Exception:  # an invalid repo id (HFValidationError, ValueError): not in the cache
        return None
    return None


def resolve_completion_tokens(
    *,
    server_tokens: int | None,
    pieces: Sequence[str],
    counter: TokenCounter | None,
    chunk_count: int | None,
    logprob_tokens: int | None = None,
) -> TokenCount:
    """Decide the completion token count and its source.

    Args:
        server_tokens: ``usage.completion_tokens`` from the server (the last
            value seen, as usage may be cumulative); None if not sent.
        pieces: the generated text fragments in order (content, reasoning and
            tool-call text); joined once, and only when needed.
        counter: local tokenizer, or None.
        chunk_count: number of token-bearing stream events, or None for a
            non-streamed reply (where one body is not a token count).
        logprob_tokens: tokens listed in ``logprobs`` over the whole reply,
            when every token-bearing event listed them; else None.

    Returns:
        The count from the best available source.
    """
    if server_tokens is not None:
        return _token_count(server_tokens, _SERVER)
    if logprob_tokens is not None:
        return TokenCount(logprob_tokens, TokenSource.LOGPROBS)
    if counter is not None:
        return TokenCount(counter.count("".join(pieces)), TokenSource.TOKENIZER)
    if chunk_count is not None:
        return TokenCount(chunk_count, TokenSource.CHUNKS)
    return TokenCount.unknown()


def resolve_prompt_tokens(*, server_tokens: int | None, prompt_text: str, counter: TokenCounter | None) -> TokenCount:
    """Decide the prompt token count and its source.

    The server count includes the chat template and BOS (vllm-project/vllm
    #16420, sgl-project/genai-bench PR #171) and is preferred; the local count
    is of the raw prompt text only.
    """
    if server_tokens is not None:
        return _token_count(server_tokens, _SERVER)
    if counter is not None:
        return TokenCount(counter.count(prompt_text), TokenSource.TOKENIZER)
    return TokenCount.unknown()


class UsageReading(NamedTuple):
    """What a reply's usage values say once checked against its stream (immutable).

    A named tuple, not a frozen dataclass: it is made once per reply, and a
    frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)
    costs about twice as much.

    Attributes:
        total: the completion tokens to use; None when usage was not sent or
            does not add up (``UsageNote.BELOW_EVENTS``).
        per_event: the tokens of each token-bearing event, when every one
            carried usage and the values read as counts ≥ 1; else None.
        notes: what was detected.
    """

    total: int | None
    per_event: list[int] | None
    notes: tuple[UsageNote, ...]


def read_usage(log: Sequence[UsageValue], token_events: int, per_event: Sequence[int] | None = None) -> UsageReading:
    """Read the usage values of one reply (``ReplyAccumulator.usage_log``) against its stream.

    Rules, for values u1..uk of ``usage.completion_tokens`` in arrival order:

    - one value (usage once, at the end): it is the count;
    - several, never falling, and the last at least the number of
      token-bearing events: cumulative (vLLM ``continuous_usage_stats``); the
      last value is the count. If it stayed the same while tokens streamed
      between the first and the last of them, ``NOT_GROWING`` is noted;
    - otherwise, when every value rode on a token-bearing event (or is 0,
      as on a role chunk) and their sum covers the events (or a value fell, which a running count never
      does): incremental, each value the tokens of its own chunk; the sum is
      the count (``INCREMENTAL``);
    - a count below the number of token-bearing events cannot be right
      (every such event carries at least one token): it is not used
      (``BELOW_EVENTS``) and the next source is taken.

    Args:
        log: the values with the token-event count at each.
        token_events: token-bearing events of the whole reply; 0 for a
            non-streamed reply (nothing to check against).
        per_event: the usage value of every token event
            (``ReplyAccumulator.usage_per_event``), if each carried one.
    """
    if not log:
        return UsageReading(None, None, ())
    values = [u.tokens for u in log]
    notes: list[UsageNote] = []
    last = values[-1]
    rising = all(b >= a for a, b in itertools.pairwise(values))
    incremental = False
    total = last
    if len(values) > 1:
        if rising and last >= token_events:
            if last == values[0] and log[-1].token_events > log[0].token_events:
                notes.append(UsageNote.NOT_GROWING)
        elif (not rising) or (all(u.on_token or not u.tokens for u in log) and sum(values) >= token_events):
            incremental, total = True, sum(values)
            notes.append(UsageNote.INCREMENTAL)
        elif last == values[0] and log[-1].token_events > log[0].token_events:
            notes.append(UsageNote.NOT_GROWING)
    if total < token_events:
        notes.append(UsageNote.BELOW_EVENTS)
        return UsageReading(None, None, tuple(notes))
    counts: list[int] | None = None
    if per_event:
        counts = list(per_event) if incremental else [per_event[0], *(b - a for a, b in itertools.pairwise(per_event))]
        if min(counts) < 1:
            counts = None
    return UsageReading(total, counts, tuple(notes))


@dataclass(frozen=True, slots=True)
class OutputTokens:
    """A reply's completion count with what stands behind it.

    Attributes:
        count: the completion tokens and their source.
        token_counts: tokens per token-bearing event, when known (usage per
            event, or logprobs); None otherwise.
        hidden_reasoning_tokens: reasoning tokens in ``count`` never streamed (0: none).
        notes: what was detected (``UsageNote``).
    """

    count: TokenCount
    token_counts: list[int] | None
    hidden_reasoning_tokens: int
    notes: tuple[UsageNote, ...]


def resolve_output_tokens(acc: ReplyAccumulator, *, counter: TokenCounter | None, streamed: bool) -> OutputTokens:
    """Decide a reply's completion count, per-event counts and hidden reasoning from what it carried.

    The count follows the module's precedence after ``read_usage`` has
    checked the usage against the stream. Hidden reasoning (the rule TPOT
    uses, ``RequestRecord.tpot_s``): when the count is the server's, usage
    says ``reasoning_tokens`` r > 0 and the stream carried no reasoning
    text, those r tokens were generated but never streamed — if the count
    minus r still covers the token-bearing events they are set apart
    (``HIDDEN_REASONING``: TPOT is over count − r), else the streamed count
    is unknowable (``REASONING_UNEXPLAINED``: TPOT unavailable). A server
    whose r exceeds its count reports reasoning outside the completion
    count (``REASONING_APART``): nothing is set apart, every completion token
    is an answer token (``RequestRecord.answer_tokens``).

    Usage above the streamed text (``ABOVE_TEXT``): a streamed reply whose
    server count (less hidden reasoning) exceeds the bytes of its streamed
    text plus one did not stream all its tokens (``_above_text``); the count
    is still the server's (output tok/s stays the server's figure), but TPOT
    and per-token ITL over the streamed tokens are unknown.

    A usage detail the reply sent that is not a token count
    (``ReplyAccumulator.unreadable_detail``) adds ``DETAIL_UNREADABLE``; the
    detail itself is already None.
    """
    events = len(acc.token_times_s) if streamed else 0
    log = acc.usage_log
    if (
        streamed
        and len(log) < 2  # usage once at the end, or none: nothing to read as cumulative or incremental
        and acc.reasoning_tokens is None
        and acc.unreadable_detail is None
        and acc.usage_per_event() is None
        and acc.logprob_counts() is None
    ):
        fast = _plain_output(acc, log[0].tokens if log else None, events, counter)
        if fast is not None:
            return fast
    return resolve_output_tokens_by_rules(acc, counter=counter, streamed=streamed)


def resolve_output_tokens_by_rules(
    acc: ReplyAccumulator, *, counter: TokenCounter | None, streamed: bool
) -> OutputTokens:
    """``resolve_output_tokens`` without its shortcut for the plain reply (the reference it must equal)."""
    events = len(acc.token_times_s) if streamed else 0
    usage = read_usage(acc.usage_log, events, acc.usage_per_event() if streamed else None)
    logprob_counts = acc.logprob_counts()  # a non-streamed body's logprobs count its tokens too
    count = resolve_completion_tokens(
        server_tokens=usage.total,
        pieces=acc.pieces,
        counter=counter,
        chunk_count=events if streamed else None,
        logprob_tokens=sum(logprob_counts) if logprob_counts else None,
    )
    token_counts = usage.per_event if count.source is _SERVER else None
    if token_counts is None and count.source is TokenSource.LOGPROBS and streamed:
        token_counts = logprob_counts
    notes, hidden = usage.notes, 0
    reasoning = acc.reasoning_tokens
    if count.source is _SERVER and count.value is not None and reasoning:
        if reasoning > count.value:
            notes = (*notes, UsageNote.REASONING_APART)
        elif not acc.reasoning_streamed and streamed:
            if count.value - reasoning >= events:
                hidden, notes = reasoning, (*notes, UsageNote.HIDDEN_REASONING)
                token_counts = None  # per-event usage differences would put the hidden tokens on one event
            else:
                notes = (*notes, UsageNote.REASONING_UNEXPLAINED)
    if (
        streamed
        and count.source is _SERVER
        and count.value is not None
        and UsageNote.REASONING_UNEXPLAINED not in notes
        and _above_text(acc.pieces, count.value - hidden)
    ):
        notes, token_counts = (*notes, UsageNote.ABOVE_TEXT), None
    if acc.unreadable_detail is not None:
        notes = (*notes, UsageNote.DETAIL_UNREADABLE)
    return OutputTokens(count, token_counts, hidden, notes)


def _plain_output(
    acc: ReplyAccumulator, total: int | None, events: int, counter: TokenCounter | None
) -> OutputTokens | None:
    """``resolve_output_tokens`` of a streamed reply with at most one usage value and nothing else to weigh.

    No reasoning count, no unreadable detail, no per-event usage or logprobs:
    the count is the one usage value when it covers the token events (less
    than one extra token per byte of text, else ``ABOVE_TEXT``), else the next
    source. None when the general rules are needed (usage below the events).
    ``resolve_output_tokens_by_rules`` gives the same result.
    """
    if total is None:
        if counter is not None:
            return _output_tokens(_token_count(counter.count("".join(acc.pieces)), _TOKENIZER), _NO_NOTES)
        return _output_tokens(_token_count(events, _CHUNKS), _NO_NOTES)
    if total < events:
        return None  # BELOW_EVENTS: the general path says so and takes the next source
    count = _token_count(total, _SERVER)
    return _output_tokens(count, _ABOVE_TEXT if _above_text(acc.pieces, total) else _NO_NOTES)


_ABOVE_TEXT = (UsageNote.ABOVE_TEXT,)
_NO_NOTES: tuple[UsageNote, ...] = ()
# Enum members read as module globals on the per-reply path (``llmload.request.record`` says why)
_SERVER, _TOKENIZER, _CHUNKS = TokenSource.SERVER, TokenSource.TOKENIZER, TokenSource.CHUNKS


# The frozen values made on every reply's path, without their dataclass __init__ (one object.__setattr__
# per field, ~700 instructions each): slots set through their descriptors give the identical frozen
# object, as ``llmload.request.sse`` makes its events.
_new = object.__new__
_set_count_value: Callable[[TokenCount, int | None], None] = vars(TokenCount)["value"].__set__
_set_count_source: Callable[[TokenCount, TokenSource], None] = vars(TokenCount)["source"].__set__
_set_output_count: Callable[[OutputTokens, TokenCount], None] = vars(OutputTokens)["count"].__set__
_set_output_per_event: Callable[[OutputTokens, None], None] = vars(OutputTokens)["token_counts"].__set__
_set_output_hidden: Callable[[OutputTokens, int], None] = vars(OutputTokens)["hidden_reasoning_tokens"].__set__
_set_output_notes: Callable[[OutputTokens, tuple[UsageNote, ...]], None] = vars(OutputTokens)["notes"].__set__


def _token_count(value: int | None, source: TokenSource) -> TokenCount:
    """``TokenCount(value, source)``, made faster."""
    count: TokenCount = _new(TokenCount)
    _set_count_value(count, value)
    _set_count_source(count, source)
    return count


def _output_tokens(count: TokenCount, notes: tuple[UsageNote, ...]) -> OutputTokens:
    """``OutputTokens(count, None, 0, notes)``, made faster (no per-event counts, no hidden reasoning)."""
    output: OutputTokens = _new(OutputTokens)
    _set_output_count(output, count)
    _set_output_per_event(output, None)
    _set_output_hidden(output, 0)
    _set_output_notes(output, notes)
    return output


def _above_text(pieces: Sequence[str], tokens: int) -> bool:
    """True when ``tokens`` streamed tokens cannot fit in the streamed text ``pieces`` (each non-empty).

    Every generated token carries at least one byte of text, except special
    tokens; one of those (the end-of-sequence token some servers count) is
    allowed. So more tokens than the text's UTF-8 bytes plus one were not all
    streamed. Once per reply, cheapest first: no more tokens than non-empty
    pieces (the usual reply, one token per event) fit at once; then the
    characters are counted (a character is at least one byte; one join in C)
    and the joined text is encoded only when they are too few.
    """
    if tokens <= 1:
        return False
    if len(pieces) + 1 >= tokens:  # each piece holds a character at least: no need to count them
        return False
    text = "".join(pieces)
    if len(text) + 1 >= tokens:
        return False
    return len(text.encode("utf-8", "surrogatepass")) + 1 < tokens  # the pieces' bytes: one encode, in C
