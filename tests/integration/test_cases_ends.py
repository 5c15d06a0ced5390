"""Issue 18, streams that end oddly and replies that are not what was asked (NC-21, NC-27, NC-31, error pages).

Over real HTTP: ScriptedServer → GeventHTTPTransport → StreamingClient; the
run-level cases run in process: ``tests/edge/test_cases_ends.py``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import replace

import pytest

from llmload.net.transport import GeventHTTPTransport
from llmload.request.client import DRAIN_S, FINISH_WAIT_S, ReplyEnd, StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.request.record import Outcome, TokenSource
from llmload.settings.config import Timeouts
from llmload.testing import (
    CF,
    ROLE,
    C,
    Ending,
    Framing,
    ReceivedRequest,
    Reply,
    ScriptedServer,
    SendLog,
    U,
    W,
    json_reply,
    sse,
)

pytestmark = [pytest.mark.integration]

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
HOLD_MS = 15_000  # the server holds the body this long after [DONE]
CHAT = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)


def _client(url: str) -> tuple[StreamingClient, GeventHTTPTransport]:
    transport = GeventHTTPTransport(url, headers={}, timeouts=Timeouts(connect_s=5, idle_s=30, total_s=60))
    return StreamingClient(transport), transport


def _normal_writes() -> list[W]:
    return [W(10, sse(ROLE)), W(30, sse(C({"content": "Hi"}))), W(40, sse(C({"content": " there"})))]


# ── NC-21: the body stays open after [DONE] ──────────────────────────────
def _held_open(pings: bool) -> Reply:
    writes = [*_normal_writes(), W(50, sse(CF("stop"), U(5, 2), "[DONE]"))]
    if pings:  # a proxy's keep-alive comments every second after [DONE]
        writes += [W(50 + 1000 * s, b": ping\n\n") for s in range(1, HOLD_MS // 1000)]
    writes.append(W(50 + HOLD_MS, b""))  # nothing more; then the terminating zero-length chunk
    return Reply(writes=writes)


@pytest.mark.parametrize("pings", [False, True], ids=["silent", "ping-every-second"])
def test_nc21_body_held_open_after_done_does_not_hold_the_user(gevent_ready, pings):
    with ScriptedServer(_held_open(pings)) as srv:
        client, transport = _client(srv.base_url)
        try:
            started = time.perf_counter()
            records = [client.run(CHAT) for _ in range(3)]
            elapsed_s = time.perf_counter() - started
        finally:
            transport.close()
        received, connections = len(srv.requests), srv.connections_accepted
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert [r.completion_tokens.value for r in records] == [2, 2, 2]
    for record in records:
        assert record.e2e_s is not None
        assert 0.045 < record.e2e_s < 0.1  # ends at [DONE] (50 ms), not when the body ends
    # each request starts at once: 3 x (50 ms + a drain bounded by DRAIN_S), far below one 15 s hold
    assert elapsed_s < 1.5, f"3 requests took {elapsed_s:.2f} s: the user waited for the held body"
    assert received == 3
    assert connections == 3  # a body still open after the drain loses its connection


@pytest.mark.parametrize("usage", [True, False], ids=["usage", "no-usage"])  # without: only [DONE] ends it
@pytest.mark.parametrize(
    "done",
    [b"data: [DONE]\n", b"data: [DONE]", b"data:[DONE]\r\n", b"data: [DONE] \n", b"data:  [DONE]", b"data: [DONE]\t"],
    ids=["lf", "none", "crlf", "space-lf", "two-spaces-none", "tab-none"],
)
def test_nc21_done_without_its_blank_line_then_held_open_ends_the_reply(gevent_ready, done, usage):
    last = sse(CF("stop"), U(5, 2)) if usage else sse(CF("stop"))
    writes = [*_normal_writes(), W(50, last + done), W(50 + HOLD_MS, b"")]
    with ScriptedServer(Reply(writes=writes)) as srv:
        client, transport = _client(srv.base_url)
        try:
            started = time.perf_counter()
            records = [client.run(CHAT) for _ in range(2)]
            elapsed_s = time.perf_counter() - started
        finally:
            transport.close()
    assert [r.outcome for r in records] == [Outcome.OK] * 2, records[0].error
    assert [r.completion_tokens.value for r in records] == [2, 2]
    assert elapsed_s < 1.0


def test_nc21_body_that_ends_after_done_keeps_the_connection(gevent_ready):
    reply = Reply(writes=[*_normal_writes(), W(50, sse(CF("stop"), U(5, 2), "[DONE]"))])
    with ScriptedServer(reply) as srv:
        client, transport = _client(srv.base_url)
        try:
            records = [client.run(CHAT) for _ in range(3)]
        finally:
            transport.close()
        connections = srv.connections_accepted
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert connections == 1
    assert DRAIN_S <= 0.01  # "a few ms"


def test_nc21_end_of_body_a_moment_after_done_still_keeps_the_connection(gevent_ready):
    # the zero-length chunk comes in its own write, 1 ms after [DONE]: within the drain
    reply = Reply(writes=[*_normal_writes(), W(50, sse(CF("stop"), U(5, 2), "[DONE]")), W(51, b"")])
    with ScriptedServer(reply) as srv:
        client, transport = _client(srv.base_url)
        try:
            records = [client.run(CHAT) for _ in range(3)]
        finally:
            transport.close()
        connections = srv.connections_accepted
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert connections == 1


def _route(post_reply: Reply):
    def reply(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, MODELS) if request.path == "/v1/models" else json_reply(404, "{}")
        return post_reply

    return reply


# ── NC-21 kinds: no [DONE], the body held open after the reply is complete ──
def _held_after(tail: list[bytes]) -> Reply:
    writes = [*_normal_writes(), *(W(50, data) for data in tail), W(50 + HOLD_MS, b"")]
    return Reply(writes=writes)


def _run_three(reply: Reply, logs: list[SendLog] | None = None) -> tuple[list, float, int, list[object]]:
    """Three requests on one transport; ``logs``, when given, gets the server's send log of each."""
    with ScriptedServer(reply) as srv:
        client, transport = _client(srv.base_url)
        try:
            started = time.perf_counter()
            records, ends = [], []
            for _ in range(3):
                records.append(client.run(CHAT))
                ends.append(client.reply_end)
            elapsed_s = time.perf_counter() - started
        finally:
            transport.close()
        connections = srv.connections_accepted
        if logs is not None:
            logs.extend(srv.send_log(i) for i in range(3))
    return records, elapsed_s, connections, ends


