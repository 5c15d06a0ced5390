"""TLS: certificates are verified by default; --insecure is explicit."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmload.errors import TransportError
from llmload.net.transport import GeventHTTPTransport
from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.request.record import Outcome
from llmload.settings.config import Timeouts
from llmload.testing import CF, ROLE, C, U, sse

pytestmark = [pytest.mark.integration]

BODY = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
STREAM = [sse(ROLE), sse(C({"content": "Hel"})), sse(C({"content": "lo"})), sse(CF("stop"), U(3, 2), "[DONE]")]


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[str]:
    """A one-thread HTTPS server on 127.0.0.1 with a self-signed certificate (made here by openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a self-signed certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(raw, server_side=True) as conn:
                    request = conn.recv(65536)
                    if request.startswith(b"POST"):  # a streamed reply, one TLS record per event
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                        for event in STREAM:
                            conn.sendall(event)
                    else:
                        conn.sendall(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
                        )
            except (ssl.SSLError, OSError):
                raw.close()  # the client refused our certificate

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    listener.close()


def test_tls_self_signed_certificate_is_refused_by_default(tls_server):
    transport = GeventHTTPTransport(tls_server, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10))
    with pytest.raises(TransportError, match=r"(?i)certificate"):
        transport.get("/v1/models")
    transport.close()


def test_tls_insecure_skips_verification_explicitly(tls_server):
    transport = GeventHTTPTransport(
        tls_server, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10), insecure=True
    )
    reply = transport.get("/v1/models")
    transport.close()
    assert reply.status == 200
    assert reply.body == BODY


def test_tls_streamed_reply_is_read_event_by_event(tls_server):
    transport = GeventHTTPTransport(
        tls_server, headers={}, timeouts=Timeouts(connect_s=5, idle_s=5, total_s=10), insecure=True
    )
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    record = StreamingClient(transport).run(request)
    transport.close()
    assert record.outcome is Outcome.OK
    assert record.completion_tokens.value == 2
    assert len(record.token_times_s) == 2
    assert record.ttft_s is not None
    # TLS reads go through gevent's SSL socket: no kernel stamps, the monotonic clock times them
    assert record.read_lags_s == []
    assert record.unstamped_reads >= 1
