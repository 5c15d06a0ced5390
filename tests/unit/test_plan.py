"""plan: the master's split of --num-requests, --warmup-requests, --request-rate and --max-concurrency."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmload.run.plan import RunPlan, WorkerShare, split_run, users_per_worker


def test_split_run_quota_remainder_goes_to_the_first_workers() -> None:
    shares = split_run(3, num_requests=10, warmup_requests=0, request_rate=None, max_concurrency=None)
    assert [s.quota_requests for s in shares] == [4, 3, 3]
    assert [s.rank for s in shares] == [0, 1, 2]


def test_split_run_without_num_requests_has_no_quota() -> None:
    shares = split_run(2, num_requests=None, warmup_requests=5, request_rate=None, max_concurrency=None)
    assert [s.quota_requests for s in shares] == [None, None]
    assert [s.warmup_requests for s in shares] == [3, 2]


def test_split_run_rate_is_split_evenly() -> None:
    shares = split_run(4, num_requests=None, warmup_requests=0, request_rate=10.0, max_concurrency=None)
    assert [s.rate_per_s for s in shares] == [2.5, 2.5, 2.5, 2.5]
    assert all(s.concurrency is None for s in shares)


def test_split_run_concurrency_gives_every_worker_at_least_one_slot() -> None:
    shares = split_run(3, num_requests=None, warmup_requests=0, request_rate=None, max_concurrency=2)
    assert [s.concurrency for s in shares] == [1, 1, 1]
    shares = split_run(3, num_requests=None, warmup_requests=0, request_rate=None, max_concurrency=8)
    assert [s.concurrency for s in shares] == [3, 3, 2]


def test_split_run_single_process_gets_the_whole_run() -> None:
    (share,) = split_run(1, num_requests=7, warmup_requests=2, request_rate=3.0, max_concurrency=4)
    assert share == WorkerShare(rank=0, quota_requests=7, warmup_requests=2, rate_per_s=3.0, concurrency=4)


def test_split_run_no_workers_is_no_shares() -> None:
    assert split_run(0, num_requests=10, warmup_requests=3, request_rate=1.0, max_concurrency=2) == ()


def test_split_run_refuses_negative_counts() -> None:
    with pytest.raises(ValueError, match="workers must be >= 0, got -1"):
        split_run(-1, num_requests=1, warmup_requests=0, request_rate=None, max_concurrency=None)
    with pytest.raises(ValueError, match="-5"):
        split_run(2, num_requests=-5, warmup_requests=0, request_rate=None, max_concurrency=None)


@given(
    workers=st.integers(1, 64),
    num_requests=st.one_of(st.none(), st.integers(0, 10_000)),
    warmup=st.integers(0, 1_000),
    rate=st.one_of(st.none(), st.floats(0.01, 1e4)),
)
def test_split_run_shares_add_up_to_the_totals(
    workers: int, num_requests: int | None, warmup: int, rate: float | None
) -> None:
    shares = split_run(
        workers, num_requests=num_requests, warmup_requests=warmup, request_rate=rate, max_concurrency=None
    )
    assert len(shares) == workers
    assert sum(s.warmup_requests for s in shares) == warmup
    if num_requests is not None:
        quotas = [s.quota_requests or 0 for s in shares]
        assert sum(quotas) == num_requests
        assert max(quotas) - min(quotas) <= 1
    if rate is not None:
        assert sum(s.rate_per_s or 0.0 for s in shares) == pytest.approx(rate)


def test_users_per_worker_rounds_up() -> None:
    assert users_per_worker(10, 3) == 4
    assert users_per_worker(10, 0) == 10


def test_plan_share_for_a_worker_left_out() -> None:
    assert RunPlan(limited=True).share_for("7") == WorkerShare(quota_requests=0)
    assert RunPlan(limited=False).share_for("7") == WorkerShare(quota_requests=None)


def test_fewer_users_than_workers_is_refused_only_when_a_total_is_shared():
    from llmload.run.plan import users_short_of_workers

    message = users_short_of_workers(1, 2, ("--num-requests",))
    assert message is not None
    assert "--num-requests is shared by the 2 workers" in message
    assert "got 1 user(s)" in message
    assert "(-u) to 2 or more" in message
    assert "are shared" in (users_short_of_workers(3, 4, ("--num-requests", "--request-rate")) or "")
    assert users_short_of_workers(2, 2, ("--num-requests",)) is None
    assert users_short_of_workers(1, 2, ()) is None  # -t only: a worker without users simply idles
    assert users_short_of_workers(0, 1, ("--num-requests",)) is None  # one process gets every user
