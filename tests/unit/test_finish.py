"""Finish reasons: which end a reply normally, and their bounded labels."""

from __future__ import annotations

import pytest

from llmload.request.finish import (
    NORMAL_FINISH_REASONS,
    OTHER_REASON,
    abnormal_finish_category,
    finish_label,
    is_normal_finish,
)


@pytest.mark.parametrize("reason", sorted(NORMAL_FINISH_REASONS))
def test_finish_normal_reasons_have_no_failure_category(reason):
    assert is_normal_finish(reason)
    assert abnormal_finish_category(reason) is None
    assert abnormal_finish_category(reason.upper()) is None  # Gemini-style spellings


def test_finish_missing_reason_is_no_verdict():
    assert is_normal_finish(None)
    assert abnormal_finish_category(None) is None
    assert abnormal_finish_category("") is None  # gateways that write "" for "not finished"
    assert abnormal_finish_category("  ") is None


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        ("abort", "finish_reason abort"),
        ("error", "finish_reason error"),
        ("Cancelled", "finish_reason cancelled"),
        ("recitation", "finish_reason recitation"),
        ("x" * 33, "finish_reason other"),
        ("bad reason with spaces", "finish_reason other"),
        ("a\nb", "finish_reason other"),
    ],
)
def test_finish_abnormal_reason_category_is_bounded(reason, category):
    assert abnormal_finish_category(reason) == category


def test_finish_label_lower_cases_safe_words_and_bounds_the_rest():
    assert finish_label("STOP") == "stop"
    assert finish_label("tool_calls") == "tool_calls"
    assert finish_label("<script>") == OTHER_REASON