def test_nc21_kind_hold_nodone_usage_chunk_ends_the_reply(gevent_ready):
    # finish chunk, then the usage chunk with "choices": [] (stream_options.include_usage), no [DONE], held 15 s
    records, elapsed_s, connections, ends = _run_three(_held_after([sse(CF("stop"), U(5, 2))]))
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert [r.completion_tokens.value for r in records] == [2, 2, 2]
    assert [r.completion_tokens.source for r in records] == [TokenSource.SERVER] * 3
    for record in records:
        assert record.e2e_s is not None
        assert 0.045 < record.e2e_s < 0.1  # ends at the usage chunk (50 ms), not at the end of the body
    assert ends == [ReplyEnd.USAGE] * 3
    assert elapsed_s < 1.5, f"3 requests took {elapsed_s:.2f} s: the user waited for the held body"
    assert connections == 3  # a body still open after the drain loses its connection


def test_nc21_kind_hold_nodone_usage_then_done_within_the_drain_keeps_the_connection(gevent_ready):
    reply = Reply(writes=[*_normal_writes(), W(50, sse(CF("stop"), U(5, 2))), W(51, sse("[DONE]"))])
    records, _, connections, ends = _run_three(reply)
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert set(ends) <= {ReplyEnd.USAGE, ReplyEnd.DONE}  # [DONE] 1 ms later may come in the same read
    assert all(0.045 < (r.e2e_s or 0) < 0.1 for r in records)
    assert connections == 1  # [DONE] and the end of the body came within the drain


def test_nc21_kind_hold_nodone_finish_without_usage_is_bounded(gevent_ready):
    records, elapsed_s, connections, ends = _run_three(_held_after([sse(CF("stop"))]))
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert [r.finish_reason for r in records] == ["stop"] * 3
    for record in records:
        assert record.e2e_s is not None
        assert 0.045 < record.e2e_s < 0.3  # E2E at the finish chunk (50 ms); not the 1 s wait after it
    assert ends == [ReplyEnd.FINISH_WAIT] * 3
    assert 3 * FINISH_WAIT_S <= elapsed_s < 3 * (FINISH_WAIT_S + 0.5), elapsed_s  # bounded, not 3 x 15 s
    assert connections == 3


