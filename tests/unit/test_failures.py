"""The failure classifier: (phase, exception or status) → outcome and category; exceptions for Locust."""

from __future__ import annotations

import pytest

from llmload.client import StreamingClient
from llmload.errors import (
    ConnectionClosedError,
    HTTPStatusError,
    RequestError,
    RequestTimeout,
    ServerStreamError,
    SSEProtocolError,
    StreamError,
    ThrottledError,
    TransportError,
)
from llmload.failures import (
    FAILURES,
    IncompleteReplyError,
    Phase,
    TotalTimeout,
    classify,
    classify_status,
    error_of,
    parse_retry_after,
    skip_pause_s,
    throttle_pause_s,
)
from llmload.payloads import build_chat_request
from llmload.record import ErrorInfo, Outcome, RequestRecord
from llmload.stream import ReplyFailure


@pytest.mark.parametrize(
    ("phase", "exc", "outcome", "category"),
    [
        (Phase.SEND, RequestTimeout("t"), Outcome.TIMEOUT, "timeout: before headers"),
        (Phase.SEND, ConnectionClosedError("c"), Outcome.TRANSPORT_ERROR, "transport error: connect/send"),
        (Phase.SEND, ConnectionRefusedError(), Outcome.TRANSPORT_ERROR, "transport error: connect/send"),
        (Phase.STREAM, TotalTimeout("t"), Outcome.TIMEOUT, "timeout: total"),
        (Phase.STREAM, RequestTimeout("t"), Outcome.TIMEOUT, "timeout: read idle"),
        (Phase.STREAM, ConnectionClosedError("c"), Outcome.STREAM_ERROR, "stream ended before completion"),
        (Phase.STREAM, IncompleteReplyError("i"), Outcome.STREAM_ERROR, "stream ended before completion"),
        (Phase.STREAM, ConnectionResetError(), Outcome.TRANSPORT_ERROR, "transport error: mid-body"),
        (Phase.STREAM, SSEProtocolError("s"), Outcome.STREAM_ERROR, "unexpected chunk shape"),
        (Phase.BODY, ConnectionClosedError("c"), Outcome.STREAM_ERROR, "body ended before completion"),
        (Phase.BODY, SSEProtocolError("s"), Outcome.STREAM_ERROR, "unexpected body shape"),
        (Phase.BODY, ValueError("v"), Outcome.STREAM_ERROR, "invalid JSON body"),
    ],
)
def test_classify_maps_phase_and_exception_to_outcome_and_category(phase, exc, outcome, category):
    failure = classify(phase, exc)
    assert failure is not None
    assert (failure.outcome, failure.category) == (outcome, category)


def test_classify_every_table_entry_is_reached_by_its_own_class():
    # the most specific class of an exception's MRO wins, so no entry hides another
    for (phase, cls), failure in FAILURES.items():
        assert classify(phase, cls("x")) == failure, (phase, cls)


def test_classify_reply_failure_names_its_own_outcome_and_status():
    failure = classify(Phase.STREAM, ReplyFailure(Outcome.SERVER_ERROR, "InternalServerError/500", "boom", 200))
    assert failure is not None
    assert (failure.outcome, failure.category, failure.status, failure.at_last_read) == (
        Outcome.SERVER_ERROR,
        "InternalServerError/500",
        200,
        True,
    )


def test_classify_leaves_bugs_unclassified():
    assert classify(Phase.STREAM, KeyError("x")) is None
    assert classify(Phase.SEND, ValueError("x")) is None  # only a body's JSON may be invalid


class _BuggyTransport:
    def connect(self) -> None:
        pass

    def post(self, path, body, headers):
        raise KeyError("a bug, not a request failure")


def test_client_lets_an_unclassified_exception_propagate():
    client = StreamingClient(_BuggyTransport())
    with pytest.raises(KeyError):
        client.run(build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2))


def test_classify_status_http_error_with_kind():
    failure = classify_status(404, "NotFoundError")
    assert (failure.outcome, failure.category, failure.status) == (Outcome.HTTP_ERROR, "HTTP 404 NotFoundError", 404)


@pytest.mark.parametrize(
    ("outcome", "cls"),
    [
        (Outcome.HTTP_ERROR, HTTPStatusError),
        (Outcome.THROTTLED, ThrottledError),
        (Outcome.TRANSPORT_ERROR, TransportError),
        (Outcome.TIMEOUT, RequestTimeout),
        (Outcome.STREAM_ERROR, StreamError),
        (Outcome.EMPTY, StreamError),
        (Outcome.SERVER_ERROR, ServerStreamError),
    ],
)
def test_error_of_gives_the_exception_of_the_tree_for_each_failure(outcome, cls):
    record = RequestRecord("chat", "m", 0.0, outcome=outcome, error=ErrorInfo("HTTP 500", "boom", 500))
    error = error_of(record)
    assert type(error) is cls
    assert isinstance(error, RequestError)
    assert str(error) == "HTTP 500: boom"


def test_error_of_every_failure_outcome_is_a_request_error():
    for outcome in Outcome:
        error = error_of(RequestRecord("chat", "m", 0.0, outcome=outcome))
        if outcome.is_failure:
            assert isinstance(error, RequestError), outcome
        else:
            assert error is None


def test_parse_retry_after_seconds_and_http_date():
    now = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT
    assert parse_retry_after("1", now) == 1.0
    assert parse_retry_after(" 120 ", now) == 120.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:25 GMT", now) == pytest.approx(5.0)
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:00 GMT", now) == 0.0  # in the past
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("-3", now) is None


@pytest.mark.parametrize("status", [429, 503])
def test_classify_status_throttling_statuses_are_their_own_outcome(status):
    failure = classify_status(status, None)
    assert (failure.outcome, failure.category, failure.status) == (Outcome.THROTTLED, f"HTTP {status}", status)


def test_throttle_pause_honours_retry_after_up_to_the_cap():
    assert throttle_pause_s(1.0, 1, 60.0, 0.99) == 1.0
    assert throttle_pause_s(3600.0, 1, 60.0, 0.0) == 60.0
    assert throttle_pause_s(0.0, 5, 60.0, 0.5) == 0.0


def test_throttle_pause_without_retry_after_doubles_with_jitter_and_stays_under_the_cap():
    assert [throttle_pause_s(None, k, 60.0, 0.0) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert [throttle_pause_s(None, k, 60.0, 1.0) for k in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert throttle_pause_s(None, 10, 60.0, 0.999) <= 60.0
    assert throttle_pause_s(None, 10_000, 60.0, 0.5) == 45.0  # no overflow on a long streak


def test_skip_pause_doubles_from_50_ms_and_stays_at_one_second():
    assert [skip_pause_s(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert skip_pause_s(10_000) == 1.0
