"""What a streamed body carried before it failed: the facts every stream failure message states.

A stream failure says what was actually seen, so a reader can tell a server
that sent nothing from one that sent everything but the last blank line:
events (and how many carried tokens), body bytes, the finish reason,
``[DONE]``, whether the HTTP message ended, and, when no event could be
read, what the body began with (a compressed body, a proxy's page).
"""

from __future__ import annotations

from llmload.request.chunks import ReplyAccumulator
from llmload.request.error_pages import GZIP_MAGIC, summarize_body

__all__ = ["StreamSeen"]


# A proxy that compresses text/event-stream sends gzip bytes the SSE decoder cannot read.
_COMPRESSED = "the body is {0}-compressed (Content-Encoding: {0}): turn compression off in the proxy or gateway"


class StreamSeen:
    """What a streamed body carried before it failed, for the failure message."""

    __slots__ = ("acc", "body_ended", "content_encoding", "content_type", "head", "size")

    def __init__(self, content_encoding: str | None, content_type: str) -> None:
        self.content_encoding = (content_encoding or "").strip().lower()
        self.content_type = content_type
        self.acc: ReplyAccumulator | None = None
        self.head = b""  # the first bytes of the body
        self.size = 0  # body bytes read
        self.body_ended = False  # the HTTP message ended cleanly

    def describe(self) -> str:
        """e.g. ``seen: 4 events (2 with tokens), 812 bytes, finish_reason 'stop', no [DONE], body ended``.

        Events count every event received, the one that could not be read included.
        """
        acc = self.acc
        events = acc.events + acc.unread_events if acc is not None else 0
        tokens = len(acc.token_times_s) if acc is not None else 0
        finish = acc.finish_reason if acc is not None else None
        done = acc is not None and acc.done
        parts = [
            f"seen: {events} event{'' if events == 1 else 's'} ({tokens} with tokens)",
            f"{self.size} bytes",
            f"finish_reason {finish!r}" if finish is not None else "no finish_reason",
            "[DONE]" if done else "no [DONE]",
            "body ended" if self.body_ended else "body not ended",
        ]
        text = ", ".join(parts)
        if self.content_encoding not in ("", "identity") or self.head.startswith(GZIP_MAGIC):
            return f"{text}; " + _COMPRESSED.format(self.content_encoding or "gzip")
        if not events and self.head:
            if self.content_type != "text/event-stream" and self.head.lstrip()[:1] == b"<":
                return f"{text}; not an event stream but {summarize_body(self.head, self.content_type)}"
            text += f"; body began {self.head[:120]!r}"
        return text