def test_nc21_kind_hold_nodone_finish_then_usage_later_is_still_read(gevent_ready):
    # the usage chunk comes 300 ms after the finish chunk (within FINISH_WAIT_S): it is counted
    reply = Reply(writes=[*_normal_writes(), W(50, sse(CF("stop"))), W(350, sse(U(5, 7))), W(50 + HOLD_MS, b"")])
    records, elapsed_s, _, ends = _run_three(reply)
    assert elapsed_s < 3 * 0.4 + 1.0  # no 15 s hold
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert [r.completion_tokens.value for r in records] == [7, 7, 7]
    assert all(0.33 < (r.e2e_s or 0) < 0.4 for r in records)
    assert ends == [ReplyEnd.USAGE] * 3


def test_nc32_kind_finish_on_every_chunk_is_read_on_to_done(gevent_ready):
    stop = (
        '{"id":"c1","object":"chat.completion.chunk",'
        '"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":"stop"}]}'
    )
    writes = [W(10, sse(ROLE))] + [W(10 + 200 * i, sse(stop % f"t{i}")) for i in range(1, 8)]
    writes.append(W(1700, sse(U(5, 7), "[DONE]")))
    records, _, _, ends = _run_three(Reply(writes=writes))
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert [len(r.token_times_s) for r in records] == [7, 7, 7]  # gaps of 200 ms, 1.4 s from first to last
    assert [r.completion_tokens.value for r in records] == [7, 7, 7]
    assert ends == [ReplyEnd.DONE] * 3


def test_nc21_kind_continuous_usage_on_every_chunk_is_read_on_to_done(gevent_ready):
    # vLLM continuous_usage_stats: usage on every chunk (choices non-empty), then the final usage chunk and [DONE]
    chunk = (
        '{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"},'
        '"finish_reason":%s}],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}'
    )
    writes = [W(10 + 20 * i, sse(chunk % (f"t{i}", "null", i, 5 + i))) for i in range(1, 4)]
    # [DONE] 20 ms after the usage chunk: 5 ms apart, a machine that held the client that long (CI's coverage
    # pass beside its edge tests, once) merged the two into one read, which then ends at [DONE]
    writes += [W(80, sse(chunk % ("t4", '"stop"', 4, 9))), W(90, sse(U(5, 4))), W(110, sse("[DONE]"))]
    records, _, _, ends = _run_three(Reply(writes=writes))
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert [r.completion_tokens.value for r in records] == [4, 4, 4]
    assert ends == [ReplyEnd.USAGE] * 3  # the final usage chunk; [DONE] 20 ms later is drained or dropped
    assert all(0.085 < (r.e2e_s or 0) < 0.13 for r in records)  # the usage chunk at 90 ms (or [DONE] with it)


# ── close_after_finish: the connection closes right after the finish (no last chunk, no [DONE]) ──
@pytest.mark.parametrize("usage", [True, False], ids=["finish-usage", "finish-only"])
def test_nc21_kind_close_after_finish_is_the_end_of_the_reply(gevent_ready, usage):
    last = sse(CF("stop"), U(5, 2)) if usage else sse(CF("stop"))
    reply = Reply(writes=[*_normal_writes(), W(50, last)], ending=Ending.CLOSE)
    logs: list[SendLog] = []
    records, _, connections, ends = _run_three(reply, logs)
    assert [r.outcome for r in records] == [Outcome.OK] * 3, records[0].error
    assert [r.completion_tokens.source for r in records] == [TokenSource.SERVER if usage else TokenSource.CHUNKS] * 3
    # the last write (scripted at 50 ms) ends it, not FINISH_WAIT_S (1 s) later: within 50 ms of when the
    # server really wrote it (CI's coverage pass beside its edge tests once held the in-process server
    # thread past the scripted time)
    for record, log in zip(records, logs, strict=True):
        written_s = log.writes_s[-1] - log.arrived_s
        assert 0.045 < (record.e2e_s or 0) < written_s + 0.05
    assert ends == [ReplyEnd.USAGE if usage else ReplyEnd.CLOSE] * 3
    assert connections == 3  # not reused


