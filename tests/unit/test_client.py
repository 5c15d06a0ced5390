"""StreamingClient over an in-memory transport: outcomes, timestamps and token precedence."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pytest

from llmload.errors import ConnectionClosedError, RequestTimeout, TransportError
from llmload.request.chunks import parse_chunk
from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request, build_completion_request
from llmload.request.record import Outcome, TokenCount, TokenSource, UsageNote
from llmload.request.stream import DeltaTemplate
from llmload.testing import CF, ROLE, TF, TU, C, T, U, sse

CHAT = build_chat_request(model="m", messages=[{"role": "user", "content": "hello world"}], max_tokens=8)
COMPLETION = build_completion_request(model="m", prompt="count", max_tokens=8)
NO_STREAM = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=False)


class FakeResponse:
    """Plays ``reads`` (bytes, or an exception to raise) from ``read_some``; then b""."""

    read_lag_s = 0.0
    read_age_s = 0.0
    read_first_age_s = 0.0
    sent_age_s = 0.0
    send_lag_s = 0.0
    read_stamped = False
    retry_after = None

    def __init__(self, reads: Sequence[bytes | BaseException], status: int, content_type: str) -> None:
        self.status = status
        self.content_type = content_type
        self._reads = list(reads)
        self.reads_done = 0
        self.closed = False

    def read_some(self) -> bytes:
        if not self._reads:
            return b""
        item = self._reads.pop(0)
        self.reads_done += 1
        if isinstance(item, BaseException):
            raise item
        return item

    headers: Mapping[str, str] = {}

    def header(self, name: str) -> str | None:
        return {k.lower(): v for k, v in self.headers.items()}.get(name.lower())

    def read_within(self, within_s: float) -> bytes | None:
        return self.read_some()

    def drain(self, within_s: float, limit_bytes: int) -> bool:
        self.drained_within_s = within_s
        while self._reads:
            if isinstance(self.read_some(), BaseException):
                return False
        return True

    def close(self) -> None:
        self.closed = True


class FakeTransport:
    def __init__(self, response: FakeResponse | Exception) -> None:
        self._response = response
        self.sent: list[tuple[str, bytes, Mapping[str, str]]] = []
        self.connects = 0

    def connect(self) -> None:
        self.connects += 1

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> FakeResponse:
        self.sent.append((path, body, dict(headers)))
        if isinstance(self._response, Exception):
            raise self._response
        return self._response


class StepClock:
    """Starts at 0.0 and advances ``step_s`` on every reading."""

    def __init__(self, step_s: float = 0.01) -> None:
        self._now = -step_s
        self._step = step_s

    def __call__(self) -> float:
        self._now += self._step
        return self._now


class WordCounter:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def count(self, text: str) -> int:
        self.texts.append(text)
        return len(text.split())


def run(
    reads: Sequence[bytes | BaseException],
    *,
    request=CHAT,
    status: int = 200,
    content_type: str = "text/event-stream",
    counter=None,
    total_timeout_s: float = 60.0,
):
    response = FakeResponse(reads, status, content_type)
    client = StreamingClient(
        FakeTransport(response),
        clock=StepClock(),
        wall_clock=lambda: 1_700_000_000.0,
        token_counter=counter,
        total_timeout_s=total_timeout_s,
    )
    return client.run(request), response


# ── success and timestamps ─────────────────────────────────────────────────
def test_client_stamps_each_event_with_the_read_that_completed_it():
    # clock readings: t0=0.00, headers 0.01, then one per read: 0.02, 0.03, 0.04, 0.05
    reads = [
        sse(ROLE),
        sse(C({"content": "a"})) + b"data: ",
        C({"content": "b"}).encode() + b"\n\n",
        sse(CF("stop"), "[DONE]"),
    ]
    record, response = run(reads)
    assert record.outcome is Outcome.OK
    assert record.started_at_unix == 1_700_000_000.0
    assert record.headers_s == pytest.approx(0.01)
    assert record.token_times_s == pytest.approx([0.03, 0.04])
    assert record.first_content_s == pytest.approx(0.03)
    assert record.end_s == pytest.approx(0.05)
    assert record.finish_reason == "stop"
    assert response.closed


def test_client_asks_for_sse_and_sends_the_body():
    transport = FakeTransport(FakeResponse([sse(C({"content": "a"}), CF("stop"), "[DONE]")], 200, "text/event-stream"))
    StreamingClient(transport, clock=StepClock()).run(CHAT)
    path, body, headers = transport.sent[0]
    assert path == "/v1/chat/completions"
    assert body == CHAT.body
    assert headers["Accept"] == "text/event-stream"
    assert headers["Content-Type"] == "application/json"


def test_client_clean_end_of_body_after_finish_reason_is_success():
    record, _ = run([sse(T("a"), TF("length"))], request=COMPLETION)
    assert record.outcome is Outcome.OK
    assert record.end_s == pytest.approx(0.03)  # the read that returned b""


def test_client_reads_rest_of_body_after_done():
    record, response = run([sse(C({"content": "a"}), "[DONE]"), b"trailing", b"more"])
    assert record.outcome is Outcome.OK
    assert response.reads_done == 3  # drained so the connection can be reused
    assert record.end_s == pytest.approx(0.02)


def test_client_tool_call_delta_is_a_token():
    call = {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "get", "arguments": '{"x"'}}]}
    record, _ = run([sse(ROLE, C(call), CF("tool_calls"), "[DONE]")])
    assert record.outcome is Outcome.OK
    assert len(record.token_times_s) == 1
    assert record.first_content_s is None


def test_client_ignores_empty_data_events():
    record, _ = run([b"data:\n\n" + sse(C({"content": "a"}), CF("stop"), "[DONE]")])
    assert record.outcome is Outcome.OK


# ── failures ───────────────────────────────────────────────────────────────
def test_client_http_error_category_from_error_object():
    body = b'{"error":{"message":"model \'other\' is not served","type":"NotFoundError","param":null,"code":404}}'
    record, response = run([body], status=404, content_type="application/json")
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.category == "HTTP 404 NotFoundError"
    assert record.error.message == "model 'other' is not served"
    assert record.error.status == 404
    assert response.closed


def test_client_http_error_category_from_object_error_shape():
    body = b'{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}'
    record, _ = run([body], status=400, content_type="application/json")
    assert record.error is not None
    assert record.error.category == "HTTP 400 BadRequestError"


def test_client_http_error_without_json_keeps_body_as_message():
    record, _ = run([b"<html>Bad Gateway</html>"], status=502, content_type="text/html")
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.category == "HTTP 502"
    assert record.error.message.startswith('"Bad Gateway" (an HTML error page)')


@pytest.mark.parametrize(
    ("status", "retry_after", "expected_s"), [(429, "2", 2.0), (503, "3", 3.0), (429, None, None), (429, "x", None)]
)
def test_client_throttled_reply_keeps_its_retry_after(status, retry_after, expected_s):
    response = FakeResponse([b'{"error": {"message": "slow down"}}'], status, "application/json")
    response.retry_after = retry_after
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(CHAT)
    assert record.outcome is Outcome.THROTTLED
    assert record.retry_after_s == expected_s
    assert record.error is not None
    assert (record.error.category, record.error.status) == (f"HTTP {status}", status)


def test_client_error_category_stays_bounded():
    body = (
        b'{"error":{"message":"internal error, request id 9b2f' + b"x" * 600 + b'",'
        b'"type":"Internal Error 9b2f-11ee","code":"req 42"}}'
    )
    record, _ = run([body], status=500, content_type="application/json")
    assert record.error is not None
    assert record.error.category == "HTTP 500"  # free-text type/code are not labels
    assert len(record.error.message) == 500


def test_client_transport_error_before_headers():
    client = StreamingClient(FakeTransport(TransportError("refused")), clock=StepClock())
    record = client.run(CHAT)
    assert record.outcome is Outcome.TRANSPORT_ERROR
    assert record.error is not None
    assert record.error.category == "transport error: connect/send"
    assert record.error.message == "refused"
    assert record.headers_s is None


def test_client_timeout_before_headers():
    record = StreamingClient(FakeTransport(RequestTimeout("slow")), clock=StepClock()).run(CHAT)
    assert record.outcome is Outcome.TIMEOUT
    assert record.error is not None
    assert record.error.category == "timeout: before headers"


def test_client_idle_timeout_mid_stream_keeps_partial_tokens():
    record, response = run([sse(ROLE, C({"content": "a"})), RequestTimeout("no bytes for 300 s")])
    assert record.outcome is Outcome.TIMEOUT
    assert record.error is not None
    assert record.error.category == "timeout: read idle"
    assert len(record.token_times_s) == 1
    assert response.closed


def test_client_total_timeout():
    reads = [sse(C({"content": "a"})), b": ping\n\n", b": ping\n\n", b": ping\n\n"]
    record, _ = run(reads, total_timeout_s=0.035)
    assert record.outcome is Outcome.TIMEOUT
    assert record.error is not None
    assert record.error.category == "timeout: total"


def test_client_connection_closed_mid_body_is_stream_error():
    record, _ = run([sse(ROLE, C({"content": "a"})), ConnectionClosedError("closed mid-body")])
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert record.error.category == "stream ended before completion"


def test_client_reset_mid_body_is_transport_error():
    record, _ = run([sse(C({"content": "a"})), TransportError("ECONNRESET")])
    assert record.outcome is Outcome.TRANSPORT_ERROR
    assert record.error is not None
    assert record.error.category == "transport error: mid-body"


def test_client_eof_before_finish_is_stream_error():
    record, _ = run([sse(ROLE, C({"content": "a"}), C({"content": "b"}))])
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert record.error.category == "stream ended before completion"
    assert "2 with tokens" in record.error.message


def test_client_body_without_events_names_its_first_bytes():
    record, _ = run([b'{"detail":"oops"}'])
    assert record.error is not None
    assert record.error.category == "stream ended before completion"
    assert "oops" in record.error.message


def test_client_invalid_json_names_an_excerpt():
    record, _ = run([sse(C({"content": "a"}), '{"choices": [tru')])
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert record.error.category == "invalid JSON in stream"
    assert '{"choices": [tru' in record.error.message


def test_client_json_with_surrounding_whitespace_is_accepted():
    # the C scanner fast path gives up on the spaces; json.loads accepts them
    record, _ = run([b'data:  {"choices": [{"index": 0, "delta": {"content": "a"}}]} \n\n', sse(CF("stop"))])
    assert record.outcome is Outcome.OK
    assert len(record.token_times_s) == 1


def test_client_json_with_trailing_data_is_invalid():
    record, _ = run([sse('{"choices": []} {"x": 1}')])
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert record.error.category == "invalid JSON in stream"
    assert "Extra data" in record.error.message


def test_client_unexpected_chunk_shape_is_stream_error():
    record, _ = run([sse('{"choices": [{"delta": "text"}]}')])
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert record.error.category == "unexpected chunk shape"


def test_client_sse_error_event_is_server_error():
    record, _ = run([b'event: error\ndata: {"message": "overloaded"}\n\n'])
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "server error"


def test_client_error_object_mid_stream_stops_reading():
    error = '{"error":{"message":"boom","type":"InternalServerError","code":500}}'
    record, response = run([sse(C({"content": "a"}), error), sse(C({"content": "never"}))])
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "InternalServerError/500"
    assert record.error.status == 200
    assert response.reads_done == 1


def test_client_empty_stream_is_empty_not_success():
    record, _ = run([sse(ROLE, CF("length"), "[DONE]")])
    assert record.outcome is Outcome.EMPTY
    assert record.ttft_s is None
    assert record.end_s is not None


def test_client_cancellation_propagates_after_closing():
    class Cancelled(BaseException):
        pass

    response = FakeResponse([sse(C({"content": "a"})), Cancelled()], 200, "text/event-stream")
    client = StreamingClient(FakeTransport(response), clock=StepClock())
    with pytest.raises(Cancelled):
        client.run(CHAT)
    assert response.closed


# ── non-streamed replies ───────────────────────────────────────────────────
def test_client_non_stream_completion_has_e2e_and_unknown_ttft():
    body = (
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},'
        b'"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}'
    )
    record, _ = run([body[:40], body[40:]], request=NO_STREAM, content_type="application/json")
    assert record.outcome is Outcome.OK
    # clock: t0 0.00, headers 0.01, reads 0.02 and 0.03: the body ended when its last bytes arrived
    assert record.e2e_s == pytest.approx(0.03)
    assert record.ttft_s is None  # a whole reply says nothing about the first token
    assert record.ttfc_s is None
    assert record.completion_tokens == TokenCount(2, TokenSource.SERVER)
    assert record.prompt_tokens == TokenCount(9, TokenSource.SERVER)
    assert record.token_counts is None


def test_client_stream_request_answered_with_json_completion():
    body = b'{"choices":[{"index":0,"text":" yes","finish_reason":"length"}]}'
    record, _ = run([body], request=COMPLETION, content_type="application/json")
    assert record.outcome is Outcome.OK
    assert record.completion_tokens == TokenCount.unknown()  # one body is not a chunk count


def test_client_non_stream_empty_is_empty():
    body = b'{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"length"}]}'
    record, _ = run([body], request=NO_STREAM, content_type="application/json")
    assert record.outcome is Outcome.EMPTY


# ── token precedence ───────────────────────────────────────────────────────
def test_client_server_usage_wins_over_tokenizer():
    counter = WordCounter()
    record, _ = run([sse(C({"content": "a b c"}), CF("stop"), U(5, 7), "[DONE]")], counter=counter)
    assert record.completion_tokens == TokenCount(7, TokenSource.SERVER)
    assert record.prompt_tokens == TokenCount(5, TokenSource.SERVER)
    assert counter.texts == []


def test_client_tokenizer_counts_content_and_reasoning_joined():
    counter = WordCounter()
    reads = [sse(C({"reasoning_content": "think "}), C({"content": "a b"}), CF("stop"), "[DONE]")]
    record, _ = run(reads, counter=counter)
    assert record.completion_tokens == TokenCount(3, TokenSource.TOKENIZER)
    assert record.prompt_tokens == TokenCount(2, TokenSource.TOKENIZER)
    assert counter.texts == ["think a b", "hello world"]


def test_client_chunk_count_without_usage_or_tokenizer():
    record, _ = run([sse(C({"content": "a b"}), C({"content": "c"}), CF("stop"), "[DONE]")])
    assert record.completion_tokens == TokenCount(2, TokenSource.CHUNKS)
    assert record.prompt_tokens == TokenCount.unknown()


def test_client_token_counts_need_usage_on_every_token_chunk():
    with_usage = C({"content": "a"})[:-1] + ',"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}'
    record, _ = run([sse(with_usage, C({"content": "b"}), CF("stop"), U(1, 4), "[DONE]")])
    assert record.completion_tokens.value == 4
    assert record.token_counts is None


def test_client_non_streamed_reply_has_e2e_but_no_ttft_itl_or_tpot():
    body = (
        b'{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
        b'"content":"one two three"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":3}}'
    )
    record, _ = run([body], request=NO_STREAM, content_type="application/json")
    assert record.outcome is Outcome.OK
    assert record.streamed is False
    assert record.e2e_s is not None
    assert (record.ttft_s, record.ttfc_s, record.tpot_s) == (None, None, None)
    assert record.itl_samples_s() == []
    assert record.completion_tokens == TokenCount(3, TokenSource.SERVER)


# ── arrival times from read lags ───────────────────────────────────────────
class LaggedResponse(FakeResponse):
    """Plays reads with the lag and stamp flag each one reports."""

    def __init__(self, reads: Sequence[tuple[bytes, float, bool]]) -> None:
        super().__init__([data for data, _, _ in reads], 200, "text/event-stream")
        self._lags = [(lag, stamped) for _, lag, stamped in reads]

    def read_some(self) -> bytes:
        data = super().read_some()
        if data:
            self.read_lag_s, self.read_stamped = self._lags[self.reads_done - 1]
            self.read_age_s = self.read_lag_s
        return data


def test_client_times_each_read_when_its_bytes_arrived():
    # clock: connect 0.00, t0 0.01, headers 0.02, reads at 0.03, 0.04, 0.05 (relative 0.02, 0.03, 0.04)
    response = LaggedResponse(
        [(sse(T("a")), 0.015, True), (sse(T(" b")), 0.001, True), (sse(TF("length"), "[DONE]"), 0.0, False)]
    )
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(COMPLETION)
    assert record.outcome is Outcome.OK
    assert record.token_times_s == pytest.approx([0.02 - 0.015, 0.03 - 0.001])
    # each stamped read ends one event: its stamp is that event's own arrival, so no time is off
    assert record.read_lags_s == [0.0, 0.0]
    assert record.unstamped_reads == 1
    assert record.connect_s == pytest.approx(0.01)


def test_issue19_client_times_a_read_by_its_newest_bytes_and_keeps_the_lag_of_its_oldest():
    # A read that ended several events queued behind a late client: its bytes are timed by
    # the newest stamp (read_age_s), and the lag kept is the bound that covers the oldest.
    class TwoClocks(FakeResponse):
        def __init__(self) -> None:
            super().__init__([sse(T("a"), T(" b")), sse(TF("length"), "[DONE]")], 200, "text/event-stream")
            self.read_stamped = True

        def read_some(self) -> bytes:
            data = super().read_some()
            if data:
                self.read_age_s, self.read_lag_s = ((0.002, 0.030), (0.0, 0.0))[self.reads_done - 1]
            return data

    record = StreamingClient(FakeTransport(TwoClocks()), clock=StepClock()).run(COMPLETION)
    assert record.outcome is Outcome.OK
    # the first read returned at 0.02 after the send: both tokens at 0.02 - 0.002
    assert record.token_times_s == pytest.approx([0.018, 0.018])
    assert record.read_lags_s == pytest.approx([0.030, 0.0])


class FirstAges(FakeResponse):
    """Stamped reads, each with its (read_age_s, read_first_age_s, read_lag_s)."""

    def __init__(self, reads: Sequence[bytes], ages: Sequence[tuple[float, float, float]]) -> None:
        super().__init__(reads, 200, "text/event-stream")
        self.read_stamped = True
        self._ages = list(ages)

    def read_some(self) -> bytes:
        data = super().read_some()
        if data:
            self.read_age_s, self.read_first_age_s, self.read_lag_s = self._ages[self.reads_done - 1]
        return data


def test_issue19_a_first_token_that_begins_a_merged_read_is_timed_by_the_poll_that_found_it():
    # The first read holds three token events merged behind the first (stamp: the newest, age
    # 2 ms); the poll that found the socket readable returned 25 ms before the read did
    # (read_first_age_s): the first token is timed then, the two later ones by the stamp.
    response = FirstAges(
        [sse(T("a"), T(" b"), T(" c")), sse(TF("length"), "[DONE]")], [(0.002, 0.025, 0.030), (0.0, 0.0, 0.0)]
    )
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(COMPLETION)
    assert record.outcome is Outcome.OK
    # the first read returned 0.02 after the send
    assert record.token_times_s == pytest.approx([0.0, 0.018, 0.018])  # 0.02 - 0.025 < the send: never before it
    assert record.ttft_s == pytest.approx(0.0)
    response = FirstAges(
        [sse(T("a"), T(" b"), T(" c")), sse(TF("length"), "[DONE]")], [(0.002, 0.015, 0.030), (0.0, 0.0, 0.0)]
    )
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(COMPLETION)
    assert record.token_times_s == pytest.approx([0.005, 0.018, 0.018])
    assert record.ttfc_s == pytest.approx(0.005)
    assert record.read_lags_s == pytest.approx([0.030, 0.0])  # the lag still covers the oldest byte
    # a role-only event read first, then a read that begins with the first token: timed by its poll,
    # never before the previous read
    reads = [sse(ROLE), sse(T("a"), T(" b")), sse(TF("length"), "[DONE]")]
    ages = [(0.001, 0.001, 0.001), (0.002, 0.006, 0.030), (0.0, 0.0, 0.0)]
    record = StreamingClient(FakeTransport(FirstAges(reads, ages)), clock=StepClock()).run(CHAT)
    assert record.token_times_s == pytest.approx([0.024, 0.028])


@pytest.mark.parametrize(
    ("reads", "why"),
    [
        ([sse(ROLE) + sse(T("a"), T(" b")), sse(TF("length"), "[DONE]")], "a role-only event begins the read"),
        ([sse(T("a"))[:9], sse(T("a"))[9:] + sse(T(" b")), sse(TF("length"), "[DONE]")], "the read ends an event"),
    ],
)
def test_issue19_the_poll_times_only_a_first_token_that_begins_its_read(reads, why):
    # Only the first bytes of a read are known to have arrived by the poll: a first token
    # after other events of the read, or completing an event begun in an earlier read, keeps
    # the stamp (late at worst, never early).
    ages = [(0.001, 0.001, 0.001)] * (len(reads) - 2) + [(0.002, 0.015, 0.030), (0.0, 0.0, 0.0)]
    record = StreamingClient(FakeTransport(FirstAges(reads, ages)), clock=StepClock()).run(CHAT)
    assert record.outcome is Outcome.OK, why
    first_read_s = 0.02 + 0.01 * (len(reads) - 2)  # when the read that holds the first token returned
    assert record.token_times_s[0] == pytest.approx(first_read_s - 0.002), why


def test_issue19_a_one_event_read_with_bytes_of_the_next_event_keeps_the_lag_of_its_oldest():
    # One read completes the first event and carries the start of the next: those later
    # bytes may be a later segment's, whose stamp the read then has (read_age_s). The
    # first event's time may be late by up to the lag, so the lag is kept, not the age.
    second = sse(T(" b"))

    class CutEvent(FakeResponse):
        def __init__(self) -> None:
            reads = [sse(T("a")) + second[:20], second[20:], sse(TF("length"), "[DONE]")]
            super().__init__(reads, 200, "text/event-stream")
            self.read_stamped = True

        def read_some(self) -> bytes:
            data = super().read_some()
            if data:
                self.read_age_s, self.read_lag_s = ((0.002, 0.030), (0.001, 0.004), (0.0, 0.0))[self.reads_done - 1]
            return data

    record = StreamingClient(FakeTransport(CutEvent()), clock=StepClock()).run(COMPLETION)
    assert record.outcome is Outcome.OK
    assert record.token_times_s == pytest.approx([0.018, 0.029])
    # the first read's lag bounds its event's error; the second ends one event, its own stamp: exact
    assert record.read_lags_s == pytest.approx([0.030, 0.0, 0.0])


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n"])
def test_a_one_event_read_that_ends_at_its_blank_line_is_timed_by_its_own_stamp(end):
    # LF or CRLF line ends: a read of one whole event and nothing past it has no lag (its
    # stamp is that event's own segment: exact), however late the socket was last empty.
    def event(text: str) -> bytes:
        return sse(T(text)).rstrip(b"\n") + end

    class OneEventReads(FakeResponse):
        def __init__(self) -> None:
            super().__init__([event("a"), event(" b"), sse(TF("length"), "[DONE]")], 200, "text/event-stream")
            self.read_stamped = True

        def read_some(self) -> bytes:
            data = super().read_some()
            if data:
                self.read_age_s, self.read_lag_s = ((0.002, 0.030), (0.001, 0.020), (0.0, 0.0))[self.reads_done - 1]
            return data

    record = StreamingClient(FakeTransport(OneEventReads()), clock=StepClock()).run(COMPLETION)
    assert record.outcome is Outcome.OK
    assert record.read_lags_s == [0.0, 0.0, 0.0]


def test_client_arrival_times_never_go_back():
    # The second read's bytes are stamped earlier than the first's once mapped to our
    # clock (a coalesced segment read in two parts, the clocks sampled ~0.1 us apart):
    # token times stay in order, so no ITL sample is negative (both tokens at one instant:
    # no time between them to measure, so no ITL sample and no TPOT rather than 0).
    response = LaggedResponse(
        [(sse(T("a")), 0.0, True), (sse(T(" b")), 0.02, True), (sse(TF("length"), "[DONE]"), 0.0, True)]
    )
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(COMPLETION)
    assert record.outcome is Outcome.OK
    assert record.token_times_s == pytest.approx([0.02, 0.02])
    assert all(gap >= 0.0 for gap in record.itl_samples_s())
    assert record.itl_samples_s() == []
    assert record.tpot_s is None


def test_client_reads_plain_token_deltas_without_json_and_keeps_every_text():
    texts = ["Hello", ' "quoted"', " back\\slash", " tab\there", " ünïcödé", " \u2028sep", " plain", " again"]
    stream = b"".join(sse(T(text)) for text in texts) + sse(TF("length"), "[DONE]")
    record = StreamingClient(
        FakeTransport(FakeResponse([stream[i : i + 7] for i in range(0, len(stream), 7)], 200, "text/event-stream")),
        clock=StepClock(),
        keep_text=True,
    ).run(COMPLETION)
    assert record.outcome is Outcome.OK
    assert record.output_text == "".join(texts)
    assert len(record.token_times_s) == len(texts)
    assert record.first_content_s == record.token_times_s[0]


def test_client_template_follows_a_server_that_changes_the_chunk_id():
    other = T(" two").replace('"c1"', '"c2"')
    stream = sse(T("one"), T(" three"), other, TF("length"), "[DONE]")
    record = StreamingClient(
        FakeTransport(FakeResponse([stream], 200, "text/event-stream")), clock=StepClock(), keep_text=True
    ).run(COMPLETION)
    assert record.output_text == "one three two"
    assert len(record.token_times_s) == 3


def test_client_reasoning_deltas_through_the_template_are_not_content():
    stream = sse(
        ROLE,
        C({"reasoning_content": "think"}),
        C({"reasoning_content": " more"}),
        C({"content": "ok"}),
        CF("stop"),
        "[DONE]",
    )
    record = StreamingClient(
        FakeTransport(FakeResponse([stream], 200, "text/event-stream")), clock=StepClock(), keep_text=True
    ).run(CHAT)
    assert record.outcome is Outcome.OK
    assert len(record.token_times_s) == 3
    assert record.output_text == "think moreok"
    assert record.first_content_s is not None
    assert record.ttfc_s == record.token_times_s[2]


def _template(payload: str):
    obj = json.loads(payload)
    return DeltaTemplate.learn(payload, obj, parse_chunk(obj), vars(json.JSONDecoder())["scan_once"])


def test_delta_template_reads_the_text_between_the_learned_surroundings():
    template = _template(T("one"))
    assert template is not None
    assert template.match(T(" two")) == " two"
    assert template.match(T(' "two"')) is None  # escapes: the JSON decoder reads it
    assert template.match(T("")) is None
    assert template.match(TF("stop")) is None
    assert template.match(T(" two").replace('"c1"', '"c2"')) is None


def test_delta_template_is_not_learned_from_ambiguous_or_final_deltas():
    assert _template(T("c1")) is None  # the text also appears as the id
    assert _template(T('say "hi"')) is None  # escaped by the encoder
    assert _template(TF("stop")) is None
    assert _template(TU("one", 1, None)) is None  # usage changes from chunk to chunk


def test_nc09_client_bare_503_without_retry_after_is_an_http_error_not_throttling():
    response = FakeResponse([b"<html>no healthy upstream</html>"], 503, "text/html")
    response.retry_after = None
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(CHAT)
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.retry_after_s is None
    assert record.error is not None
    assert (record.error.category, record.error.status) == ("HTTP 503", 503)


# The Content-Encoding header names a compressed stream, whatever the compression.
@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate"])
def test_client_compressed_stream_names_its_content_encoding(encoding):
    response = FakeResponse([b"\x8b\x00\x10\xff\x01garbled"], 200, "text/event-stream")
    response.headers = {"Content-Encoding": encoding}
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(CHAT)
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert f"(Content-Encoding: {encoding}): turn compression off" in record.error.message


# NC-21: after [DONE] the rest of the body is drained for DRAIN_S at most, then the connection is the transport's.
def test_nc21_client_drains_for_a_bounded_time_after_done():
    from llmload.request.client import DRAIN_S

    response = FakeResponse(
        [sse(ROLE, C({"content": "a"}), CF("stop"), "[DONE]"), b": ping\n\n"], 200, "text/event-stream"
    )
    record = StreamingClient(FakeTransport(response), clock=StepClock()).run(CHAT)
    assert record.outcome is Outcome.OK
    assert response.drained_within_s == DRAIN_S
    assert 0 < DRAIN_S <= 0.01
    assert response.closed


def test_client_cached_prompt_tokens_above_the_prompt_are_not_a_figure_but_a_usage_check():
    """usage says 50 cached of 5 prompt tokens (1000% cached): not added up, noted as cached_above_prompt."""
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 50}}
    chunk = json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    record, _ = run([sse(C({"content": "a"}), CF("stop"), chunk, "[DONE]")])
    assert record.outcome is Outcome.OK
    assert record.prompt_tokens == TokenCount(5, TokenSource.SERVER)
    assert record.cached_prompt_tokens is None
    assert UsageNote.CACHED_ABOVE_PROMPT in record.usage_notes
    fine = dict(usage, prompt_tokens_details={"cached_tokens": 4})
    chunk = json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": fine})
    record, _ = run([sse(C({"content": "a"}), CF("stop"), chunk, "[DONE]")])
    assert (record.cached_prompt_tokens, record.usage_notes) == (4, ())


@pytest.mark.parametrize(
    ("details", "reasoning", "cached"),
    [
        ({"completion_tokens_details": {"reasoning_tokens": "lots"}}, None, 3),
        ({"completion_tokens_details": {"reasoning_tokens": -2}}, None, 3),
        (
            {"completion_tokens_details": {"reasoning_tokens": 0}, "prompt_tokens_details": {"cached_tokens": 2.5}},
            0,
            None,
        ),
    ],
)
def test_client_usage_detail_that_is_not_a_count_is_unknown_and_a_usage_check(details, reasoning, cached):
    """Issue 24: a reasoning (or cached) usage detail that is not a count was dropped silently, while a bad
    prompt_tokens fails the stream. Now: the detail is unknown (None, never 0), the reply still succeeds
    (its counts are readable) and carries the usage_detail_unreadable check."""
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 3}, **details}
    chunk = json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    record, _ = run([sse(C({"content": "a"}), CF("stop"), chunk, "[DONE]")])
    assert record.outcome is Outcome.OK
    assert record.completion_tokens == TokenCount(1, TokenSource.SERVER)
    assert (record.reasoning_tokens, record.cached_prompt_tokens) == (reasoning, cached)
    assert record.usage_notes == (UsageNote.DETAIL_UNREADABLE,)


def test_client_usage_detail_unreadable_in_the_last_usage_forgets_an_earlier_value():
    """Cumulative usage on every chunk: the last one's unreadable reasoning count is unknown, not the earlier 1."""
    first = {"prompt_tokens": 5, "completion_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 1}}
    last = {"prompt_tokens": 5, "completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": "2"}}
    chunks = [json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": u})
              for u in (first, last)]  # fmt: skip
    record, _ = run([sse(C({"content": "a"}), chunks[0], C({"content": "b"}), CF("stop"), chunks[1], "[DONE]")])
    assert record.outcome is Outcome.OK
    assert record.reasoning_tokens is None
    assert UsageNote.DETAIL_UNREADABLE in record.usage_notes


def test_client_readable_usage_details_carry_no_unreadable_check():
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 0}}
    chunk = json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    record, _ = run([sse(C({"content": "a"}), CF("stop"), chunk, "[DONE]")])
    assert (record.reasoning_tokens, record.usage_notes) == (0, ())
