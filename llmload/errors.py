"""The one exception tree of llmload.

::

    LLMLoadError
    ├── ConfigError          bad option value, caught before any load is sent
    │   └── InvalidOptionsError  every option whose value is refused, at once
    ├── DatasetError         unusable prompt source
    ├── TokenizerError       tokenizer cannot be loaded (never fetched silently)
    ├── RequestError         one request failed; becomes a failed RequestRecord, never escapes a user
    │   ├── TransportError   connect/reset/timeout
    │   │   ├── RequestTimeout         connect or read-idle timeout
    │   │   ├── ProxyUnreachableError  the forward proxy refused the connection or did not resolve
    │   │   ├── ConnectionClosedError  peer closed the connection before the end of the HTTP message
    │   │   └── WrongProtocolError     the server answered in another protocol (HTTP/2 frames, TLS)
    │   ├── HTTPStatusError  non-2xx status
    │   │   └── ThrottledError   429, or 503 with Retry-After: the server asks the client to slow down
    │   └── StreamError      the body could not be read as a valid reply
    │       ├── SSEProtocolError   malformed SSE or JSON
    │       └── ServerStreamError  the server sent an error object in a 2xx body
    ├── WireFormatError      worker→master payload of an unknown version or shape
    └── ServerMetricsError   an inference server's /metrics answer is not Prometheus text

Every message names the offending value and the fix.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConnectionClosedError",
    "DatasetError",
    "HTTPStatusError",
    "InvalidOptionsError",
    "LLMLoadError",
    "ProxyUnreachableError",
    "RequestError",
    "RequestTimeout",
    "SSEProtocolError",
    "ServerMetricsError",
    "ServerStreamError",
    "StreamError",
    "ThrottledError",
    "TokenizerError",
    "TransportError",
    "WireFormatError",
    "WrongProtocolError",
]


class LLMLoadError(Exception):
    """Root of every error llmload raises on purpose."""


class ConfigError(LLMLoadError):
    """An option value is invalid; raised before any load is sent.

    Attributes:
        options: the flags whose values are refused (``--max-tokens``, ``-u``), when the check knows
            them; a run blocked by it records their values as given (``run.refused_options``).
    """

    def __init__(self, message: str, *, options: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.options = options


class InvalidOptionsError(ConfigError):
    """Every option whose value was refused, each with its own message (the flag first, then the message).

    One refused option reads as its own message; several are numbered in one
    message, so a run (or the web form) reports all of them at once.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        if len(problems) == 1:
            text = problems[0][1]
        else:
            text = f"{len(problems)} invalid options: " + " ".join(
                f"({n}) {message}" for n, (_flag, message) in enumerate(problems, 1)
            )
        super().__init__(text, options=tuple(flag for flag, _message in problems))


class DatasetError(LLMLoadError):
    """A prompt source cannot be used."""


class TokenizerError(LLMLoadError):
    """A tokenizer cannot be loaded locally."""


class RequestError(LLMLoadError):
    """One request failed.

    Its ``repr`` is its message: Locust's failure table (console, web UI,
    CSV) shows ``repr()`` of the request event's exception, and groups rows by
    that text; the exception's class name and quotes would only get in the way.
    """

    def __repr__(self) -> str:
        """The message alone (what Locust shows in its failure table)."""
        return str(self)


class TransportError(RequestError):
    """Connecting, sending or reading failed (refused, reset, timeout)."""


class RequestTimeout(TransportError):  # noqa: N818 - name fixed by the client/transport interface
    """No connection, or no bytes, within the configured connect or idle timeout."""


class ProxyUnreachableError(TransportError):
    """The forward proxy (``HTTP_PROXY`` and friends) refused the connection or its name did not resolve.

    The target was never reached, so nothing is known about it: messages name
    the proxy and its variable, not the server.
    """


class ConnectionClosedError(TransportError):
    """The peer closed the connection before the end of the HTTP message.

    A clean end of the body (terminating chunk, full Content-Length, or close of a
    read-until-close body) is not an error; this is raised only for truncated bodies.
    """


class WrongProtocolError(TransportError):
    """The server answered an HTTP/1.1 request in another protocol: HTTP/2 frames (h2c-only, gRPC) or TLS.

    The message names what the first bytes were and the fix.
    """


class HTTPStatusError(RequestError):
    """The server answered with a non-2xx status."""


class ThrottledError(HTTPStatusError):
    """The server answered 429 (or 503 with ``Retry-After`` or a rate-limit body): it asks the client to slow down."""


class StreamError(RequestError):
    """The reply body could not be read as a valid completion."""


class SSEProtocolError(StreamError):
    """The SSE framing or an event's JSON is malformed."""


class ServerStreamError(StreamError):
    """The server reported an error inside a 2xx body or stream."""


class WireFormatError(LLMLoadError):
    """A worker payload has an unknown version or shape."""


class ServerMetricsError(LLMLoadError):
    """A ``/metrics`` answer could not be read as Prometheus text (the run goes on without it)."""