@pytest.mark.parametrize("tail", [b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}'])
def test_nc21_kind_close_after_finish_flushes_the_pending_event(gevent_ready, tail):
    reply = Reply(writes=[*_normal_writes(), W(50, sse(CF("stop")) + tail)], ending=Ending.CLOSE)
    records, _, _, ends = _run_three(reply)
    assert [r.outcome for r in records] == [Outcome.OK] * 3, records[0].error
    assert [r.completion_tokens.value for r in records] == [2, 2, 2]  # the pending usage event was read
    assert ends == [ReplyEnd.CLOSE] * 3


def test_nc21_kind_close_mid_event_after_finish_stays_a_failure(run_scripted):
    writes = [*_normal_writes(), W(50, sse(CF("stop")) + b'data: {"id":"c1","choices":[],"usa')]
    record = run_scripted(Reply(writes=writes, ending=Ending.CLOSE)).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "cut short" in record.error.message
    assert "finish_reason 'stop'" in record.error.message


def test_nc21_kind_close_before_any_finish_stays_a_failure(run_scripted):
    record = run_scripted(Reply(writes=_normal_writes(), ending=Ending.CLOSE)).record
    assert record.outcome is Outcome.TRANSPORT_ERROR or record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "closed mid-body" in record.error.message
    assert "no finish_reason" in record.error.message


# ── NC-27: the last event is not ended by a blank line ───────────────────
def _unterminated_last_event(tail: bytes) -> Reply:
    last = CF("stop")[:-1] + ',"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}'
    writes = [W(20, sse(ROLE)), W(30, sse(C({"content": "Hi"}))), W(40, sse(C({"content": " there"})))]
    return Reply(writes=[*writes, W(50, b"data: " + last.encode() + tail)])


@pytest.mark.parametrize("tail", [b"\n", b"", b"\r\n"], ids=["lf-only", "no-line-end", "crlf-only"])
def test_nc27_last_event_without_blank_line_is_dispatched(run_scripted, tail):
    run = run_scripted(_unterminated_last_event(tail))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.finish_reason == "stop"
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.prompt_tokens.value == 5
    assert record.ttft_s == run.at(30)


@pytest.mark.parametrize("tail", [b"\n", b"", b"\r\n"], ids=["lf-only", "no-line-end", "crlf-only"])
def test_nc27_last_event_without_blank_line_then_a_close_is_dispatched(run_scripted, tail):
    # found by a new-user run: the finish and usage came in that last event, yet the close was judged
    # before it was read ("closed mid-body ... no finish_reason")
    run = run_scripted(replace(_unterminated_last_event(tail), ending=Ending.CLOSE))
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.finish_reason == "stop"
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.e2e_s == run.at(50)


def test_nc27_kind_cut_event_then_a_close_before_any_finish_says_closed_mid_body(run_scripted):
    writes = [W(20, sse(ROLE)), W(30, sse(C({"content": "Hi"}))), W(40, b'data: {"id":"c1","choices":[{"ind')]
    record = run_scripted(Reply(writes=writes, ending=Ending.CLOSE)).record
    assert record.outcome in (Outcome.TRANSPORT_ERROR, Outcome.STREAM_ERROR)
    assert record.error is not None
    assert "closed mid-body" in record.error.message
    assert "seen: 2 events (1 with tokens)" in record.error.message  # the cut one is not counted
    assert "no finish_reason" in record.error.message


@pytest.mark.parametrize("done", [b"data: [DONE] \n\n", b"data:  [DONE]\n\n", b"data: [DONE]\t\r\n\r\n"])
def test_nc27_kind_done_with_whitespace_around_it_ends_the_reply(run_scripted, done):
    # found by a new-user run: "data: [DONE] " failed a finished reply as invalid JSON; openai-python
    # ends the stream at any data field that starts with [DONE]
    writes = [*_normal_writes(), W(50, sse(CF("stop"), U(5, 2)) + done)]
    record = run_scripted(Reply(writes=writes)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 2


def test_nc27_cut_short_last_event_says_so_and_what_was_seen(run_scripted):
    writes = [W(20, sse(ROLE)), W(30, sse(C({"content": "Hi"}))), W(40, b'data: {"id":"c1","choices":[{"ind')]
    record = run_scripted(Reply(writes=writes)).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    message = record.error.message
    assert "not terminated by a blank line" in message
    assert "seen: 3 events (1 with tokens)" in message  # the cut-short one counted: it was received
    assert "no finish_reason" in message
    assert "no [DONE]" in message
    assert "body ended" in message


@pytest.mark.parametrize("ending", ["close", "clean"])
def test_nc27_stream_failure_messages_say_what_was_seen(run_scripted, ending):
    writes = [W(20, sse(ROLE)), W(30, sse(C({"content": "Hi"}))), W(40, sse(C({"content": " there"})))]
    reply = Reply(writes=writes, ending=Ending.CLOSE if ending == "close" else Ending.COMPLETE)
    record = run_scripted(reply).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    size = sum(len(w.data) for w in writes)
    message = record.error.message
    assert f"seen: 3 events (2 with tokens), {size} bytes, no finish_reason, no [DONE]" in message
    assert ("body not ended" if ending == "close" else "body ended") in message


# ── error pages from proxies ─────────────────────────────────────────────
_NGINX_413 = (
    b"<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    b"<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
_CLOUDFLARE_502 = (
    b'<!DOCTYPE html>\n<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> <![endif]-->\n'
    b'<html lang="en-US"><head><title>api.example.com | 502: Bad gateway</title>'
    b'<meta charset="UTF-8" /><style>body{margin:0}</style><script>window._cf="<title>x</title>"</script></head>'
    b'<body><div id="cf-wrapper"><h1><span class="inline-block">Bad gateway</span>'
    b'<span class="code-label">Error code 502</span></h1></div></body></html>'
)
_HAPROXY_504 = b"<html><body><h1>504 Gateway Time-out</h1>\nThe server didn't respond in time.\n</body></html>\n"
_ENVOY_503 = b"upstream connect error or disconnect/reset before headers. reset reason: connection failure"


_PAGES = {
    "nginx-413": (413, _NGINX_413, "text/html", "nginx/1.25.3", '"413 Request Entity Too Large" (an HTML error page'),
    "cloudflare-502": (
        502,
        _CLOUDFLARE_502,
        "text/html",
        "cloudflare",
        '"api.example.com | 502: Bad gateway" (an HTML error page',
    ),
    "haproxy-504": (504, _HAPROXY_504, "text/html", None, '"504 Gateway Time-out" (an HTML error page)'),
    "envoy-503": (
        503,
        _ENVOY_503,
        "text/plain",
        "envoy",
        '"upstream connect error or disconnect/reset before headers.',
    ),
}


@pytest.mark.parametrize("page", list(_PAGES))
def test_proxy_error_pages_become_one_line(run_scripted, page):
    status, body, ctype, server, expected = _PAGES[page]
    headers = {"Content-Type": ctype} | ({"Server": server} if server else {})
    reply = Reply(writes=[W(5, body)], status=status, headers=headers, framing=Framing.CONTENT_LENGTH)
    run = run_scripted(reply)
    record = run.record
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.category == f"HTTP {status}"
    message = record.error.message
    assert message.startswith(expected)
    assert "\n" not in message
    assert "<" not in message.replace(expected, "")  # no markup beyond a title that had none
    assert "style" not in message
    assert "script" not in message
    if server:
        assert f"Server: {server}" in message
    if status == 413:
        assert f"the request body was {len(run.requests[0].body):,} bytes" in message


# ── NC-31: stream: true answered with one JSON body ──────────────────────
_COMPLETION = json.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi there, you"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
    }
)


def test_nc31_streamed_request_answered_with_one_json_body(run_scripted):
    run = run_scripted(json_reply(200, _COMPLETION, at_ms=400))
    record = run.record
    assert run.requests[0].json()["stream"] is True
    assert record.outcome is Outcome.OK
    assert record.streamed is False
    assert record.completion_tokens.value == 4
    assert record.completion_tokens.source is TokenSource.SERVER
    assert (record.ttft_s, record.tpot_s) == (None, None)
    assert record.itl_samples_s() == []
    assert record.e2e_s is not None
    assert record.e2e_s == pytest.approx(0.4, abs=0.05)


# ── NC-21 kind on a JSON reply: the body stays open after the whole JSON ──
def _json_held_open(ctype: str, after: bytes) -> Reply:
    headers = {"Content-Type": ctype} if ctype else {}
    writes = [W(50, _COMPLETION), *([W(52, after)] if after else []), W(50 + HOLD_MS, b"")]
    return Reply(writes=writes, headers=headers, headers_at_ms=50)


@pytest.mark.parametrize(
    ("stream", "ctype", "after"),
    [
        (False, "application/json", b""),
        (True, "application/json", b""),
        (True, "text/plain", b""),
        (True, "", b""),
        (False, "application/json", b"\n"),  # a line end in a segment of its own, then the hold
        (True, "application/json", b"\r\n"),
    ],
    ids=[
        "no-stream",
        "stream-answered-json",
        "stream-answered-text-plain",
        "stream-answered-no-type",
        "no-stream-newline-apart",
        "stream-crlf-apart",
    ],
)
def test_nc21_kind_json_reply_held_open_after_its_json_does_not_hold_the_user(gevent_ready, stream, ctype, after):
    # found by a new-user run: the reply was timed at its JSON (0.5 ms) while the user waited out the
    # 15 s hold, so one request in a 20 s run printed "2058 req/s" and PASSED
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=stream)
    with ScriptedServer(_json_held_open(ctype, after)) as srv:
        client, transport = _client(srv.base_url)
        try:
            started = time.perf_counter()
            records = [client.run(request) for _ in range(3)]
            elapsed_s = time.perf_counter() - started
        finally:
            transport.close()
        connections = srv.connections_accepted
    assert [r.outcome for r in records] == [Outcome.OK] * 3, records[0].error
    assert [r.completion_tokens.value for r in records] == [4, 4, 4]
    assert all(r.streamed is False for r in records)
    for record in records:
        assert record.e2e_s is not None
        assert 0.045 < record.e2e_s < 0.1  # the JSON's arrival (50 ms), not the end of the held body
    assert elapsed_s < 1.5, f"3 requests took {elapsed_s:.2f} s: the user waited for the held body"
    assert connections == 3  # a body still open after the drain loses its connection


