"""Error bodies that are not the model server's JSON (proxy and gateway pages) → one readable line.

A 413 from nginx, a 502 from Cloudflare, a 503 from Envoy or a 504 from
HAProxy or a cloud load balancer answers with an HTML page or a line of
text, not an OpenAI error object. Printed raw, such a page buries the one
thing it says under markup. ``summarize_body`` keeps that one thing: the
page's ``<title>`` (else its first heading, else its first line of visible
text), whitespace collapsed, at most ``HEADLINE_CHARS`` characters; a JSON
body that is not an OpenAI error keeps a compact excerpt. ``describe_error_page``
adds the status, the ``Server`` header, what the status usually means behind
a proxy, and for a 413 the size of the request body. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

__all__ = ["GZIP_MAGIC", "HEADLINE_CHARS", "describe_error_page", "readable_message", "summarize_body"]

HEADLINE_CHARS = 160
"""The longest headline kept from a page: a title or a line, never a page."""

GZIP_MAGIC = b"\x1f\x8b"
"""The first bytes of a gzip stream (a proxy that compresses bodies the client did not ask it to)."""
_SPACES = re.compile(r"\s+")
_SKIPPED_TAGS = frozenset({"script", "style", "head", "noscript", "template"})
_HEADINGS = frozenset({"h1", "h2", "h3"})
_BLOCK_TAGS = frozenset({"p", "div", "br", "center", "li", "pre", "hr", "body", "tr", "section", "main"})

_STATUS_HINTS = {
    413: "the request body was {size}: a proxy's body size limit (e.g. nginx client_max_body_size) is below it; "
    "raise the limit or send shorter prompts",
    502: "a proxy or gateway got no valid reply from the model server behind it: check that server",
    503: "the server, or a proxy or gateway in front of it, is unavailable: check the model server behind it",
    504: "a proxy or gateway timed out waiting for the model server behind it: check that server and the "
    "proxy's read timeout (long generations need a long one, e.g. nginx proxy_read_timeout)",
}


_UPGRADE_FIX = (
    "llmload speaks HTTP/1.1 (no h2c or WebSocket upgrade): point -H at the server's HTTP/1.1 "
    "(OpenAI-compatible) port, or put an HTTP/1.1 proxy in front of it"
)
_HTTP_VERSION_HINT = (
    "the server refuses HTTP/1.1 (HTTP Version Not Supported: an HTTP/2-only or gRPC port?); llmload speaks "
    "HTTP/1.1: point -H at the server's HTTP/1.1 (OpenAI-compatible) port, or put an HTTP/1.1 proxy in front of it"
)


class _PageText(HTMLParser):
    """Collects a page's title, first heading and lines of visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.heading: list[str] = []
        self.lines: list[str] = [""]
        self._in_title = False
        self._heading_open = False
        self._heading_done = False
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _HEADINGS and not self._heading_done:
            self._heading_open = True
        if tag in _BLOCK_TAGS or tag in _HEADINGS:
            self.lines.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED_TAGS:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _HEADINGS and self._heading_open:
            self._heading_open, self._heading_done = False, True
        if tag in _BLOCK_TAGS or tag in _HEADINGS:
            self.lines.append("")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
            return
        if self._skipping:
            return
        if self._heading_open:
            self.heading.append(data)
        self.lines[-1] += data  # in HTML a line break is a space; block tags end lines


def _clean(text: str) -> str:
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= HEADLINE_CHARS else text[: HEADLINE_CHARS - 1].rstrip() + "…"


def _looks_like_html(text: str, content_type: str) -> bool:
    start = text.lstrip()[:200].lower()
    return content_type in ("text/html", "application/xhtml+xml") or start.startswith(("<!doctype", "<html", "<head"))


def _first_line(lines: list[str]) -> str:
    for line in lines:
        cleaned = _clean(line)
        if cleaned:
            return cleaned
    return ""


