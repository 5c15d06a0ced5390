"""protocols: the first bytes of a reply that is not HTTP/1.1 name the protocol (NC-29)."""

from __future__ import annotations

import pytest

from llmload.net.protocols import H2_MESSAGE, foreign_protocol, not_http1_message, not_tls_message

SETTINGS = bytes.fromhex("00000c040000000000000300000064000400100000")
SETTINGS_EMPTY = bytes.fromhex("000000040000000000")
GOAWAY = bytes.fromhex("0000080700000000000000000000000001")
GOAWAY_DEBUG = bytes.fromhex("00000f0700000000000000000000000001") + b"bad pre"


@pytest.mark.parametrize(
    ("head", "frames"),
    [
        (SETTINGS + GOAWAY, "SETTINGS, GOAWAY PROTOCOL_ERROR"),
        (SETTINGS_EMPTY + GOAWAY_DEBUG, "SETTINGS, GOAWAY PROTOCOL_ERROR"),
        (GOAWAY, "GOAWAY PROTOCOL_ERROR"),
        (SETTINGS, "SETTINGS"),
        (SETTINGS + GOAWAY[:12], "SETTINGS, GOAWAY"),  # cut inside the GOAWAY payload
    ],
)
def test_nc29_http2_frames_are_named(head, frames):
    message = foreign_protocol(head)
    assert message is not None
    assert message.startswith(f"{H2_MESSAGE}: {frames};")


def test_nc29_http2_preface_and_tls_are_named():
    assert H2_MESSAGE in (foreign_protocol(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") or "")
    assert "https" in (foreign_protocol(bytes.fromhex("15030100020250")) or "")  # TLS alert


@pytest.mark.parametrize(
    "head", [b"", b"garbage here", b"HTTP/1.1 200 OK\r\n", bytes.fromhex("000006010000000001000000000000")]
)
def test_nc29_other_bytes_are_not_named(head):
    assert foreign_protocol(head) is None


@pytest.mark.parametrize(
    ("head", "named"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "the port answered like an SSH server, not HTTP/1.1 (it began b'SSH-2.0-"),
        (b"-ERR unknown command 'POST'\r\n", "the port answered like Redis (a RESP error line), not HTTP/1.1"),
        (b"220 mail.example.com ESMTP\r\n", "the port answered like an SMTP or FTP server"),
        (b"garbage here", "the answer is not HTTP/1.1, it began b'garbage here'"),
        (SETTINGS + GOAWAY, H2_MESSAGE),
    ],
    ids=["ssh", "redis", "smtp", "unknown", "h2"],
)
def test_nc29_banner_kind_other_services_are_named_without_parser_details(head, named):
    message = not_http1_message(head)
    assert named in message
    assert "Expected" not in message


@pytest.mark.parametrize("reason", ["WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"])
def test_nc29_kind_https_url_on_a_plain_http_port_is_named(reason):
    message = not_tls_message(reason)
    assert message is not None
    assert f"did not answer the TLS handshake with TLS (OpenSSL: {reason})" in message
    assert message.endswith("pass -H http://…")


@pytest.mark.parametrize("reason", ["CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_PROTOCOL_VERSION", None])
def test_nc29_kind_other_tls_failures_keep_their_own_text(reason):
    assert not_tls_message(reason) is None