def test_nc21_kind_json_reply_whose_end_comes_soon_after_keeps_the_connection(gevent_ready):
    reply = Reply(writes=[W(50, _COMPLETION), W(52, b"")], headers={"Content-Type": "application/json"})
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=False)
    with ScriptedServer(reply) as srv:
        client, transport = _client(srv.base_url)
        try:
            records = [client.run(request) for _ in range(3)]
        finally:
            transport.close()
        connections = srv.connections_accepted
    assert [r.outcome for r in records] == [Outcome.OK] * 3, records[0].error
    assert connections == 1


_FILTER_LINE = json.dumps({"choices": [], "object": "", "prompt_filter_results": [{"prompt_index": 0}]})


@pytest.mark.parametrize("framing", [Framing.CHUNKED, Framing.CONTENT_LENGTH], ids=["chunked", "content-length"])
def test_nc21_kind_json_reply_whose_connection_closes_right_after_it_counts(run_scripted, framing):
    # a body cut right after a whole JSON reply counts as when it is held a while, then dropped
    reply = Reply(
        writes=[W(50, _COMPLETION)],
        headers={"Content-Type": "application/json"},
        framing=framing,
        content_length=len(_COMPLETION) + 100 if framing is Framing.CONTENT_LENGTH else None,
        ending=Ending.CLOSE,
    )
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=False)
    record = run_scripted(reply, request).record
    assert record.outcome is Outcome.OK, record.error
    assert record.completion_tokens.value == 4


