"""llmload: a Locust-based load generator for OpenAI-compatible LLM servers.

Importing ``llmload`` has no side effects and does not import Locust (which
monkey-patches the standard library with gevent on import). ``ChatUser``,
``CompletionUser``, ``ResponsesUser``, ``MessagesUser``, ``EmbeddingsUser`` and
``hooks`` are loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmload.aggregate.histogram import LatencyHistogram
from llmload.aggregate.stats import LLMStats
from llmload.errors import (
    ConfigError,
    DatasetError,
    HTTPStatusError,
    LLMLoadError,
    RequestError,
    RequestTimeout,
    ServerStreamError,
    SSEProtocolError,
    StreamError,
    ThrottledError,
    TokenizerError,
    TransportError,
    WireFormatError,
)
from llmload.request.record import ErrorInfo, ITLKind, Outcome, RequestRecord, TokenCount, TokenSource
from llmload.request.sse import SSEDecoder, SSEEvent
from llmload.settings.config import RunConfig, Timeouts

if TYPE_CHECKING:
    from llmload.edge.api_users import EmbeddingsUser, MessagesUser, ResponsesUser
    from llmload.edge.users import ChatUser, CompletionUser

from llmload.version import __version__ as __version__

__all__ = [
    "ChatUser",
    "CompletionUser",
    "ConfigError",
    "DatasetError",
    "EmbeddingsUser",
    "ErrorInfo",
    "HTTPStatusError",
    "ITLKind",
    "LLMLoadError",
    "LLMStats",
    "LatencyHistogram",
    "MessagesUser",
    "Outcome",
    "RequestError",
    "RequestRecord",
    "RequestTimeout",
    "ResponsesUser",
    "RunConfig",
    "SSEDecoder",
    "SSEEvent",
    "SSEProtocolError",
    "ServerStreamError",
    "StreamError",
    "ThrottledError",
    "Timeouts",
    "TokenCount",
    "TokenSource",
    "TokenizerError",
    "TransportError",
    "WireFormatError",
]

_LAZY = {
    "ChatUser": "llmload.edge.users",
    "CompletionUser": "llmload.edge.users",
    "EmbeddingsUser": "llmload.edge.api_users",
    "MessagesUser": "llmload.edge.api_users",
    "ResponsesUser": "llmload.edge.api_users",
}


def __getattr__(name: str) -> Any:
    """Load the Locust user classes on first access (importing them imports Locust)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmload' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
