"""Web UI pieces that need no server (issue 10, B7, B8): Locust's failure rows, the blocked verdict."""

from __future__ import annotations

from llmload.aggregate.stats import LLMStats
from llmload.exporters.console import summary_lines
from llmload.exporters.results import RunOutcome, build_results
from llmload.request.failures import grouped_error
from llmload.request.record import ErrorInfo, Outcome, RequestRecord
from llmload.settings.config import RunConfig


def _failed(message: str, category: str = "HTTP 500 InternalServerError") -> RequestRecord:
    return RequestRecord(
        endpoint="chat", model="m", started_at_unix=0.0, outcome=Outcome.HTTP_ERROR,
        error=ErrorInfo(category, message, 500), end_s=0.01,
    )  # fmt: skip


def test_b8_failures_with_request_ids_in_their_messages_share_one_locust_error_text() -> None:
    samples: dict[str, str] = {}
    first = grouped_error(_failed("internal error, request id 1111"), samples)
    second = grouped_error(_failed("internal error, request id 2222"), samples)
    other = grouped_error(_failed("upstream timed out", "HTTP 504"), samples)
    assert repr(first) == repr(second)  # Locust groups its Failures tab by this text
    assert str(first) == "HTTP 500 InternalServerError (e.g. internal error, request id 1111)"
    assert repr(other) != repr(first)
    assert str(other).startswith("HTTP 504 (e.g. upstream timed out")


def test_b7_blocked_run_verdict_line_says_it_was_blocked() -> None:
    outcome = RunOutcome(stats=LLMStats.empty(), config=RunConfig(), blocked='model "x" not served; available: m')
    last = summary_lines(build_results(outcome))[-1]
    assert last.startswith('BLOCKED before load: model "x" not served')
    assert "FAILED" not in last
    assert "failure ratio" not in last