def test_nc21_kind_error_json_held_open_after_a_line_end_is_quoted_at_once(gevent_ready):
    error = json.dumps({"error": {"message": "overloaded, retry later", "type": "server_error", "code": 503}})
    writes = [W(5, error), W(7, b"\n"), W(5 + HOLD_MS, b"")]
    reply = Reply(writes=writes, status=503, headers={"Content-Type": "application/json"})
    with ScriptedServer(reply) as srv:
        client, transport = _client(srv.base_url)
        try:
            started = time.perf_counter()
            record = client.run(CHAT)
            elapsed_s = time.perf_counter() - started
        finally:
            transport.close()
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.message == "overloaded, retry later"
    assert elapsed_s < 1.0


@pytest.mark.parametrize("first", ["chunk", "filter-results"])
@pytest.mark.parametrize("gap_ms", [300, 0], ids=["lines-300ms-apart", "lines-together"])
def test_nc31_kind_json_lines_are_not_taken_for_one_reply(run_scripted, gap_ms, first):
    # streaming chunks as JSON lines (no data: fields): the first line is whole JSON, but not a reply
    # (Azure's first chunk carries only prompt_filter_results)
    lines = [C({"content": "Hi"}) if first == "chunk" else _FILTER_LINE, C({"content": " there"}), CF("stop")]
    writes = [W(50 + gap_ms * i, (line + "\n").encode()) for i, line in enumerate(lines)]
    record = run_scripted(Reply(writes=writes, headers={"Content-Type": "application/x-ndjson"})).record
    assert record.outcome is Outcome.STREAM_ERROR, (record.outcome, record.completion_tokens)
    assert record.error is not None
    assert "not an event stream and not valid JSON" in record.error.message


