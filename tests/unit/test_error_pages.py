"""error_pages: proxy and gateway error bodies become one line; never the raw page."""

from __future__ import annotations

import gzip

import pytest

from llmload.request.error_pages import HEADLINE_CHARS, describe_error_page, readable_message, summarize_body

_GOOGLE_413 = (
    b'<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n  <meta name=viewport content="width=device-width">\n'
    b"  <title>Error 413 (Request Entity Too Large)!!1</title>\n  <style>*{margin:0;padding:0}</style>\n"
    b"  <a href=//www.google.com/><span id=logo aria-label=Google></span></a>\n"
    b"  <p><b>413.</b> <ins>That\xe2\x80\x99s an error.</ins>\n"
)
_ALB_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n"
    b"</body>\r\n</html>\r\n"
)
_NO_TITLE = b"<html><body><script>var a = '<b>x</b>';</script>\n\n   <p>  Too   many\n requests </p></body></html>"


@pytest.mark.parametrize(
    ("body", "ctype", "expected"),
    [
        (_GOOGLE_413, "text/html", '"Error 413 (Request Entity Too Large)!!1" (an HTML error page)'),
        (_ALB_502, "text/html", '"502 Bad Gateway" (an HTML error page)'),
        (_ALB_502, "", '"502 Bad Gateway" (an HTML error page)'),  # recognised without a Content-Type
        (_NO_TITLE, "text/html", '"Too many requests" (an HTML error page)'),
        (b"<html><body></body></html>", "text/html", "an HTML error page without a title or text"),
        (b"\n\n  Bad Gateway  \nmore\n", "text/plain", '"Bad Gateway" (a text error page)'),
        (b'{"detail":\n  "Not Found"}', "application/json", '{"detail":"Not Found"} (a JSON body)'),
        (b"  \r\n", "text/plain", "an empty body"),
    ],
)
def test_error_pages_summarize_body_keeps_one_readable_line(body, ctype, expected):
    assert summarize_body(body, ctype) == expected


def test_error_pages_summarize_body_names_compressed_and_binary_bodies():
    assert "Content-Encoding: gzip" in summarize_body(gzip.compress(b"<html>x</html>"), "text/html")
    assert "not text" in summarize_body(bytes(range(128, 256)) * 4, "application/octet-stream")


def test_error_pages_long_title_is_cut():
    title = "x" * 1000
    summary = summarize_body(f"<html><title>{title}</title></html>".encode(), "text/html")
    assert len(summary) < HEADLINE_CHARS + 40
    assert summary.startswith('"' + "x" * 50)


def test_error_pages_describe_names_server_and_request_size_for_413():
    line = describe_error_page(413, _ALB_502.replace(b"502 Bad Gateway", b"413 Too Large"), "text/html",
                               server="awselb/2.0", request_bytes=3_145_728)  # fmt: skip
    assert line.startswith('"413 Too Large" (an HTML error page, Server: awselb/2.0); the request body was 3,145,728')
    assert "\n" not in line


def test_error_pages_describe_gives_gateway_hints_only_for_pages():
    assert "timed out waiting for the model server" in describe_error_page(504, b"Gateway Timeout", "text/plain")
    json_body = describe_error_page(503, b'{"detail": "loading"}', "application/json")
    assert json_body == '{"detail":"loading"} (a JSON body)'


def test_error_pages_readable_message_unwraps_a_page_inside_an_error_object():
    wrapped = "<html><head><title>502 Bad Gateway</title></head><body><h1>502</h1></body></html>"
    assert readable_message(wrapped) == '"502 Bad Gateway" (an HTML error page in the error message)'
    assert readable_message("model 'x' not found") == "model 'x' not found"
    assert readable_message("<unk> token is not allowed") == "<unk> token is not allowed"


def test_nc29_error_pages_505_names_http_version_whatever_the_body():
    for body, ctype in ((b"", ""), (b'{"detail": "h2 only"}', "application/json"), (b"HTTP/2 required", "text/plain")):
        assert "the server refuses HTTP/1.1" in describe_error_page(505, body, ctype)
