"""Token accounting with provenance: server usage, else a local tokenizer, else chunk counts.

Precedence (the same as vLLM's ``benchmark_serving`` and guidellm):

1. the server's ``usage`` block (``TokenSource.SERVER``);
2. a local tokenizer run *once* on the joined text, never per chunk and never
   with special tokens (``TokenSource.TOKENIZER``) — counting each chunk
   separately or adding BOS inflates output lengths (kubernetes-sigs/
   inference-perf #564, eugr/llama-benchy #18, ray-project/llmperf #35);
3. for completions only, the number of token-bearing stream events, a lower
   bound when servers group tokens (``TokenSource.CHUNKS``);
4. unknown (``TokenSource.UNKNOWN``), never silently zero.

``transformers`` is imported only inside ``load_tokenizer`` so that
``import llmload`` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from llmload.errors import TokenizerError
from llmload.request.record import TokenCount, TokenSource

__all__ = [
    "HFTokenCounter",
    "TokenCounter",
    "load_tokenizer",
    "resolve_completion_tokens",
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
                f'cannot load tokenizer "{name_or_path}": not a local path and hub access is disabled; {fix}'
            )
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=not allow_download)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... for bad sources
        if os.path.exists(name_or_path):
            raise TokenizerError(f'cannot load tokenizer from local path "{name_or_path}": {exc}; {fix}') from exc
        if not allow_download:
            raise TokenizerError(
                f'cannot load tokenizer "{name_or_path}": not a local path and hub access is disabled; {fix}'
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

    Returns:
        The count from the best available source.
    """
    if server_tokens is not None:
        return TokenCount(server_tokens, TokenSource.SERVER)
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
        return TokenCount(server_tokens, TokenSource.SERVER)
    if counter is not None:
        return TokenCount(counter.count(prompt_text), TokenSource.TOKENIZER)
    return TokenCount.unknown()
