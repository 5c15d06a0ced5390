"""Token accounting: no special tokens, joined text counted once, precedence with provenance."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmload.errors import TokenizerError
from llmload.request.chunks import ChunkDelta, ReplyAccumulator
from llmload.request.record import ITLKind, RequestRecord, TokenCount, TokenSource, UsageNote
from llmload.request.tokens import (
    HFTokenCounter,
    load_tokenizer,
    read_usage,
    resolve_completion_tokens,
    resolve_output_tokens,
    resolve_output_tokens_by_rules,
    resolve_prompt_tokens,
)


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
        "add --allow-download to fetch it from the Hugging Face hub, "
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


# ── usage checked against the stream (read_usage, resolve_output_tokens) ──
def _acc(*deltas: ChunkDelta) -> ReplyAccumulator:
    acc = ReplyAccumulator()
    for i, delta in enumerate(deltas):
        acc.add(delta, 0.1 + 0.01 * i)
    return acc


def _tok(text: str = "x", completion: int | None = None, **more: object) -> ChunkDelta:
    return ChunkDelta(text, True, True, None, None, completion, **more)  # type: ignore[arg-type]


def _usage(completion: int, **more: object) -> ChunkDelta:
    return ChunkDelta("", False, False, None, 5, completion, **more)  # type: ignore[arg-type]


def test_read_usage_single_final_value_is_the_count():
    acc = _acc(_tok(), _tok(), _usage(2))
    reading = read_usage(acc.usage_log, 2)
    assert (reading.total, reading.notes) == (2, ())


def test_read_usage_cumulative_per_chunk_takes_the_last_value_and_per_event_counts():
    acc = _acc(_tok(completion=1), _tok(completion=3), _tok(completion=4), _usage(4))
    reading = read_usage(acc.usage_log, 3, acc.usage_per_event())
    assert (reading.total, reading.per_event, reading.notes) == (4, [1, 2, 1], ())


def test_read_usage_incremental_per_chunk_is_summed():
    acc = _acc(_tok(completion=1), _tok(completion=1), _tok(completion=2))
    reading = read_usage(acc.usage_log, 3, acc.usage_per_event())
    assert (reading.total, reading.per_event) == (4, [1, 1, 2])
    assert reading.notes == (UsageNote.INCREMENTAL,)


def test_read_usage_a_falling_value_is_incremental():
    acc = _acc(_tok(completion=3), _tok(completion=1), _usage(0))
    assert read_usage(acc.usage_log, 2).total == 4


def test_read_usage_not_growing_while_tokens_stream_is_noted():
    acc = _acc(_usage(5), _tok(), _tok(), _tok(), _usage(5))
    reading = read_usage(acc.usage_log, 3)
    assert reading.total == 5
    assert reading.notes == (UsageNote.NOT_GROWING,)


def test_read_usage_below_token_events_is_not_used():
    acc = _acc(_tok(), _tok(), _tok(), _usage(1))
    reading = read_usage(acc.usage_log, 3)
    assert reading.total is None
    assert reading.notes == (UsageNote.BELOW_EVENTS,)


def test_resolve_output_tokens_prefers_logprobs_over_tokenizer_and_chunks(recording_counter):
    acc = _acc(_tok("ab", logprob_tokens=2), _tok("c", logprob_tokens=1))
    out = resolve_output_tokens(acc, counter=recording_counter, streamed=True)
    assert out.count == TokenCount(3, TokenSource.LOGPROBS)
    assert out.token_counts == [2, 1]
    assert recording_counter.texts == []


def test_resolve_output_tokens_logprobs_only_when_every_token_event_listed_them():
    acc = _acc(_tok("ab", logprob_tokens=2), _tok("c"))
    out = resolve_output_tokens(acc, counter=None, streamed=True)
    assert out.count == TokenCount(2, TokenSource.CHUNKS)


def test_resolve_output_tokens_below_events_falls_back_to_the_chunk_count():
    acc = _acc(_tok(), _tok(), _tok(), _usage(2))
    out = resolve_output_tokens(acc, counter=None, streamed=True)
    assert out.count == TokenCount(3, TokenSource.CHUNKS)
    assert out.notes == (UsageNote.BELOW_EVENTS,)


@pytest.mark.parametrize(
    "deltas",
    [
        (_tok(), _tok(), _tok()),  # no usage: chunk count (or the tokenizer)
        (_tok("ab"), _tok("cd"), _usage(4)),  # usage once at the end
        (_tok(), _tok(), _tok(), _usage(3)),  # usage equal to the token events
        (_tok(), _tok(), _tok(), _usage(2)),  # below the token events: the next source
        (_tok("a"), _tok("b"), _usage(40)),  # above the streamed text
        (_tok("ab"), _tok("c"), _usage(0)),  # a zero count
        (_tok(), _usage(1)),
        (_usage(7),),  # usage without any token event
        (_tok(completion=1),),  # per-event usage on the only token event
        (_tok(completion=1), _tok(completion=2), _usage(2)),  # cumulative per-event usage
        (_tok(), _tok(), _usage(9, reasoning_tokens=7)),  # hidden reasoning
        (_tok(), _usage(3, unreadable_detail="usage.completion_tokens_details.reasoning_tokens is a string")),
        (_tok("ab", logprob_tokens=2), _tok("c", logprob_tokens=1)),
    ],
)
@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("with_counter", [False, True])
def test_resolve_output_tokens_shortcut_equals_the_rules(deltas, streamed, with_counter):
    """The plain-reply shortcut (at most one usage value) gives what the general rules give."""
    counter = CountingCounter() if with_counter else None
    fast = resolve_output_tokens(_acc(*deltas), counter=counter, streamed=streamed)
    assert fast == resolve_output_tokens_by_rules(_acc(*deltas), counter=counter, streamed=streamed)


def test_resolve_output_tokens_hidden_reasoning_is_set_apart():
    acc = _acc(_tok(), _tok(), _tok(), _tok(), _usage(104, reasoning_tokens=100))
    out = resolve_output_tokens(acc, counter=None, streamed=True)
    assert out.count == TokenCount(104, TokenSource.SERVER)
    assert out.hidden_reasoning_tokens == 100
    assert out.notes == (UsageNote.HIDDEN_REASONING,)


def test_resolve_output_tokens_streamed_reasoning_is_not_hidden():
    acc = _acc(
        ChunkDelta("hmm, let me see", True, False, None, None, None, has_reasoning=True),
        _tok(),
        _usage(10, reasoning_tokens=8),
    )
    out = resolve_output_tokens(acc, counter=None, streamed=True)
    assert (out.hidden_reasoning_tokens, out.notes) == (0, ())


def test_resolve_output_tokens_reasoning_that_does_not_add_up_makes_tpot_unavailable():
    acc = _acc(_tok(), _tok(), _tok(), _tok(), _usage(6, reasoning_tokens=5))
    out = resolve_output_tokens(acc, counter=None, streamed=True)
    assert (out.hidden_reasoning_tokens, out.notes) == (0, (UsageNote.REASONING_UNEXPLAINED,))


def test_resolve_output_tokens_reasoning_above_the_count_is_counted_apart_by_the_server():
    acc = _acc(_tok(), _tok(), _usage(2, reasoning_tokens=50))
    out = resolve_output_tokens(acc, counter=None, streamed=True)
    assert (out.count.value, out.hidden_reasoning_tokens, out.notes) == (2, 0, (UsageNote.REASONING_APART,))


def test_record_tpot_over_streamed_tokens_and_unavailable_with_reason():
    hidden = RequestRecord(
        "chat", "m", 0.0, token_times_s=[0.5, 0.52, 0.54, 0.56], completion_tokens=TokenCount(104, TokenSource.SERVER)
    )
    hidden.hidden_reasoning_tokens = 100
    assert hidden.streamed_tokens == 4
    assert hidden.tpot_s == pytest.approx(0.02)
    assert hidden.itl_kind is ITLKind.TOKEN
    unexplained = RequestRecord(
        "chat", "m", 0.0, token_times_s=[0.5, 0.52], completion_tokens=TokenCount(6, TokenSource.SERVER)
    )
    unexplained.usage_notes = (UsageNote.REASONING_UNEXPLAINED,)
    assert unexplained.streamed_tokens is None
    assert unexplained.tpot_s is None


def test_resolve_output_tokens_counts_logprobs_of_a_non_streamed_body():
    acc = _acc(_tok("abc", logprob_tokens=3))
    out = resolve_output_tokens(acc, counter=None, streamed=False)
    assert (out.count, out.token_counts) == (TokenCount(3, TokenSource.LOGPROBS), None)


def test_read_usage_incremental_after_a_zero_on_the_role_chunk():
    acc = _acc(_usage(0), _tok(completion=1), _tok(completion=1), _tok(completion=1))
    reading = read_usage(acc.usage_log, 3, acc.usage_per_event())
    assert (reading.total, reading.per_event, reading.notes) == (3, [1, 1, 1], (UsageNote.INCREMENTAL,))


# NC-23 (kind): usage above what the streamed text can hold is noted; the check reads bytes, so byte-level
# tokens of multi-byte characters (2 emoji = 8 bytes = up to 8 tokens) are not flagged.
def test_nc23_kind_usage_above_text_counts_bytes_not_characters():
    emoji = _acc(_tok("\U0001f600"), _tok("\U0001f600"), _usage(8))
    assert resolve_output_tokens(emoji, counter=None, streamed=True).notes == ()
    high = _acc(_tok("The"), _tok(" answer"), _usage(40))
    out = resolve_output_tokens(high, counter=None, streamed=True)
    assert (out.count.value, out.notes, out.token_counts) == (40, (UsageNote.ABOVE_TEXT,), None)
    eos = _acc(_tok("a"), _tok("b"), _usage(3))  # one unstreamed end-of-sequence token is allowed
    assert resolve_output_tokens(eos, counter=None, streamed=True).notes == ()
    whole = _acc(_tok("The"), _usage(40))
    assert resolve_output_tokens(whole, counter=None, streamed=False).notes == ()  # --no-stream: no TPOT anyway
