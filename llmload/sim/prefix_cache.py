"""The simulator's prefix cache: blocks of prompt tokens keyed by a chained hash, evicted least recently used.

As in vLLM's automatic prefix caching, a prompt is cut into full blocks of
``block_size`` tokens; block i's key hashes block i's tokens together with
block i-1's key, so a key stands for the whole prefix up to its block. A
request's cached tokens are its leading blocks already in the cache, at most
all but the last token (one token is always computed, so a prompt wholly in
the cache gives back its last block). Its full blocks are then in the cache
(most recently used); beyond ``capacity_blocks`` the least recently used
blocks are evicted. Tokens are the sim's token model
(``llmload.sim.protocol.count_text_tokens``); a chat prompt's template
tokens are part of it, so ``cached_tokens`` never exceeds ``prompt_tokens``.

Only the prefill of the uncached tokens costs engine time; the counters
``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits`` (tokens, as
vLLM counts them) go up at admission.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.registry import Collector

from llmload.sim.protocol import Endpoint

__all__ = ["PrefixCache", "PrefixCacheCollector", "prompt_tokens_of"]

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_TEMPLATE = ("<|im_start|>", "<|sep|>", "<|im_end|>")
_PRIMER = ("<|im_start|>", "assistant", "<|sep|>")


def prompt_tokens_of(endpoint: Endpoint, raw: bytes) -> list[str]:
    """The prompt of an already validated request body as the sim's tokens (chat: template tokens included)."""
    body: dict[str, Any] = json.loads(raw)
    if endpoint is Endpoint.COMPLETIONS:
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, list):
            return [str(t) for t in prompt]  # token ids
        return _TOKEN_RE.findall(prompt)
    tokens: list[str] = []
    for message in body["messages"]:
        tokens.append(_TEMPLATE[0])
        tokens.extend(_TOKEN_RE.findall(message["role"]))
        tokens.append(_TEMPLATE[1])
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(part["text"] for part in content)
        tokens.extend(_TOKEN_RE.findall(content or ""))
        tokens.append(_TEMPLATE[2])
    tokens.extend(_PRIMER)
    return tokens


class PrefixCache:
    """LRU cache of prompt blocks (see the module docstring).

    Args:
        capacity_blocks: most blocks kept (>= 1).
        block_size: tokens per block (>= 1).

    Attributes:
        queries_tokens: prompt tokens looked up so far.
        hits_tokens: of those, tokens found in the cache.
    """

    def __init__(self, capacity_blocks: int, block_size: int) -> None:
        if capacity_blocks < 1 or block_size < 1:
            raise ValueError(f"capacity and block size must be >= 1, got {capacity_blocks} and {block_size}")
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.queries_tokens = 0
        self.hits_tokens = 0
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, tokens: list[str]) -> int:
        """Look ``tokens`` up, then keep its full blocks; return how many leading tokens were cached."""
        size = self.block_size
        keys: list[int] = []
        key = 0
        for start in range(0, len(tokens) - size + 1, size):
            key = hash((key, tuple(tokens[start : start + size])))
            keys.append(key)
        hit_blocks = 0
        for key in keys:
            if key not in self._blocks:
                break
            hit_blocks += 1
        cached = min(hit_blocks * size, max(0, (len(tokens) - 1) // size * size))
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        self.queries_tokens += len(tokens)
        self.hits_tokens += cached
        return cached


class PrefixCacheCollector(Collector):
    """Publishes a ``PrefixCache``'s counters at scrape time (no work per request).

    ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total``
    (tokens, labelled ``model_name`` and ``engine`` as vLLM's), and the ground
    truth ``llmload_sim_prompt_cached_tokens_total{endpoint}``: cached tokens of
    completed requests, equal to the sum of ``cached_tokens`` their usage reported.
    """

    def __init__(self, cache: PrefixCache, model: str) -> None:
        self._cache = cache
        self._model = model
        self.completed_cached_tokens: dict[str, int] = {e.value: 0 for e in Endpoint}

    def collect(self) -> list[CounterMetricFamily]:
        """The three counter families."""
        labels = ["model_name", "engine"]
        queries = CounterMetricFamily("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", labels=labels)
        queries.add_metric([self._model, "0"], self._cache.queries_tokens)
        hits = CounterMetricFamily("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", labels=labels)
        hits.add_metric([self._model, "0"], self._cache.hits_tokens)
        cached = CounterMetricFamily(
            "llmload_sim_prompt_cached_tokens",
            "Prompt tokens served from the prefix cache, of completed requests (as reported in usage).",
            labels=["endpoint"],
        )
        for endpoint, value in self.completed_cached_tokens.items():
            cached.add_metric([endpoint], value)
        return [queries, hits, cached]