# ── NC-29: the port speaks HTTP/2 only ───────────────────────────────────
_H2_SETTINGS = bytes.fromhex("000006040000000000") + bytes.fromhex("000300000064")  # MAX_CONCURRENT_STREAMS 100
_H2_GOAWAY = bytes.fromhex("000008070000000000") + bytes.fromhex("00000000") + bytes.fromhex("00000001")


def test_nc29_http2_frames_fail_a_request_with_their_name(gevent_ready):
    with ScriptedServer(Reply(writes=[W(1, _H2_SETTINGS + _H2_GOAWAY)], raw=True)) as srv:
        client, transport = _client(srv.base_url)
        try:
            record = client.run(CHAT)
        finally:
            transport.close()
    assert record.outcome is Outcome.TRANSPORT_ERROR
    assert record.error is not None
    assert "HTTP/2 frames, not HTTP/1.1" in record.error.message
    assert "SETTINGS, GOAWAY PROTOCOL_ERROR" in record.error.message


# ── NC-28 (refusal half): a chat or completions body for another API's path ──


# An HTML page with status 200 (a captive portal, a proxy's login or error page) instead of the reply.
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_html_page_with_status_200_is_named_not_dumped(run_scripted, stream):
    page = b"<!DOCTYPE html><html><head><style>p{}</style><title>Sign in to the proxy</title></head></html>"
    reply = Reply(writes=[W(5, page)], headers={"Content-Type": "text/html"}, framing=Framing.CONTENT_LENGTH)
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=stream)
    record = run_scripted(reply, request).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert '"Sign in to the proxy" (an HTML error page)' in record.error.message
    assert "<style>" not in record.error.message


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "the port answered like an SSH server, not HTTP/1.1"),
        (b"-ERR unknown command 'POST'\r\n", "the port answered like Redis (a RESP error line), not HTTP/1.1"),
        (b"\x00\x01garbage\r\n", "the answer is not HTTP/1.1, it began b'\\x00\\x01garbage"),
        (bytes.fromhex("150301000202") + bytes.fromhex("28"), "the server answered with TLS, not plain HTTP"),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/2 frames, not HTTP/1.1"),
    ],
    ids=["ssh", "redis", "unknown", "tls-alert", "h2-preface"],
)
def test_nc29_other_protocols_are_named_in_the_preflight(gevent_ready, answer, named):
    from llmload.errors import ConfigError
    from llmload.request.preflight import fetch_models

    with ScriptedServer(Reply(writes=[W(1, answer)], raw=True)) as srv:
        transport = GeventHTTPTransport(srv.base_url, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10))
        try:
            with pytest.raises(ConfigError) as refused:
                fetch_models(srv.base_url, transport.get, "OPENAI_API_KEY")
        finally:
            transport.close()
    message = str(refused.value)
    assert named in message
    assert "Is the server up" not in message
    assert "Expected HTTP/" not in message  # no parser exception in the sentence


