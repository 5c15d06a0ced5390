"""Token accounting: no special tokens, joined text counted once, precedence with provenance."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmload.errors import TokenizerError
from llmload.request.record import TokenCount, TokenSource
from llmload.request.tokens import HFTokenCounter, load_tokenizer, resolve_completion_tokens, resolve_prompt_tokens


def test_hf_token_counter_never_adds_bos(tiny_bos_tokenizer):
    assert len(tiny_bos_tokenizer.encode("Hello world").ids) == 3  # <s> Hello world
    assert HFTokenCounter(tiny_bos_tokenizer).count("Hello world") == 2


def test_hf_token_counter_counts_joined_text_not_chunks(tiny_tokenizer):
    counter = HFTokenCounter(tiny_tokenizer)
    assert counter.count("Hello world") == 2
    assert sum(counter.count(piece) for piece in ("Hel", "lo", " world")) > 2


def test_hf_token_counter_empty_text_is_zero(tiny_bos_tokenizer):
    assert HFTokenCounter(tiny_bos_tokenizer).count("") == 0


def test_hf_token_counter_wraps_transformers_tokenizer_without_bos(tiny_bos_tokenizer):
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(tokenizer_object=tiny_bos_tokenizer, bos_token="<s>")
    assert len(wrapped.encode("Hello world")) == 3
    assert HFTokenCounter(wrapped).count("Hello world") == 2


def test_load_tokenizer_from_local_directory(tiny_bos_tokenizer, tmp_path):
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tiny_bos_tokenizer, bos_token="<s>").save_pretrained(tmp_path)
    counter = load_tokenizer(str(tmp_path))
    assert counter.count("Hello world") == 2
    assert counter.name == str(tmp_path)


def test_load_tokenizer_from_tokenizer_json_file(tiny_bos_tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    tiny_bos_tokenizer.save(str(path))
    assert load_tokenizer(str(path)).count("Hello world") == 2


def test_load_tokenizer_unknown_name_offline_names_the_fix():
    # BC-17: a served model name is not a hub id; no hub request, a clear message instead.
    with pytest.raises(TokenizerError) as info:
        load_tokenizer("my-model")
    assert str(info.value) == (
        'cannot load tokenizer "my-model": not a local path and hub access is disabled; '
        "pass --tokenizer PATH or rely on server-reported usage"
    )


def test_load_tokenizer_broken_local_directory_names_the_path(tmp_path):
    with pytest.raises(TokenizerError, match="from local path"):
        load_tokenizer(str(tmp_path))


def test_import_llmload_tokens_does_not_import_transformers():
    code = "import sys, llmload.request.tokens, llmload.request.client; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


class CountingCounter:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def count(self, text: str) -> int:
        self.calls.append(text)
        return len(text.split())


def test_resolve_completion_tokens_prefers_server_usage():
    counter = CountingCounter()
    result = resolve_completion_tokens(server_tokens=7, pieces=["a", " b"], counter=counter, chunk_count=2)
    assert result == TokenCount(7, TokenSource.SERVER)
    assert counter.calls == []  # no tokenizer work when usage is present


def test_resolve_completion_tokens_tokenizes_joined_text_once():
    counter = CountingCounter()
    result = resolve_completion_tokens(
        server_tokens=None, pieces=["Hel", "lo", " world"], counter=counter, chunk_count=3
    )
    assert result == TokenCount(2, TokenSource.TOKENIZER)
    assert counter.calls == ["Hello world"]


def test_resolve_completion_tokens_falls_back_to_chunk_count():
    result = resolve_completion_tokens(server_tokens=None, pieces=["a"], counter=None, chunk_count=3)
    assert result == TokenCount(3, TokenSource.CHUNKS)


def test_resolve_completion_tokens_unknown_without_any_source():
    result = resolve_completion_tokens(server_tokens=None, pieces=["a"], counter=None, chunk_count=None)
    assert result == TokenCount(None, TokenSource.UNKNOWN)


def test_resolve_completion_tokens_server_zero_is_not_unknown():
    result = resolve_completion_tokens(server_tokens=0, pieces=[], counter=None, chunk_count=0)
    assert result == TokenCount(0, TokenSource.SERVER)


def test_resolve_prompt_tokens_precedence():
    counter = CountingCounter()
    assert resolve_prompt_tokens(server_tokens=14, prompt_text="hello world", counter=counter) == TokenCount(
        14, TokenSource.SERVER
    )
    assert resolve_prompt_tokens(server_tokens=None, prompt_text="hello world", counter=counter) == TokenCount(
        2, TokenSource.TOKENIZER
    )
    assert resolve_prompt_tokens(server_tokens=None, prompt_text="hello world", counter=None) == TokenCount(
        None, TokenSource.UNKNOWN
    )
