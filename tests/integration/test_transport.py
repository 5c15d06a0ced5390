"""GeventHTTPTransport against ScriptedServer: prompt delivery, keep-alive, error mapping."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from llmload.errors import ConfigError, TransportError
from llmload.net.sockets import AddressCache
from llmload.net.transport import GeventHTTPTransport
from llmload.net.turns import BATCH_S
from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.request.record import Outcome
from llmload.settings.config import Timeouts
from llmload.testing import CF, ROLE, C, Ending, Framing, Reply, ScriptedServer, W, json_reply, sse

pytestmark = pytest.mark.integration

CHAT = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
FAST = Timeouts(connect_s=2, idle_s=5, total_s=30)
OK_REPLY = Reply([W(0, sse(ROLE, C({"content": "a"}), CF("stop"), "[DONE]"))])


def transport_for(server: ScriptedServer, timeouts: Timeouts = FAST, **kwargs) -> GeventHTTPTransport:
    return GeventHTTPTransport(server.base_url, headers={}, timeouts=timeouts, **kwargs)


def test_transport_read_some_times_bytes_when_they_arrived_and_hands_them_out_within_the_batch_time(gevent_ready):
    with ScriptedServer(Reply([W(100, b"data: 1\n\n"), W(300, b"data: 2\n\n")])) as server:
        transport = transport_for(server)
        t0 = time.perf_counter()
        response = transport.post("/v1/completions", b"{}", {})
        first = response.read_some()
        first_s = time.perf_counter() - t0
        first_arrived_s = first_s - response.read_age_s
        second = response.read_some()
        second_s = time.perf_counter() - t0
        second_arrived_s = second_s - response.read_age_s
        end = response.read_some()
        response.close()
        transport.close()
        log = server.send_log(0)
    assert (first, second, end) == (b"data: 1\n\n", b"data: 2\n\n", b"")
    # timed when they arrived (~100 and ~300 ms), not when the user was woken to decode them
    assert first_arrived_s == pytest.approx(log.writes_s[0] - t0, abs=0.002)
    assert second_arrived_s == pytest.approx(log.writes_s[1] - t0, abs=0.002)
    # handed out within the batch time, not held back until 4 KiB arrived; the end of the body at once
    assert log.writes_s[0] - t0 <= first_s <= log.writes_s[0] - t0 + BATCH_S + 0.01
    assert log.writes_s[1] - t0 <= second_s <= log.writes_s[1] - t0 + 0.01


def test_transport_reuses_one_connection_for_sequential_requests(gevent_ready):
    with ScriptedServer(OK_REPLY) as server:
        transport = transport_for(server)
        client = StreamingClient(transport)
        outcomes = [client.run(CHAT).outcome for _ in range(3)]
        transport.close()
        assert outcomes == [Outcome.OK] * 3
        assert server.connections_accepted == 1


def test_transport_discards_connection_whose_body_was_not_read(gevent_ready):
    error = '{"error":{"message":"boom","type":"InternalServerError","code":500}}'
    replies = [Reply([W(0, sse(error))], ending=Ending.STALL), OK_REPLY]
    with ScriptedServer(replies) as server:
        transport = transport_for(server)
        client = StreamingClient(transport)
        first = client.run(CHAT)  # stops reading at the error; the body never ends
        second = client.run(CHAT)
        transport.close()
        assert first.outcome is Outcome.SERVER_ERROR
        assert second.outcome is Outcome.OK
        assert server.connections_accepted == 2


def test_transport_sends_headers_body_and_path_prefix(gevent_ready):
    with ScriptedServer(OK_REPLY) as server:
        transport = GeventHTTPTransport(
            server.base_url + "/proxy/", headers={"Authorization": "Bearer k"}, timeouts=FAST
        )
        StreamingClient(transport).run(CHAT)
        transport.close()
        received = server.requests[0]
    assert received.method == "POST"
    assert received.path == "/proxy/v1/chat/completions"
    assert received.headers["authorization"] == "Bearer k"
    assert received.headers["content-type"] == "application/json"
    assert received.body == CHAT.body


def test_transport_connection_refused_is_transport_error(gevent_ready):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens on this port now
    transport = GeventHTTPTransport(f"http://127.0.0.1:{port}", headers={}, timeouts=FAST)
    record = StreamingClient(transport).run(CHAT)
    transport.close()
    assert record.outcome is Outcome.TRANSPORT_ERROR
    assert record.error is not None
    assert "ECONNREFUSED" in record.error.message or "refused" in record.error.message.lower()


def test_transport_idle_timeout_mid_stream(gevent_ready):
    # BC-27 A, shortened: role chunk, then silence longer than the idle timeout
    reply = Reply([W(10, sse(ROLE))], ending=Ending.STALL)
    with ScriptedServer(reply) as server:
        transport = transport_for(server, Timeouts(connect_s=2, idle_s=0.3, total_s=30))
        record = StreamingClient(transport).run(CHAT)
        transport.close()
    assert record.outcome is Outcome.TIMEOUT
    assert record.error is not None
    assert record.error.category == "timeout: read idle"
    assert "0.3 s" in record.error.message
    assert record.end_s == pytest.approx(0.31, abs=0.05)


def test_transport_idle_timeout_counts_from_the_last_read(gevent_ready):
    # events every 200 ms never reach the 300 ms idle limit; the silence after the last one does
    writes = [W(10 + 200 * i, sse(C({"content": "a"}))) for i in range(4)]
    with ScriptedServer(Reply(writes, ending=Ending.STALL)) as server:
        transport = transport_for(server, Timeouts(connect_s=2, idle_s=0.3, total_s=30))
        record = StreamingClient(transport).run(CHAT)
        transport.close()
    assert record.outcome is Outcome.TIMEOUT
    assert record.error is not None
    assert record.error.category == "timeout: read idle"
    assert len(record.token_times_s) == 4
    assert record.end_s == pytest.approx(0.61 + 0.3, abs=0.05)


def test_transport_connection_closed_mid_body_is_stream_error(gevent_ready):
    # BC-27 B: two content events, then FIN without finish_reason, [DONE] or the last chunk
    reply = Reply(
        [W(10, sse(ROLE)), W(20, sse(C({"content": "a"}))), W(30, sse(C({"content": "b"})))],
        ending=Ending.CLOSE,
    )
    with ScriptedServer(reply) as server:
        transport = transport_for(server)
        record = StreamingClient(transport).run(CHAT)
        transport.close()
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert record.error.category == "stream ended before completion"
    assert len(record.token_times_s) == 2


def test_transport_reset_mid_body_is_a_failure(gevent_ready):
    reply = Reply([W(10, sse(C({"content": "a"})))], ending=Ending.RESET)
    with ScriptedServer(reply) as server:
        transport = transport_for(server)
        record = StreamingClient(transport).run(CHAT)
        transport.close()
    assert record.outcome in (Outcome.TRANSPORT_ERROR, Outcome.STREAM_ERROR)
    assert record.outcome.is_failure


def test_transport_body_until_close_is_complete(gevent_ready):
    body = '{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}'
    reply = Reply([W(0, body)], headers={"Content-Type": "application/json"}, framing=Framing.UNTIL_CLOSE)
    with ScriptedServer(reply) as server:
        transport = transport_for(server)
        record = StreamingClient(transport).run(CHAT)
        transport.close()
    assert record.outcome is Outcome.OK


def test_transport_truncated_content_length_body_is_stream_error(gevent_ready):
    reply = Reply(
        [W(0, '{"choices":')],
        headers={"Content-Type": "application/json"},
        framing=Framing.CONTENT_LENGTH,
        content_length=100,
        ending=Ending.CLOSE,
    )
    with ScriptedServer(reply) as server:
        transport = transport_for(server)
        record = StreamingClient(transport).run(CHAT)
        transport.close()
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert record.error.category == "body ended before completion"


def test_transport_http_404_becomes_http_error(gevent_ready):
    body = '{"error":{"message":"model \'other\' is not served","type":"NotFoundError","param":null,"code":404}}'
    with ScriptedServer(json_reply(404, body)) as server:
        transport = transport_for(server)
        record = StreamingClient(transport).run(CHAT)
        transport.close()
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.category == "HTTP 404 NotFoundError"


def test_transport_get_reads_whole_body(gevent_ready):
    with ScriptedServer(json_reply(200, '{"object":"list","data":[{"id":"m"}]}')) as server:
        transport = transport_for(server)
        result = transport.get("/v1/models")
        transport.close()
        assert server.requests[0].method == "GET"
    assert result.status == 200
    assert result.content_type == "application/json"
    assert result.body == b'{"object":"list","data":[{"id":"m"}]}'


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://host", "http://", "http://h:99999", "http://h/#fragment"])
def test_transport_rejects_bad_base_url(url):
    with pytest.raises(ConfigError, match="base URL"):
        GeventHTTPTransport(url, headers={}, timeouts=FAST)


def test_transport_post_after_close_is_transport_error(gevent_ready):
    with ScriptedServer(OK_REPLY) as server:
        transport = transport_for(server)
        transport.close()
        with pytest.raises(TransportError, match="closed"):
            transport.post("/v1/chat/completions", b"{}", {})


def test_transport_replaces_connection_pool_methods_that_geventhttpclient_still_calls(gevent_ready):
    # Tripwire for the private geventhttpclient methods the transport replaces (see the
    # transport's module docstring): each must still be called, or timing silently degrades.
    from geventhttpclient.connectionpool import ConnectionPool

    for name in ("_create_tcp_socket", "_is_socket_alive", "_resolve"):
        assert callable(getattr(ConnectionPool, name, None)), f"geventhttpclient ConnectionPool has no {name}"
    addresses = AddressCache()
    with ScriptedServer([OK_REPLY, OK_REPLY]) as server:
        transport = transport_for(server, addresses=addresses)
        client = StreamingClient(transport)
        records = [client.run(CHAT) for _ in range(2)]
        transport.close()
        port, connections = server.port, server.connections_accepted
    assert [r.outcome for r in records] == [Outcome.OK] * 2
    assert addresses._fresh(("127.0.0.1", port, 0)) is not None  # _resolve went through the cache
    assert connections == 1  # _is_socket_alive kept the idle connection
    if sys.platform.startswith("linux"):
        assert records[0].unstamped_reads == 0  # _create_tcp_socket made the stamping socket
        assert records[0].read_lags_s


def test_issue19_a_reply_whose_body_stays_open_after_done_ends_at_done_not_at_the_batch_time(gevent_ready):
    # The body is held open after [DONE] (some servers do): the user is woken for [DONE] at once,
    # drains the rest for DRAIN_S and goes on; it does not wait for the batch time (BATCH_S).
    reply = Reply([W(10, sse(C({"content": "a"}))), W(30, sse(CF("stop"), "[DONE]"))], ending=Ending.STALL)
    with ScriptedServer(reply) as server:
        transport = transport_for(server)
        started = time.perf_counter()
        record = StreamingClient(transport).run(CHAT)
        returned_s = time.perf_counter() - started
        transport.close()
        log = server.send_log(0)
    assert record.outcome is Outcome.OK
    assert returned_s < log.writes_s[1] - started + 0.03  # [DONE], then DRAIN_S (5 ms) and the close
    assert BATCH_S > 0.05  # the test would not tell the two apart otherwise
