"""Parsers of the header options, ``--header`` and ``--api-key-header`` (text in, checked header out).

A header llmload sends comes from the user only through these two options;
each refuses what would break the HTTP message: the framing and connection
headers llmload owns, and control characters (a CR would end the header and
send what follows unchecked). Errors name the header, never its value (it
may be a credential).
"""

from __future__ import annotations

from llmload.errors import ConfigError

__all__ = ["header_name", "headers"]

_FRAMING_HEADERS = {
    "content-length": "llmload sets it from each request body; a fixed value would cut or stall the body",
    "transfer-encoding": "llmload frames each body with Content-Length; a second framing makes the request "
    "ambiguous (servers and proxies may read it differently)",
    "host": "it comes from -H; put the host name the server expects in -H (DNS or /etc/hosts pointing at it)",
    "connection": "llmload manages its keep-alive connections itself",
    "keep-alive": "llmload manages its keep-alive connections itself",
    "proxy-connection": "llmload manages its connections (and proxy tunnels) itself",
    "te": "a hop-by-hop header that changes how the reply is framed",
    "trailer": "a hop-by-hop header that changes how the body is framed",
    "upgrade": "it would switch the connection to another protocol",
    "expect": "llmload does not wait for 100 Continue; the request would stall",
}
"""Headers that frame the HTTP message or control the connection: refused in ``--header`` (why, per name)."""


def _refuse_framing(flag_name: str, name: str) -> None:
    why = _FRAMING_HEADERS.get(name.lower())
    if why is not None:
        raise ConfigError(f"{flag_name}: the {name} header is refused: {why}. Remove it")


def headers(flag_name: str, value: str) -> tuple[tuple[str, str], ...]:
    """One header, ``Name: value`` (``OptionSpec.value`` calls this once per line given).

    Refused: a CR (or any other control character but tab) in the value,
    which would end the header and send what follows unchecked, and the
    framing and connection headers of ``_FRAMING_HEADERS`` (``Content-Length``,
    ``Transfer-Encoding``, ``Host``, ``Connection`` …).
    """
    name, sep, field_value = value.partition(":")
    name = name.strip()
    if not sep or not name or any(c in name for c in ' \t()<>@,;\\"/[]?={}\r\n'):
        raise ConfigError(
            f"{flag_name} must be 'Name: value', got {_redacted_header(value)!r}; pass e.g. {flag_name} 'api-key: KEY'"
        )
    if "\r" in field_value or "\n" in field_value:
        raise ConfigError(
            f"{flag_name}: the value of header {name!r} contains a line break (CR or LF), which would end the "
            f"header and send what follows unchecked; pass each header as its own {flag_name} 'Name: value'"
        )
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in field_value):
        raise ConfigError(f"{flag_name}: the value of header {name!r} contains a control character; remove it")
    _refuse_framing(flag_name, name)
    return ((name, field_value.strip()),)


def _redacted_header(line: str) -> str:
    """A header as given, with its value hidden (it may be a credential)."""
    name, sep, rest = line.partition(":")
    return f"{name}: ***" if sep and rest.strip() else line[:40]


def header_name(flag_name: str, value: str) -> str:
    """An HTTP header name (no spaces or separators)."""
    name = value.strip()
    if not name or any(c in name for c in ' \t:()<>@,;\\"/[]?={}\r\n'):
        example = "X-Session-ID" if flag_name == "--session-header" else "api-key"
        raise ConfigError(f"{flag_name} must be a header name, got {value!r}; pass e.g. {flag_name} {example}")
    _refuse_framing(flag_name, name)
    return name
