"""An interim 1xx reply (``100 Continue``, ``103 Early Hints``) before the final one: the reply is read whole.

geventhttpclient returns the connection to its pool when the interim message
ends and reads the final headers through its own reference; the transport
takes the connection back for the body (``GeventHTTPTransport._take_back``).
Found by a breaker run: such replies failed with "connection released before
the end of the body" and no token.
"""

from __future__ import annotations

import gevent
import pytest

from llmload.net.transport import GeventHTTPTransport
from llmload.net.turns import LoopTurns
from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.settings.config import Timeouts
from llmload.testing import CF, C, Reply, ScriptedServer, U, W, sse

FAST = Timeouts(connect_s=2, idle_s=5, total_s=30)
_FINAL = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_EVENTS = [sse(C({"content": f"t{i} "})) for i in range(5)]
_END = sse(CF("stop"), U(3, 5), "[DONE]")


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _body(start_ms: int) -> list[W]:
    writes = [W(start_ms + 5 * i, _frame(event)) for i, event in enumerate(_EVENTS)]
    return [*writes, W(start_ms + 30, _frame(_END) + b"0\r\n\r\n")]


INTERIM = {
    "100 Continue, the final reply in a later write": [W(5, b"HTTP/1.1 100 Continue\r\n\r\n"), W(15, _FINAL)],
    "103 Early Hints and the final headers in one write": [
        W(15, b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + _FINAL)
    ],
    "100 then 102, then the final reply": [
        W(5, b"HTTP/1.1 100 Continue\r\n\r\n"),
        W(8, b"HTTP/1.1 102 Processing\r\n\r\n"),
        W(15, _FINAL),
    ],
}


@pytest.mark.parametrize("first", INTERIM.values(), ids=INTERIM.keys())
def test_a_reply_after_interim_replies_is_read_whole_and_the_next_request_goes_on(gevent_ready, first):
    chat = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    replies = [Reply([*first, *_body(30)], raw=True), Reply([W(10, _FINAL), *_body(20)], raw=True)]
    turns = LoopTurns()
    with ScriptedServer(replies) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        client = StreamingClient(transport, keep_text=True)
        with gevent.Timeout(10):  # a connection pool left without its slot would block the next request
            records = [client.run(chat), client.run(chat)]
        transport.close()
    turns.close()
    for record in records:
        assert record.ok, record.error
        assert record.output_text == "t0 t1 t2 t3 t4 "
        assert record.finish_reason == "stop"
