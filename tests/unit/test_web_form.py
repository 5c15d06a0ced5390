"""The web UI form's pieces that need no server (issue 10, B7, B8): posted values, grouped failures, verdicts."""

from __future__ import annotations

import argparse

from werkzeug.datastructures import MultiDict

from llmload.config import RunConfig
from llmload.exporters.console import summary_lines
from llmload.exporters.results import RunOutcome, build_results
from llmload.record import ErrorInfo, Outcome, RequestRecord
from llmload.stats import LLMStats
from llmload.users import _grouped_error
from llmload.web.form import posted_options


def _failed(message: str, category: str = "HTTP 500 InternalServerError") -> RequestRecord:
    return RequestRecord(
        endpoint="chat", model="m", started_at_unix=0.0, outcome=Outcome.HTTP_ERROR,
        error=ErrorInfo(category, message, 500), end_s=0.01,
    )  # fmt: skip


def test_posted_options_are_typed_as_locusts_swarm_view_types_them() -> None:
    options = argparse.Namespace(max_tokens="256", ignore_eos=False, header=None, num_users=1, other="kept")
    form = MultiDict({"max_tokens": "16", "ignore_eos": "true", "header": "X-A: 1", "user_count": "7"})
    posted = posted_options(options, form)
    assert (posted.max_tokens, posted.ignore_eos, posted.header, posted.num_users) == ("16", True, "X-A: 1", 7)
    assert posted.other == "kept"
    assert options.max_tokens == "256"  # the running options are not touched


def test_b8_failures_with_request_ids_in_their_messages_share_one_locust_error_text() -> None:
    samples: dict[str, str] = {}
    first = _grouped_error(_failed("internal error, request id 1111"), samples)
    second = _grouped_error(_failed("internal error, request id 2222"), samples)
    other = _grouped_error(_failed("upstream timed out", "HTTP 504"), samples)
    assert repr(first) == repr(second)  # Locust groups its Failures tab by this text
    assert str(first) == "HTTP 500 InternalServerError (e.g. internal error, request id 1111)"
    assert repr(other) != repr(first)
    assert str(other).startswith("HTTP 504 (e.g. upstream timed out")


def test_b7_blocked_run_verdict_line_says_it_was_blocked() -> None:
    outcome = RunOutcome(stats=LLMStats.empty(), config=RunConfig(), blocked='model "x" not served; available: m')
    last = summary_lines(build_results(outcome))[-1]
    assert last.startswith('BLOCKED before load: model "x" not served')
    assert "FAILED" not in last and "failure ratio" not in last
