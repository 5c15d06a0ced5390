"""Forward proxies (NC-06) below the Locust edge: the transport and the scrape through a forward proxy.

An origin server and a small forward proxy (``forward_proxy.ForwardProxy``) on loopback. The
locust runs with proxy variables (preflight, load and scrapes routed, NO_PROXY, CONNECT tunnels,
refused credentials, a dead proxy) run in process: ``tests/edge/test_proxy.py``.
"""

from __future__ import annotations

import base64
import json
import re
import time

import pytest

from llmload.errors import TransportError
from llmload.net.sockets import KERNEL_STAMPS
from llmload.net.transport import GeventHTTPTransport
from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.request.record import Outcome
from llmload.settings.config import Timeouts
from llmload.settings.proxies import route
from llmload.testing import CF, ROLE, C, ReceivedRequest, Reply, ScriptedServer, U, W, json_reply, sse
from tests.integration.forward_proxy import ForwardProxy
from tests.integration.test_tls import tls_server  # noqa: F401 - the https origin fixture

pytestmark = [pytest.mark.integration]

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
STREAM = Reply(
    writes=[
        W(5, sse(ROLE)),
        W(10, sse(C({"content": "Hi"}))),
        W(15, sse(C({"content": " there"}))),
        W(20, sse(CF("stop"), U(3, 2), "[DONE]")),
    ]
)
USER, PASSWORD = "alice", "pr0xy-s3cret"
TOKEN = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (PASSWORD, TOKEN.split()[1], f"{USER}:")
# a proxy's 407 as llmload words it ("HTTP 407") or as the CONNECT reply reads ("HTTP/1.1 407")
PROXY_407 = re.compile(r"HTTP(?:/1\.[01])? 407\b")


def _reply(request: ReceivedRequest) -> Reply:
    return json_reply(200, MODELS) if request.method == "GET" else STREAM


def test_nc06_plain_http_through_a_proxy_keeps_kernel_receive_stamps():
    with ScriptedServer(_reply) as origin, ForwardProxy() as proxy:
        decision = route(origin.base_url, {"http": f"http://127.0.0.1:{proxy.port}"}, ignore=False)
        transport = GeventHTTPTransport(
            origin.base_url, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10), proxy=decision.proxy
        )
        request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        client = StreamingClient(transport)
        records = [client.run(request) for _ in range(3)]
        transport.close()
        seen, accepted, base_url = proxy.log, origin.connections_accepted, origin.base_url
    assert [r.outcome for r in records] == [Outcome.OK] * 3
    assert [r.target for r in seen] == [f"{base_url}/v1/chat/completions"] * 3
    assert accepted == 1  # one kept-alive connection to the proxy, hence one to the origin
    for record in records:
        assert record.completion_tokens.value == 2
        # the socket to the proxy is an ordinary TCP socket: reads carry the kernel's receive stamps
        if KERNEL_STAMPS:
            assert record.unstamped_reads == 0
            assert len(record.read_lags_s) >= 2


def test_nc06_https_through_a_connect_tunnel_still_checks_the_certificate(tls_server):  # noqa: F811
    with ForwardProxy() as proxy:
        decision = route(tls_server, {"https": f"http://127.0.0.1:{proxy.port}"}, ignore=False)
        transport = GeventHTTPTransport(
            tls_server, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10), proxy=decision.proxy
        )
        with pytest.raises(TransportError, match=r"(?i)certificate") as info:
            transport.get("/v1/models")
        transport.close()
        seen = proxy.log
    assert [r.method for r in seen] == ["CONNECT"]  # the tunnel was made; the self-signed certificate was refused
    assert f"via proxy http://127.0.0.1:{proxy.port}" in str(info.value)


def test_nc06_tls_connection_opened_before_the_send_is_the_one_the_request_uses(tls_server):  # noqa: F811
    # TLS 1.3 session tickets make a fresh connection readable; it must not be mistaken for a dead one,
    # or the request would open (and time) a second connection, here a second CONNECT tunnel
    with ForwardProxy() as proxy:
        decision = route(tls_server, {"https": f"http://127.0.0.1:{proxy.port}"}, ignore=False)
        transport = GeventHTTPTransport(
            tls_server,
            headers={},
            timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10),
            insecure=True,
            proxy=decision.proxy,
        )
        tunnels = []
        for _ in range(3):
            transport.connect()
            time.sleep(0.05)  # the server's session tickets arrive meanwhile
            assert transport.get("/v1/models").status == 200
            tunnels.append(len(proxy.log))
        transport.close()
    assert tunnels == [1, 2, 3]  # the origin closes after each reply: one tunnel per request, none wasted


def test_nc06_dead_proxy_fails_a_request_as_the_proxy_s_fault():
    """The load's own requests through a dead proxy fail as transport errors that name the proxy."""
    from llmload.errors import ProxyUnreachableError
    from llmload.settings.proxies import choose_proxy
    from tests.integration.procs import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    proxy = choose_proxy("http://127.0.0.1:1", {"http": dead})
    assert proxy is not None
    transport = GeventHTTPTransport("http://127.0.0.1:1", headers={}, timeouts=Timeouts(), proxy=proxy)
    try:
        with pytest.raises(ProxyUnreachableError, match=r"the proxy http://127\.0\.0\.1:\d+ \(from HTTP_PROXY\)"):
            transport.connect()
        with pytest.raises(ProxyUnreachableError, match="the target was never contacted"):
            transport.get("/v1/models")
    finally:
        transport.close()


def test_nc06_server_metrics_through_a_dead_proxy_name_the_proxy():
    """A --server-metrics URL routed through a proxy that refuses: the failure names the proxy, not
    "is the server's metrics port right?" (issue 24)."""
    from llmload.errors import ServerMetricsError
    from llmload.net.scrape import routed_fetch
    from tests.integration.procs import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    url = "http://127.0.0.1:1/metrics"
    fetch = routed_fetch((url,), {"http": dead}, ignore=False, insecure=False)
    with pytest.raises(ServerMetricsError, match=r"the proxy http://127\.0\.0\.1:\d+ \(from HTTP_PROXY\) for "):
        fetch(url, {}, 2.0)
    direct = routed_fetch((url,), {}, ignore=False, insecure=False)
    with pytest.raises(OSError, match="refused"):  # without a proxy the refusal is the server's own
        direct(url, {}, 2.0)