def summarize_body(body: bytes, content_type: str = "", *, server: str | None = None) -> str:
    """One line saying what an error body says, for a reader; never the raw page.

    Args:
        body: the body (or its first bytes).
        content_type: the lower-cased media type, "" if unknown.
        server: the ``Server`` header, named with the kind of page; None if absent.

    Returns:
        ``"Title" (an HTML error page, Server: nginx)``, ``"first line" (a text
        error page)``, a compact JSON excerpt, ``an empty body``, or a note
        that the body is compressed or not text.
    """
    headline, kind, _page = _read(body, content_type)
    return _compose(headline, kind, server)


def _compose(headline: str, kind: str, server: str | None) -> str:
    if server and server.strip():
        kind += f", Server: {_clean(server)}"
    return f"{headline} ({kind})" if headline else kind


def _read(body: bytes, content_type: str) -> tuple[str, str, bool]:
    """The body's headline ("" if none, quoted if a page's), what kind of body it is, and whether it is a page."""
    if not body.strip():
        return "", "an empty body", False
    if body.startswith(GZIP_MAGIC):
        return "", f"a gzip-compressed body of {len(body)} bytes (Content-Encoding: gzip)", False
    text = body.decode("utf-8", "replace")
    if text.count("\ufffd") > max(8, len(text) // 10):
        return "", f"a body of {len(body)} bytes that is not text", False
    if _looks_like_html(text, content_type):
        page = _PageText()
        page.feed(text)
        page.close()
        headline = _clean("".join(page.title)) or _clean("".join(page.heading)) or _first_line(page.lines)
        if not headline:
            return "", "an HTML error page without a title or text", True
        return f'"{headline}"', "an HTML error page", True
    try:
        obj = json.loads(text)
    except ValueError:
        return f'"{_first_line(text.splitlines())}"', "a text error page", True
    return _clean(json.dumps(obj, ensure_ascii=False, separators=(",", ":"))), "a JSON body", False


def describe_error_page(
    status: int,
    body: bytes,
    content_type: str,
    *,
    server: str | None = None,
    request_bytes: int | None = None,
    upgrade: str | None = None,
) -> str:
    """The message of a non-2xx reply whose body is not an OpenAI error object (the status is its category).

    Args:
        status: the HTTP status.
        body: the body (or its first bytes).
        content_type: the lower-cased media type, "" if unknown.
        server: the ``Server`` header (names the proxy: nginx, cloudflare, envoy…); None if absent.
        request_bytes: the size of the request body, named for a 413; None if unknown.
        upgrade: the ``Upgrade`` header, named for a 426 (the protocol the server wants); None if absent.

    Returns:
        e.g. ``"413 Request Entity Too Large" (an HTML error page, Server: nginx/1.25.3);
        the request body was 2,097,430 bytes: a proxy's body size limit …``.
    """
    headline, kind, page = _read(body, content_type)
    line = _compose(headline, kind, server)
    hint = _STATUS_HINTS.get(status) if page else None  # a proxy's page; an API server's JSON speaks for itself
    if status == 505:
        hint = _HTTP_VERSION_HINT
    if status == 426:
        wanted = f"Upgrade: {upgrade}" if upgrade else "it sent no Upgrade header to say which"
        hint = f"the server wants another protocol than HTTP/1.1 ({wanted}); {_UPGRADE_FIX}"
    if status == 413:
        hint = None if request_bytes is None else _STATUS_HINTS[413].format(size=f"{request_bytes:,} bytes")
    return f"{line}; {hint}" if hint is not None else line


def readable_message(message: str) -> str:
    """An error object's message, or the one line of the HTML page it wraps (a gateway passing on a proxy's page).

    Gateways that wrap an upstream failure in an OpenAI error object often
    put the upstream's whole HTML page in ``message``.
    """
    if not _looks_like_html(message, ""):
        return message
    headline, kind, _page = _read(message.encode("utf-8", "replace"), "text/html")
    return _compose(headline, kind + " in the error message", None)
