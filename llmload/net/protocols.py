"""Name the protocol of a reply that is not HTTP/1.1, from its first bytes (pure; no I/O).

An HTTP/1.1 request sent to a port that speaks only HTTP/2 (a gRPC server,
an h2c-only listener) is answered with HTTP/2 frames: the server's SETTINGS
frame, then GOAWAY with PROTOCOL_ERROR (RFC 9113 sections 3.4 and 6.8). An
``http://`` URL pointed at a TLS port gets a TLS record (an alert or a
handshake) instead. Either way the HTTP/1.1 parser only says that the
status line is missing; ``foreign_protocol`` says what the bytes were.
A port of another service altogether answers with its own banner or error
line (SSH ``SSH-2.0-…``, Redis ``-ERR …``, SMTP/FTP ``220 …``):
``not_http1_message`` names those too, and otherwise quotes the first bytes.
"""

from __future__ import annotations

__all__ = ["H2_MESSAGE", "foreign_protocol", "not_http1_message", "not_tls_message", "starts_like_http1"]

H2_MESSAGE = "the server answered with HTTP/2 frames, not HTTP/1.1 (a gRPC or h2c-only port?)"
_H2_FIX = (
    "llmload speaks HTTP/1.1: point -H at the server's HTTP/1.1 (OpenAI-compatible) port, "
    "or put an HTTP/1.1 proxy in front of it"
)
_FRAME_HEADER_BYTES = 9
_MAX_FRAME_BYTES = 16_384  # SETTINGS_MAX_FRAME_SIZE before the peer's SETTINGS raise it (RFC 9113 4.2)
_SETTINGS, _GOAWAY = 0x4, 0x7
_H2_ERRORS = {
    0x0: "NO_ERROR",
    0x1: "PROTOCOL_ERROR",
    0x2: "INTERNAL_ERROR",
    0x6: "FRAME_SIZE_ERROR",
    0x7: "REFUSED_STREAM",
    0xB: "ENHANCE_YOUR_CALM",
    0xD: "HTTP_1_1_REQUIRED",
}
_CLIENT_PREFACE = b"PRI * HTTP/2.0"
_TLS_ALERT, _TLS_HANDSHAKE = 0x15, 0x16


def foreign_protocol(head: bytes) -> str | None:
    """What a reply beginning with ``head`` is, when it is HTTP/2 or TLS rather than HTTP/1.1; else None.

    Returns:
        e.g. ``the server answered with HTTP/2 frames, not HTTP/1.1 (a gRPC or
        h2c-only port?): SETTINGS, GOAWAY PROTOCOL_ERROR; llmload speaks HTTP/1.1: …``.
    """
    if head.startswith(_CLIENT_PREFACE):
        return f"{H2_MESSAGE}: the connection preface; {_H2_FIX}"
    frames = _h2_frames(head)
    if frames:
        return f"{H2_MESSAGE}: {', '.join(frames)}; {_H2_FIX}"
    if len(head) >= 3 and head[0] in (_TLS_ALERT, _TLS_HANDSHAKE) and head[1] == 0x03:
        return "the server answered with TLS, not plain HTTP: the port expects https; pass -H https://…"
    return None


_PORT_FIX = "point -H at the LLM server's HTTP port"
_BANNERS = (  # (first bytes, what answered): services that speak first or answer any line with an error line
    (b"SSH-", "an SSH server"),
    (b"-ERR", "Redis (a RESP error line)"),
    (b"-NOAUTH", "Redis (a RESP error line)"),
    (b"+OK", "Redis (a RESP reply)"),
    (b"220 ", "an SMTP or FTP server"),
    (b"220-", "an SMTP or FTP server"),
    (b"* OK", "an IMAP server"),
)


def not_http1_message(head: bytes) -> str:
    """One sentence for a reply beginning with ``head`` that has no HTTP/1.1 status line.

    Names HTTP/2, TLS (``foreign_protocol``) and the banners of other
    services (SSH, Redis, SMTP/FTP, IMAP); otherwise quotes the first bytes.
    """
    foreign = foreign_protocol(head)
    if foreign is not None:
        return foreign
    for start, what in _BANNERS:
        if head.startswith(start):
            return f"the port answered like {what}, not HTTP/1.1 (it began {head[:40]!r}): {_PORT_FIX}"
    return f"the answer is not HTTP/1.1, it began {head[:40]!r}: {_PORT_FIX}"


# OpenSSL's reasons when the answer to a ClientHello is no TLS record (plain HTTP, another service);
# "record layer failure" is how OpenSSL 3.2+ reports what earlier versions call a wrong version number
_NOT_TLS_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL"}
)


def not_tls_message(reason: str | None) -> str | None:
    """What an ``https://`` URL met when the TLS handshake failed for OpenSSL ``reason``, if the port is not TLS.

    The mirror of a TLS answer to plain HTTP (``foreign_protocol``): an
    ``https://`` URL pointed at a plain-HTTP port gets an HTTP answer (or
    nothing TLS) to its ClientHello, which OpenSSL reports as e.g.
    ``WRONG_VERSION_NUMBER``. Returns None for other handshake failures
    (certificates, protocol versions), whose own text says what failed.
    """
    if reason not in _NOT_TLS_REASONS:
        return None
    return (
        f"the server did not answer the TLS handshake with TLS (OpenSSL: {reason}): the port speaks plain HTTP "
        "(or another protocol); for plain HTTP pass -H http://…"
    )


def starts_like_http1(head: bytes) -> bool:
    """True when ``head`` starts like an HTTP/1.x status line (a parse error further on is not a protocol mix-up)."""
    return head.startswith(b"HTTP/") or (len(head) < 5 and b"HTTP/".startswith(head))


def _h2_frames(head: bytes) -> list[str]:
    """Names of the HTTP/2 connection-level frames ``head`` begins with; empty if it does not begin with one."""
    names: list[str] = []
    at = 0
    while len(head) - at >= _FRAME_HEADER_BYTES:
        length = int.from_bytes(head[at : at + 3], "big")
        kind = head[at + 3]
        stream = int.from_bytes(head[at + 5 : at + 9], "big") & 0x7FFF_FFFF
        if stream != 0 or length > _MAX_FRAME_BYTES:
            break
        if kind == _SETTINGS and length % 6 == 0:
            names.append("SETTINGS")
        elif kind == _GOAWAY and length >= 8:
            payload = head[at + _FRAME_HEADER_BYTES + 4 : at + _FRAME_HEADER_BYTES + 8]
            code = int.from_bytes(payload, "big") if len(payload) == 4 else None
            names.append("GOAWAY" if code is None else f"GOAWAY {_H2_ERRORS.get(code, hex(code))}")
        else:
            break
        at += _FRAME_HEADER_BYTES + length
    return names
