"""arrivals: absolute offsets per distribution, seeding, statistical shape of the gaps, bad input."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from llmload.errors import ConfigError
from llmload.workload.arrivals import Arrival, ArrivalSchedule

N_GAPS = 20_000


def _offsets(schedule: ArrivalSchedule, n: int) -> list[float]:
    return [schedule.next_offset_s() for _ in range(n)]


def _gaps(schedule: ArrivalSchedule, n: int = N_GAPS) -> list[float]:
    offsets = _offsets(schedule, n + 1)
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_arrivals_constant_spacing_is_one_over_rate() -> None:
    offsets = _offsets(ArrivalSchedule(rate=4.0, arrival=Arrival.CONSTANT), 9)
    assert offsets == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0])


def test_arrivals_constant_offsets_do_not_drift_over_many_requests() -> None:
    schedule = ArrivalSchedule(rate=3.0, arrival=Arrival.CONSTANT)
    offsets = _offsets(schedule, 30_001)
    # Absolute offsets: request 30 000 is due at 10 000 s, not at a sum of rounded sleeps.
    assert offsets[30_000] == pytest.approx(10_000.0, rel=1e-9)


@pytest.mark.parametrize("arrival", list(Arrival))
def test_arrivals_first_offset_is_zero(arrival: Arrival) -> None:
    assert ArrivalSchedule(rate=2.0, arrival=arrival, burstiness=0.5, seed=7).next_offset_s() == 0.0


def test_arrivals_poisson_gaps_are_the_seeded_exponential_draws() -> None:
    rng = random.Random(42)
    expected = list(itertools.accumulate((rng.expovariate(5.0) for _ in range(5)), initial=0.0))
    assert _offsets(ArrivalSchedule(rate=5.0, arrival=Arrival.POISSON, seed=42), 6) == pytest.approx(expected)


def test_arrivals_gamma_gaps_are_the_seeded_gamma_draws() -> None:
    rng = random.Random(3)
    # shape 0.5, mean 1/rate = 0.1 s -> scale 0.2
    expected = list(itertools.accumulate((rng.gammavariate(0.5, 0.2) for _ in range(5)), initial=0.0))
    schedule = ArrivalSchedule(rate=10.0, arrival=Arrival.GAMMA, burstiness=0.5, seed=3)
    assert _offsets(schedule, 6) == pytest.approx(expected)


@pytest.mark.parametrize("arrival", [Arrival.POISSON, Arrival.GAMMA])
def test_arrivals_same_seed_same_schedule_other_seed_other_schedule(arrival: Arrival) -> None:
    a = _offsets(ArrivalSchedule(rate=8.0, arrival=arrival, burstiness=2.0, seed=11), 50)
    b = _offsets(ArrivalSchedule(rate=8.0, arrival=arrival, burstiness=2.0, seed=11), 50)
    c = _offsets(ArrivalSchedule(rate=8.0, arrival=arrival, burstiness=2.0, seed=12), 50)
    assert a == b
    assert a != c
    assert a == sorted(a)  # gaps are never negative


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_arrivals_poisson_gap_mean_and_spread_match_the_rate(seed: int) -> None:
    rate = 20.0
    gaps = _gaps(ArrivalSchedule(rate=rate, arrival=Arrival.POISSON, seed=seed))
    mean = statistics.fmean(gaps)
    # The mean of N exponential gaps has standard error (1/rate)/sqrt(N); allow 4 of them.
    assert abs(mean - 1 / rate) < 4 * (1 / rate) / math.sqrt(N_GAPS)
    # Exponential gaps: standard deviation equals the mean (coefficient of variation 1).
    assert statistics.stdev(gaps) / mean == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize(
    ("burstiness", "expected_cv"),
    [(0.25, 2.0), (1.0, 1.0), (4.0, 0.5)],
)
def test_arrivals_gamma_burstiness_sets_the_gap_spread_not_the_mean(burstiness: float, expected_cv: float) -> None:
    rate = 10.0
    gaps = _gaps(ArrivalSchedule(rate=rate, arrival=Arrival.GAMMA, burstiness=burstiness, seed=5))
    mean = statistics.fmean(gaps)
    # Gamma(shape k, mean m): standard deviation m/sqrt(k); the mean's standard error is that / sqrt(N).
    assert abs(mean - 1 / rate) < 4 * expected_cv * (1 / rate) / math.sqrt(N_GAPS)
    assert statistics.stdev(gaps) / mean == pytest.approx(expected_cv, rel=0.08)


def test_arrivals_burstier_gamma_bunches_more_requests_into_short_gaps() -> None:
    rate = 10.0
    bursty = _gaps(ArrivalSchedule(rate=rate, arrival=Arrival.GAMMA, burstiness=0.25, seed=9))
    regular = _gaps(ArrivalSchedule(rate=rate, arrival=Arrival.GAMMA, burstiness=4.0, seed=9))
    short_s = 0.1 / rate  # a tenth of the mean gap
    bursty_share = sum(g < short_s for g in bursty) / len(bursty)
    regular_share = sum(g < short_s for g in regular) / len(regular)
    # Gamma CDF at a tenth of the mean: shape 0.25 -> 0.437; shape 4 -> 0.00077 (Poisson: 0.095).
    assert bursty_share == pytest.approx(0.437, abs=0.03)
    assert regular_share < 0.005


def test_arrivals_next_due_offset_is_the_next_offset_handed_out() -> None:
    schedule = ArrivalSchedule(rate=5.0, arrival=Arrival.POISSON, seed=1)
    assert schedule.next_due_offset_s == 0.0
    for _ in range(20):
        due = schedule.next_due_offset_s
        assert schedule.next_offset_s() == due
    assert schedule.next_due_offset_s > 0.0


@pytest.mark.parametrize("arrival", list(Arrival))
def test_arrivals_infinite_rate_makes_every_request_due_at_zero(arrival: Arrival) -> None:
    schedule = ArrivalSchedule(rate=math.inf, arrival=arrival)
    assert _offsets(schedule, 100) == [0.0] * 100
    assert schedule.next_due_offset_s == 0.0


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan, -math.inf])
def test_arrivals_rejects_a_rate_that_is_not_positive(rate: float) -> None:
    with pytest.raises(ConfigError, match=r"request rate must be > 0 or inf, got") as info:
        ArrivalSchedule(rate=rate)
    assert repr(rate) in str(info.value)


@pytest.mark.parametrize("burstiness", [0.0, -0.5, math.nan, math.inf])
def test_arrivals_rejects_burstiness_that_is_not_a_finite_positive_number(burstiness: float) -> None:
    with pytest.raises(ConfigError, match=r"--burstiness must be a finite number > 0") as info:
        ArrivalSchedule(rate=1.0, arrival=Arrival.GAMMA, burstiness=burstiness)
    message = str(info.value)
    assert repr(burstiness) in message
    assert "pass e.g. 0.5" in message
