"""Section-H reply shapes (issue 18): the bytes ``llmload sim`` sends with a reply-shape flag (no llmload client).

The llmload runs against each shape (one short run each, checked against the case's "Expected" and
the simulator's counters) run in process: ``tests/edge/test_sim_replies.py``.
"""

from __future__ import annotations

import http.client
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tests.integration.test_sim import chat, request

pytestmark = pytest.mark.integration


@pytest.fixture
def sim(sim_server: Any) -> Any:
    """Factory: ``sim(*flags) -> Sim`` (its ``url``), served in this process; every simulator is stopped at teardown."""
    return lambda *flags: SimpleNamespace(url=sim_server("--decode-ms-per-seq", "0", "--prefill-base-ms", "0", *flags))


# ── the bytes on the wire (plain HTTP, no llmload client) ───────────────────
STREAM_BODY = chat(max_tokens=4, ignore_eos=True, stream=True, stream_options={"include_usage": True})


def test_sim_hold_after_done_pings_then_ends_the_body(sim):
    server = sim("--hold-after-done-rate", "1", "--hold-after-done-s", "0.6", "--hold-ping-s", "0.25")
    began = time.perf_counter()
    status, body = request(server.url, "POST", "/v1/chat/completions", STREAM_BODY)
    held_s = time.perf_counter() - began
    assert status == 200
    head, tail = body.split(b"data: [DONE]\n\n")
    assert head.count(b"data: ") == 7  # role, 4 tokens, finish, usage
    assert tail == b": ping\n\n: ping\n\n"
    assert held_s >= 0.6


def test_sim_unterminated_end_and_no_stream_bytes(sim):
    server = sim("--unterminated-end-rate", "1")
    status, body = request(server.url, "POST", "/v1/chat/completions", STREAM_BODY)
    assert status == 200
    assert b"[DONE]" not in body
    last = json.loads(body.rsplit(b"\n\n", 1)[1].removeprefix(b"data: "))
    assert body.endswith(b"}\n")
    assert (last["choices"][0]["finish_reason"], last["usage"]["completion_tokens"]) == ("length", 4)
    whole = sim("--no-stream-rate", "1")
    host, port = whole.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(STREAM_BODY))
        resp = conn.getresponse()
        reply = json.loads(resp.read())
    finally:
        conn.close()
    assert resp.getheader("Content-Type") == "application/json"
    assert reply["object"] == "chat.completion"
    assert reply["usage"]["completion_tokens"] == 4
