"""Public test support: a scripted HTTP/1.1 server, builders for a compact stream notation, record builders.

``ScriptedServer`` answers each request with a ``Reply``: headers at a given
time, then ``Write`` steps, each sent as exactly one TCP send (TCP_NODELAY,
one HTTP chunk when chunked) at ``at_ms`` milliseconds after the request was
fully received. It runs on plain sockets and threads (no gevent), listens on
``127.0.0.1`` port 0, records every request and stops cleanly::

    script = Reply(writes=[W(100, sse(ROLE, C({"content": "Hi"}))), W(120, sse(CF("stop"), "[DONE]"))])
    with ScriptedServer(script) as srv:
        ...  # send requests to srv.base_url
        assert srv.requests[0].json()["stream"] is True

Request bodies must carry ``Content-Length`` (every llmload transport sends one).

``ok_record``, ``failed_record`` and ``stats_of`` build the ``RequestRecord`` and
``LLMStats`` values that statistics, exporter and report tests feed in::

    stats = stats_of(ok_record((0.1, 0.12, 0.14), end_s=0.15), failed_record("HTTP 404", status=404))
"""

from llmload.testing.notation import CF, ROLE, TF, TU, C, T, U, W, Write, sse, typed
from llmload.testing.records import T0_UNIX, failed_record, ok_record, spaced_s, stats_of
from llmload.testing.server import Ending, Framing, ReceivedRequest, Reply, ScriptedServer, SendLog, json_reply

__all__ = [
    "CF",
    "ROLE",
    "T0_UNIX",
    "TF",
    "TU",
    "C",
    "Ending",
    "Framing",
    "ReceivedRequest",
    "Reply",
    "ScriptedServer",
    "SendLog",
    "T",
    "U",
    "W",
    "Write",
    "failed_record",
    "json_reply",
    "ok_record",
    "spaced_s",
    "sse",
    "stats_of",
    "typed",
]
