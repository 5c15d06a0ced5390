"""Reply faults of the simulator: which requests get them and what their replies become."""

from __future__ import annotations

import pytest

from llmload.errors import ConfigError
from llmload.sim.faults import (
    SAME_TEXT_TOKENS,
    DegenerateShape,
    FaultConfig,
    FaultKind,
    apply_reply_fault,
    plan_reply_fault,
)
from llmload.sim.replies import ReplyPlan

PLAN = ReplyPlan(words=[b" a", b" b", b" c", b" d", b" e", b" f"], finish_reason="length")


def test_sim_reply_fault_rates_above_one_together_are_refused():
    with pytest.raises(ConfigError, match=r"--abort-rate \(0.6\), --degenerate-rate \(0.6\), .* add up to more"):
        FaultConfig(abort_rate=0.6, degenerate_rate=0.6)
    with pytest.raises(ConfigError, match=r"--short-rate \(0.5\) add up to more than 1"):
        FaultConfig(abort_rate=0.6, short_rate=0.5)
    with pytest.raises(ConfigError, match=r"--abort-rate must be a probability"):
        FaultConfig(abort_rate=-0.1)


def test_sim_reply_faults_partition_one_draw_with_exact_shares():
    config = FaultConfig(abort_rate=0.25, degenerate_rate=0.25, short_rate=0.25)
    kinds = [plan_reply_fault(config, 3, n) for n in range(1, 4001)]
    assert kinds.count(FaultKind.ABORT) == pytest.approx(1000, abs=100)
    assert kinds.count(FaultKind.DEGENERATE) == pytest.approx(1000, abs=100)
    assert kinds.count(FaultKind.SHORT) == pytest.approx(1000, abs=100)
    assert kinds == [plan_reply_fault(config, 3, n) for n in range(1, 4001)]  # reproducible
    assert plan_reply_fault(FaultConfig(), 3, 1) is None


def test_sim_abort_keeps_half_the_words_and_says_abort():
    assert apply_reply_fault(PLAN, FaultKind.ABORT, FaultConfig(), 0, 6) == ReplyPlan(PLAN.words[:3], "abort")
    assert apply_reply_fault(PLAN, None, FaultConfig(), 0, 6) is PLAN
    assert apply_reply_fault(PLAN, FaultKind.SHORT, FaultConfig(), 0, 6) == ReplyPlan(PLAN.words[:3], "stop")


@pytest.mark.parametrize(
    ("shape", "words"),
    [(DegenerateShape.EMPTY, [b""] * 6), (DegenerateShape.REPEAT, [b" a"] * 6)],
)
def test_sim_degenerate_shapes(shape, words):
    config = FaultConfig(degenerate_rate=1.0, degenerate_shape=shape)
    assert apply_reply_fault(PLAN, FaultKind.DEGENERATE, config, 0, 6) == ReplyPlan(words, "length")


def test_sim_degenerate_same_text_is_one_text_whatever_the_plan():
    config = FaultConfig(degenerate_rate=1.0, degenerate_shape=DegenerateShape.SAME)
    other = ReplyPlan(words=[b" z"] * 40, finish_reason="stop")
    a = apply_reply_fault(PLAN, FaultKind.DEGENERATE, config, 7, 64)
    b = apply_reply_fault(other, FaultKind.DEGENERATE, config, 7, 64)
    assert a == b
    assert len(a.words) == SAME_TEXT_TOKENS
    assert a.finish_reason == "stop"
    assert apply_reply_fault(PLAN, FaultKind.DEGENERATE, config, 7, 4).finish_reason == "length"
