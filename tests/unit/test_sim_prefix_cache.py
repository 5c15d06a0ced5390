"""The simulator's prefix cache: chained block hashes, the last-token rule, LRU eviction, chat template tokens."""

from __future__ import annotations

import json

import pytest

from llmload.sim.prefix_cache import PrefixCache, prompt_tokens_of
from llmload.sim.protocol import Endpoint, count_chat_prompt_tokens


def _tokens(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_prefix_cache_counts_leading_full_blocks_already_seen():
    cache = PrefixCache(100, 4)
    assert cache.admit(_tokens(10)) == 0
    assert cache.admit([*_tokens(10), "x"]) == 8  # two full blocks; the partial third was never cached
    assert cache.admit(["other", *_tokens(12)]) == 0  # same words shifted: no block matches from the start
    assert (cache.queries_tokens, cache.hits_tokens) == (10 + 11 + 13, 8)


def test_prefix_cache_a_prompt_wholly_cached_still_computes_its_last_block():
    cache = PrefixCache(100, 4)
    cache.admit(_tokens(8))
    assert cache.admit(_tokens(8)) == 4
    assert cache.admit(_tokens(9)) == 8


def test_prefix_cache_block_key_stands_for_the_whole_prefix():
    cache = PrefixCache(100, 2)
    cache.admit(["a", "b", "c", "d", "e"])
    assert cache.admit(["x", "y", "c", "d", "e"]) == 0  # block "c d" after another first block is another block


def test_prefix_cache_evicts_least_recently_used_blocks_beyond_capacity():
    cache = PrefixCache(2, 2)
    cache.admit(_tokens(5, "a"))  # a-blocks 1, 2
    cache.admit(_tokens(3, "b"))  # b-block 1 evicts a-block 1
    assert len(cache) == 2
    assert cache.admit(_tokens(5, "a")) == 0


def test_prefix_cache_rejects_a_capacity_or_block_size_below_one():
    with pytest.raises(ValueError, match=">= 1"):
        PrefixCache(0, 16)


def test_prefix_cache_chat_tokens_are_as_many_as_the_sims_prompt_count():
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi, there!"}]
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    assert len(prompt_tokens_of(Endpoint.CHAT, raw)) == count_chat_prompt_tokens(messages)
    raw = json.dumps({"model": "m", "prompt": "one two, three"}).encode()
    assert prompt_tokens_of(Endpoint.COMPLETIONS, raw) == ["one", "two", ",", "three"]
