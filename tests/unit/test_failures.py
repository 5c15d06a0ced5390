"""The failure classifier: (phase, exception or status) → outcome and category; exceptions for Locust."""

from __future__ import annotations

import pytest

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
from llmload.request.client import StreamingClient
from llmload.request.failures import (
    FAILURES,
    RETRY_AFTER_JITTER,
    IncompleteReplyError,
    Phase,
    TotalTimeout,
    classify,
    classify_status,
    error_of,
    is_throttling,
    parse_retry_after,
    skip_pause_s,
    throttle_pause_s,
)
from llmload.request.payloads import build_chat_request
from llmload.request.record import ErrorInfo, Outcome, RequestRecord
from llmload.request.stream import ReplyFailure


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


def test_classify_status_429_is_throttled_with_or_without_retry_after():
    for retry_after in (None, "1"):
        failure = classify_status(429, None, retry_after)
        assert (failure.outcome, failure.category, failure.status) == (Outcome.THROTTLED, "HTTP 429", 429)


# NC-09 ("same for 503 with Retry-After"): a 503 asks to slow down only when it says so.
@pytest.mark.parametrize(
    ("kind", "retry_after", "outcome"),
    [
        (None, "1", Outcome.THROTTLED),  # Retry-After: the server asks for a pause
        (None, "Tue, 14 Nov 2023 22:13:25 GMT", Outcome.THROTTLED),
        ("rate_limit_exceeded", None, Outcome.THROTTLED),  # a gateway's rate-limit body
        ("RateLimitError", None, Outcome.THROTTLED),
        ("overloaded_error", None, Outcome.THROTTLED),
        ("Too Many Requests", None, Outcome.THROTTLED),
        (None, None, Outcome.HTTP_ERROR),  # a bare 503: the backend is down, not throttling
        ("ServiceUnavailableError", None, Outcome.HTTP_ERROR),
        ("no healthy upstream", None, Outcome.HTTP_ERROR),
    ],
)
def test_nc09_a_503_is_throttled_only_with_retry_after_or_a_rate_limit_body(kind, retry_after, outcome):
    failure = classify_status(503, kind, retry_after)
    assert (failure.outcome, failure.status) == (outcome, 503)
    assert is_throttling(503, kind, retry_after) is (outcome is Outcome.THROTTLED)


def test_classify_status_other_statuses_are_never_throttled_even_with_retry_after():
    for status in (500, 502, 504, 404):
        assert classify_status(status, "rate_limit_exceeded", "1").outcome is Outcome.HTTP_ERROR


def test_throttle_pause_honours_retry_after_up_to_the_cap():
    assert throttle_pause_s(1.0, 1, 60.0, 0.0) == 1.0
    assert throttle_pause_s(3600.0, 1, 60.0, 0.0) == 60.0
    assert throttle_pause_s(3600.0, 1, 60.0, 0.99) == 60.0  # jitter never passes the cap
    assert throttle_pause_s(0.0, 5, 60.0, 0.5) == 0.0


def test_throttle_pause_with_retry_after_adds_up_to_ten_percent_jitter_so_users_do_not_retry_in_lockstep():
    pauses = [throttle_pause_s(1.0, 1, 60.0, j / 100) for j in range(100)]
    assert min(pauses) == 1.0
    assert max(pauses) == pytest.approx(1.099)
    assert all(1.0 <= p < 1.0 + RETRY_AFTER_JITTER for p in pauses)
    assert len(set(pauses)) == 100  # 100 users told "Retry-After: 1" spread over 1.0-1.1 s
    assert throttle_pause_s(10.0, 1, 10.5, 0.99) == 10.5  # capped by --max-retry-after


def test_throttle_pause_without_retry_after_doubles_with_jitter_and_stays_under_the_cap():
    assert [throttle_pause_s(None, k, 60.0, 0.0) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert [throttle_pause_s(None, k, 60.0, 1.0) for k in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert throttle_pause_s(None, 10, 60.0, 0.999) <= 60.0
    assert throttle_pause_s(None, 10_000, 60.0, 0.5) == 45.0  # no overflow on a long streak


def test_skip_pause_doubles_from_50_ms_and_stays_at_one_second():
    assert [skip_pause_s(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert skip_pause_s(10_000) == 1.0


@pytest.mark.parametrize("kind", [HTTPStatusError, StreamError, TransportError, ConnectionClosedError, RequestTimeout])
def test_request_error_repr_is_its_message_for_locusts_failure_table(kind):
    assert repr(kind("HTTP 502 (e.g. Bad gateway)")) == "HTTP 502 (e.g. Bad gateway)"
