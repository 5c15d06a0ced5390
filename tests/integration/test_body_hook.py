"""The transport takes body spans from the parser per response (``_on_body`` set to a list's append), or, with a
parser that does not call it, from the library's buffer: the body is never lost either way. Bytes past the end of a
reply, or a malformed frame after good ones in one receive, lose nothing that came before them."""

from __future__ import annotations

import pytest

import llmload.net.transport as transport_module
from llmload.net.transport import GeventHTTPTransport
from llmload.net.turns import LoopTurns
from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request, build_completion_request
from llmload.settings.config import Timeouts
from llmload.testing import CF, TF, C, Reply, ScriptedServer, T, U, W, sse

FAST = Timeouts(connect_s=2, idle_s=5, total_s=30)
# two events in one write, one event split over two writes, then the end with usage
REPLY = Reply(
    [
        W(10, sse(T("a")) + sse(T(" b"))),
        W(20, sse(T(" c"))[:9]),
        W(30, sse(T(" c"))[9:]),
        W(40, sse(T(" d"))),
        W(50, sse(TF("length"), "[DONE]")),
    ]
)


def _read_all() -> bytes:
    turns = LoopTurns()
    with ScriptedServer(REPLY) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        response = transport.post("/v1/completions", b"{}", {})
        body = b""
        while data := response.read_some():
            body += data
        response.close()
        transport.close()
    turns.close()
    return body


def _parse_ignoring_the_instance_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser that, like a geventhttpclient that bound ``_on_body`` once, never calls one set on the response."""
    real = transport_module._parse

    def parse(response, data):  # type: ignore[no-untyped-def]
        response.__dict__.pop("_on_body", None)
        real(response, data)

    monkeypatch.setattr(transport_module, "_parse", parse)


def test_the_installed_parser_calls_the_hook_set_on_the_response():
    assert transport_module._parser_calls_instance_on_body()
    assert transport_module._INSTANCE_BODY_HOOK


def test_a_parser_that_ignores_the_hook_is_found_out(monkeypatch, gevent_ready):
    _parse_ignoring_the_instance_hook(monkeypatch)
    assert not transport_module._parser_calls_instance_on_body()


@pytest.mark.parametrize("hooked", [True, False])
def test_the_whole_body_arrives_with_the_hook_and_without(monkeypatch, gevent_ready, hooked):
    if not hooked:
        _parse_ignoring_the_instance_hook(monkeypatch)
        monkeypatch.setattr(transport_module, "_INSTANCE_BODY_HOOK", transport_module._parser_calls_instance_on_body())
    expected = b"".join(write.data for write in REPLY.writes)
    assert _read_all() == expected


@pytest.mark.parametrize("hooked", [True, False])
def test_a_streamed_reply_counts_every_token_with_the_hook_and_without(monkeypatch, gevent_ready, hooked):
    if not hooked:
        _parse_ignoring_the_instance_hook(monkeypatch)
        monkeypatch.setattr(transport_module, "_INSTANCE_BODY_HOOK", transport_module._parser_calls_instance_on_body())
    turns = LoopTurns()
    with ScriptedServer(REPLY) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        record = StreamingClient(transport).run(build_completion_request(model="m", prompt="p", max_tokens=5))
        transport.close()
    turns.close()
    assert record.ok, record.error
    assert len(record.token_times_s) == 4  # a, b, c (split over two writes) and d


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_END = sse(CF("stop"), U(3, 5), "[DONE]")


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _run_raw(last: bytes) -> tuple[object, bool]:
    """Five tokens, then ``last`` in one write; the record and whether the connection was kept for reuse."""
    writes = [W(10, _HEAD)] + [W(20 + 2 * i, _frame(sse(C({"content": f"t{i} "})))) for i in range(4)]
    turns = LoopTurns()
    with ScriptedServer(Reply([*writes, W(40, last), W(80, b"")], raw=True)) as server:
        transport = GeventHTTPTransport(server.base_url, headers={}, timeouts=FAST, turns=turns)
        request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
        record = StreamingClient(transport).run(request)
        reusable = transport._reusable
        transport.close()
    turns.close()
    return record, reusable


@pytest.mark.parametrize(
    "after",
    [b"xyz", b"H", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"],
    ids=["junk", "the start of a message", "a whole second reply"],
)
def test_bytes_past_the_end_of_a_reply_in_its_last_receive_keep_the_reply_and_close_the_connection(gevent_ready, after):
    record, reusable = _run_raw(_frame(sse(C({"content": "t4 "})) + _END) + b"0\r\n\r\n" + after)
    assert record.ok, record.error
    assert len(record.token_times_s) == 5
    assert record.finish_reason == "stop"
    assert not reusable  # what comes next on it would start mid-garbage


def test_a_malformed_frame_after_a_good_one_in_one_receive_fails_the_reply_but_keeps_the_good_one(gevent_ready):
    record, _ = _run_raw(_frame(sse(C({"content": "t4 "}))) + b"zz\r\n")
    assert not record.ok
    assert "malformed HTTP body" in record.error.message
    assert len(record.token_times_s) == 5  # t4 came in the same receive as the bad frame
