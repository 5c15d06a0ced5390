"""RequestBudget: the per-process share of --num-requests."""

from llmload.runtime import RequestBudget


def test_budget_grants_exactly_its_limit_and_reports_done_once():
    done = []
    budget = RequestBudget(3, on_done=lambda: done.append(True))
    grants = [budget.try_acquire() for _ in range(5)]
    assert grants == [True, True, True, False, False]
    budget.release()
    budget.release()
    assert done == []
    budget.release()
    assert done == [True]
    assert budget.try_acquire() is False
    assert done == [True]


def test_budget_zero_share_is_done_at_first_attempt():
    done = []
    budget = RequestBudget(0, on_done=lambda: done.append(True))
    assert budget.try_acquire() is False
    assert done == [True]


def test_budget_unlimited_never_exhausts():
    budget = RequestBudget(None)
    assert all(budget.try_acquire() for _ in range(10_000))
    assert budget.exhausted is False


def test_closed_budget_grants_nothing_and_reports_nothing():
    done = []
    budget = RequestBudget(3, on_done=lambda: done.append(True))
    assert budget.try_acquire() is True
    budget.close()
    assert [budget.try_acquire() for _ in range(3)] == [False, False, False]
    assert budget.issued == 1
    assert done == []


def test_end_run_closes_the_budget_and_remembers_the_run():
    from llmload.config import RunConfig
    from llmload.runtime import Runtime

    runtime = Runtime(config=RunConfig())
    runtime.run_id = "r1"
    runtime.end_run()
    assert runtime.budget.closed
    assert runtime.budget.try_acquire() is False
    assert runtime.ended_run_id == "r1"