def _plain_http_port() -> socket.socket:
    """A listening port that answers anything (a TLS ClientHello too) with a plain HTTP/1.1 400, then closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):  # the test closed the listener
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    return listener


def test_nc29_kind_https_url_on_a_plain_http_port_is_named_before_load_and_per_request(gevent_ready):
    # found by a new-user run: "EPERM [SSL: WRONG_VERSION_NUMBER] ... Is the server up and -H right?"
    # (OpenSSL's error code 1 read as the system's errno EPERM)
    from llmload.errors import ConfigError
    from llmload.request.preflight import fetch_models

    listener = _plain_http_port()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}"
    transport = GeventHTTPTransport(url, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10))
    try:
        with pytest.raises(ConfigError) as refused:
            fetch_models(url, transport.get, "OPENAI_API_KEY")
        record = StreamingClient(transport).run(CHAT)
    finally:
        transport.close()
        listener.close()
    for message in (str(refused.value), record.error.message if record.error else ""):
        assert "did not answer the TLS handshake with TLS (OpenSSL: " in message
        assert "pass -H http://" in message
        assert "EPERM" not in message
        assert "Is the server up" not in message
    assert record.outcome is Outcome.TRANSPORT_ERROR


def test_nc29_a_malformed_header_of_a_real_http1_answer_is_not_called_another_protocol(gevent_ready):
    from llmload.errors import ConfigError
    from llmload.request.preflight import fetch_models

    answer = [W(1, b"HTTP/1.1 200 OK\r\n"), W(5, b"Content-Length: x\r\n\r\n{}")]
    with ScriptedServer(Reply(writes=answer, raw=True)) as srv:
        transport = GeventHTTPTransport(srv.base_url, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10))
        try:
            with pytest.raises(ConfigError) as refused:
                fetch_models(srv.base_url, transport.get, "OPENAI_API_KEY")
        finally:
            transport.close()
    assert "not HTTP/1.1" not in str(refused.value)
    assert "malformed HTTP/1.1 answer (" in str(refused.value)
    assert "', " not in str(refused.value)  # the parser's reason, not its (reason, code) tuple


@pytest.mark.parametrize(
    ("writes", "said"),
    [
        ([], "before any byte of an answer"),
        ([W(1, b"HTTP/1.1 200 OK\r\nContent-")], "in the middle of the answer's headers"),
    ],
    ids=["nothing", "part-of-the-headers"],
)
def test_a_connection_closed_before_the_answer_is_said_so_not_called_malformed(run_scripted, writes, said):
    # found by a fresh-helper walk: a server that closed the connection after reading the request
    # was reported as "malformed HTTP/1.1 answer (connection closed.)", though nothing malformed came
    run = run_scripted(Reply(writes=writes, raw=True))
    record = run.record
    assert record.outcome is Outcome.TRANSPORT_ERROR
    assert record.error is not None
    assert f"the server closed the connection {said} (the request was sent" in record.error.message
    assert "malformed" not in record.error.message
    assert len(run.requests) == 1  # a fresh connection: never sent twice


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_status_200_json_with_only_a_fastapi_detail_is_a_server_error_that_quotes_it(run_scripted, stream):
    # found by a new-user run: filed as "empty response: no generated token" without the server's words
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=stream)
    record = run_scripted(json_reply(200, '{"detail": "Internal error: CUDA out of memory"}'), request).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.message == "Internal error: CUDA out of memory"


def test_gateway_error_object_wrapping_a_proxy_page_is_one_line(run_scripted):
    wrapped = {"error": {"message": _CLOUDFLARE_502.decode(), "type": "APIError", "param": None, "code": "502"}}
    record = run_scripted(json_reply(502, json.dumps(wrapped))).record
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.message == '"api.example.com | 502: Bad gateway" (an HTML error page in the error message)'


@pytest.mark.parametrize("ctype", ["text/plain", "text/html", ""], ids=["text-plain", "text-html", "none"])
def test_nc31_one_json_body_under_another_media_type_is_a_reply_that_did_not_stream(run_scripted, ctype):
    reply = Reply(
        writes=[W(100, _COMPLETION)],
        headers={"Content-Type": ctype} if ctype else {},
        headers_at_ms=100,
        framing=Framing.CONTENT_LENGTH,
    )
    record = run_scripted(reply).record
    assert record.outcome is Outcome.OK, record.error
    assert record.streamed is False
    assert record.completion_tokens.value == 4
    assert record.ttft_s is None


def test_nc31_invalid_json_under_another_media_type_is_named(run_scripted):
    reply = Reply(writes=[W(5, b'{"id": "c1", "choi')], headers={"Content-Type": "text/plain"})
    record = run_scripted(reply).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "not an event stream and not valid JSON" in record.error.message
    assert "seen: 0 events (0 with tokens), 18 bytes, no finish_reason, no [DONE], body ended" in record.error.message
    assert 'body began b\'{"id"' in record.error.message


# ── 426 Upgrade Required; one JSON body labelled as an event stream ──────
@pytest.mark.parametrize("upgrade", ["h2c", None], ids=["h2c", "no-header"])
def test_s426_kind_upgrade_required_names_the_protocol_wanted(run_scripted, upgrade):
    headers = {"Content-Type": "text/plain", **({"Upgrade": upgrade} if upgrade else {})}
    reply = Reply(
        writes=[W(1, b"Upgrade to h2c required\n")], status=426, headers=headers, framing=Framing.CONTENT_LENGTH
    )
    record = run_scripted(reply).record
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    message = record.error.message
    assert '"Upgrade to h2c required"' in message
    wanted = "Upgrade: h2c" if upgrade else "it sent no Upgrade header to say which"
    assert f"the server wants another protocol than HTTP/1.1 ({wanted}); llmload speaks HTTP/1.1" in message


def test_nc31_kind_json_body_labelled_event_stream_is_named(run_scripted):
    reply = Reply(writes=[W(100, _COMPLETION)], headers={"Content-Type": "text/event-stream"}, headers_at_ms=100)
    record = run_scripted(reply).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "one JSON body where an event stream was announced" in record.error.message
    assert "seen: 0 events" in record.error.message
