"""Degenerate-output rules: one piece repeated, the same text for different prompts."""

from __future__ import annotations

from llmload.request.degenerate import (
    MIN_REPEAT_UNITS,
    MIN_SAME_TEXT_REPLIES,
    SAME_TEXT_WINDOW,
    SAMPLE_CHARS,
    SameTextWatch,
    repeated_piece,
    sample_of,
)

KEY = ("chat", "m")


def test_degenerate_one_piece_repeated_is_found_with_its_share():
    pieces = ["The", *[" the"] * 30, "."]
    assert repeated_piece(pieces) == (" the", 30, 32)


def test_degenerate_varied_reply_is_not_repeated():
    pieces = [f" w{i % 7}" for i in range(64)]
    assert repeated_piece(pieces) is None


def test_degenerate_share_below_ninety_percent_is_not_repeated():
    pieces = [" a"] * 17 + [" b", " c", " d"]  # 85 %
    assert repeated_piece(pieces) is None


def test_degenerate_short_reply_is_never_repeated():
    assert repeated_piece(["!"] * (MIN_REPEAT_UNITS - 1)) is None


def test_degenerate_few_large_pieces_are_split_into_words():
    pieces = ["the " * 10, "the " * 10]  # a whole reply, or several tokens per chunk
    assert repeated_piece(pieces) == ("the", 20, 20)


def test_degenerate_sample_is_bounded():
    assert sample_of("x" * 1000) == "x" * SAMPLE_CHARS + "…"
    assert sample_of("short") == "short"


def test_degenerate_same_text_for_different_prompts_holds_from_the_fifth_reply():
    watch = SameTextWatch()
    seen = [watch.repeats(KEY, "the same long reply", f"prompt {i}") for i in range(8)]
    assert seen[: MIN_SAME_TEXT_REPLIES - 1] == [None] * (MIN_SAME_TEXT_REPLIES - 1)
    assert seen[MIN_SAME_TEXT_REPLIES - 1 :] == [5, 6, 7, 8]


def test_degenerate_same_text_for_one_prompt_is_not_degenerate():
    watch = SameTextWatch()
    assert all(watch.repeats(KEY, "deterministic answer", "the only prompt") is None for _ in range(40))


def test_degenerate_varied_texts_are_not_same_text():
    watch = SameTextWatch()
    assert all(watch.repeats(KEY, f"reply {i}", f"prompt {i}") is None for i in range(40))


def test_degenerate_same_text_needs_ninety_percent_of_the_window():
    watch = SameTextWatch()
    results = []
    for i in range(SAME_TEXT_WINDOW * 2):
        text = f"reply {i}" if i % 8 == 0 else "canned"  # seven in eight the same (87.5 %): not degenerate
        results.append(watch.repeats(KEY, text, f"prompt {i}"))
    assert results == [None] * len(results)
    for i in range(SAME_TEXT_WINDOW):
        last = watch.repeats(KEY, "canned", f"prompt {i}")
    assert last == SAME_TEXT_WINDOW  # every one of the window: degenerate


def test_degenerate_same_text_is_per_endpoint_and_model():
    watch = SameTextWatch()
    for i in range(4):
        watch.repeats(("chat", "m"), "same", f"p{i}")
    assert watch.repeats(("chat", "other"), "same", "p9") is None
    assert watch.repeats(("chat", "m"), "same", "p9") == 5


def test_degenerate_same_text_sees_a_second_prompt_only_while_it_is_in_the_window():
    """One reply to another prompt makes the run of one prompt's replies degenerate, until it leaves the window."""
    watch = SameTextWatch()
    assert watch.repeats(KEY, "same", "the other prompt") is None
    results = [watch.repeats(KEY, "same", "the prompt") for _ in range(SAME_TEXT_WINDOW * 2)]
    assert results[: MIN_SAME_TEXT_REPLIES - 2] == [None] * (MIN_SAME_TEXT_REPLIES - 2)
    # the other prompt's reply is the window's oldest until SAME_TEXT_WINDOW replies came after it
    assert results[MIN_SAME_TEXT_REPLIES - 2 : SAME_TEXT_WINDOW - 1] == list(
        range(MIN_SAME_TEXT_REPLIES, SAME_TEXT_WINDOW + 1)
    )
    assert results[SAME_TEXT_WINDOW - 1 :] == [None] * (SAME_TEXT_WINDOW + 1)
