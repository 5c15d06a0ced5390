"""One request over a ``Transport``: send, read bytes as they arrive, decode, timestamp, account.

``StreamingClient.run`` turns every per-request outcome into a
``RequestRecord`` and never raises for it. Metric definitions are those of
``record.py`` (vLLM ``benchmark_serving`` / guidellm):

- t0 is taken once the connection is ready (``Transport.connect``), right
  before ``Transport.post`` writes the request; connection set-up is
  ``RequestRecord.connect_s``, outside TTFT and E2E. Every read is stamped
  when its bytes arrived: the client's clock when the read returned, minus
  the time they had waited (``Response.read_age_s``, from the kernel's
  receive stamp where the transport has one). An event's time is the time
  of the read that completed it, but for the first token-bearing event when
  it begins its read (no event of the read before it, none begun in an
  earlier read): the read's first bytes arrived before the poll that found
  the socket readable returned (``Response.read_first_age_s``), which times
  that token when it is earlier than the read's stamp (the kernel stamps a
  merged buffer with its newest segment). ``Response.read_lag_s`` (kept per read in
  ``RequestRecord.read_lags_s``) is how long before the read's stamp its
  oldest byte may have arrived: it bounds how far any event time of the read
  can be off. A read of one event and nothing past it is timed by that
  event's own stamp: its lag is 0, however late the client read it. Once
  the first token is timed, a receive that is exactly one plain token event
  is accounted by that rule as the loop receives it (``LoopTokens``); the
  user greenlet reads and decodes the rest.
- Token-bearing events carry non-empty ``content``/``text``,
  ``reasoning_content``/``reasoning`` or a ``tool_calls`` delta; role-only
  and usage-only chunks do not count (vllm PR #3768, sglang PR #29251).
- ``usage`` may be cumulative (vLLM ``continuous_usage_stats``): the last
  value wins, never a sum (vllm-project/production-stack PR #873).
- The reply ends at ``[DONE]``; or, after a ``finish_reason``, at the
  first of: a clean end of body, the peer closing the connection, the usage
  chunk with ``"choices": []`` (with ``stream_options.include_usage`` the
  last chunk before ``[DONE]``), or ``FINISH_WAIT_S`` without any byte after
  a finish chunk that carried no token. An event pending at the end of the
  body (or at the close) without its blank line is still read; a close
  before any finish_reason, or inside an event, is a failure. After
  ``[DONE]`` or the usage chunk the rest of the body is read for at most
  ``DRAIN_S`` so the connection can be reused; a server that holds it open
  longer loses the connection, not the user's time. E2E ends at the event
  that ended the reply; ``StreamingClient.reply_end`` says which it was. A failed
  stream's message says what was seen (``StreamSeen``: events, bytes, finish
  reason, ``[DONE]``, whether the body ended). A streamed request answered
  with one JSON body is a reply that did not stream (no token times).
- An ``error`` object in a 2xx body or stream is a failure
  (vllm PR #57519, runpod-workers/worker-vllm #57); a 2xx reply without any
  generated token is ``EMPTY`` (vllm PR #5895).
- A finish reason that is not a normal end (``llmload.request.finish``:
  ``abort``, ``error`` …) fails the reply as ``SERVER_ERROR`` in category
  ``finish_reason <reason>``, even after ``[DONE]``; degenerate output
  (``llmload.request.degenerate``: one token repeated, the same text for
  different prompts) fails it too, checked once at the end of the reply.

Events are decoded and accounted by ``llmload.request.stream`` (each event's JSON
read into a typed ``ChunkDelta`` by ``chunks.py`` at once, at the boundary;
plain token deltas skip the JSON decoder, see ``DeltaTemplate``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Protocol

from llmload.errors import ConnectionClosedError, TransportError
from llmload.request.chunks import ReplyAccumulator, parse_chunk, read_server_error
from llmload.request.degenerate import (
    DEGENERATE_REPEATED,
    DEGENERATE_SAME_TEXT,
    MIN_REPEAT_UNITS,
    MIN_SAME_TEXT_PIECES,
    SAME_TEXT_WINDOW,
    SameTextWatch,
    repeated_piece,
    sample_of,
)
from llmload.request.error_pages import GZIP_MAGIC, describe_error_page, readable_message, summarize_body
from llmload.request.failures import (
    IncompleteReplyError,
    Phase,
    TotalTimeout,
    classify,
    classify_status,
    parse_retry_after,
)
from llmload.request.finish import abnormal_finish_category, is_normal_finish
from llmload.request.payloads import LLMRequest
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource, UsageNote
from llmload.request.seen import StreamSeen
from llmload.request.stream import LoopTokens, ReplyFailure, ReplyReader, new_scanner
from llmload.request.tokens import TokenCounter, resolve_output_tokens, resolve_prompt_tokens
from llmload.request.typed_events import (
    TypedReplyReader,
    parse_embeddings_body,
    parse_messages_body,
    parse_responses_body,
    response_id,
)
from llmload.settings.config import Timeouts

__all__ = ["DRAIN_S", "FINISH_WAIT_S", "ReplyEnd", "Response", "StreamingClient", "Transport"]

_MESSAGE_CHARS = 500  # ErrorInfo.message limit
_ERROR_BODY_BYTES = 64 * 1024  # read at most this much of a non-2xx body
_JSON_BODY_BYTES = 16 * 1024 * 1024  # a non-streamed reply larger than this is refused
_DRAIN_BYTES = 64 * 1024  # bytes read after [DONE] to finish the HTTP message (keeps the connection)
_HEAD_BYTES = 1024  # the first bytes of a streamed body kept for failure messages
DRAIN_S = 0.005
"""Seconds the rest of a body is read after ``[DONE]`` for the connection to be reused; then it is dropped.

Servers end the body with (or right after) the write that carries ``[DONE]``:
the end arrives in the same read or within a fraction of a millisecond. A body
still open after a few ms is held open on purpose (openai-python #3440,
``: ping`` keep-alives from proxies, LiteLLM PR #37322) and may stay so for
seconds; a new connection costs about one round trip (plus a TLS handshake),
far less than waiting for such a body, so the user moves on at once.
"""
FINISH_WAIT_S = 1.0
"""Seconds a reply is waited for after a chunk that carries a finish_reason and no token, when nothing follows.

A server writes the usage chunk, ``[DONE]`` and the end of the body right
after its finish chunk (the same loop turn: well under a millisecond, tens of
ms on a loaded server). A body that stays silent this long after the finish is
held open by the server or a proxy: the reply is taken as complete (success,
E2E at the finish chunk), the connection is dropped, and the preflight warns
once that the server sent neither ``[DONE]`` nor an end of body. Token chunks
that each carry a finish_reason (litellm #2195) do not start the wait: those replies
are read on to ``[DONE]``.
"""


class ReplyEnd(Enum):
    """What ended the last streamed reply that succeeded (``StreamingClient.reply_end``)."""

    DONE = "[DONE]"
    BODY_END = "end of body after the finish_reason"
    USAGE = "the usage chunk after the finish_reason (no [DONE] within the drain)"
    CLOSE = "connection closed after the finish_reason"
    FINISH_WAIT = f"nothing for {FINISH_WAIT_S:g} s after the finish_reason (neither [DONE] nor an end of body)"


# Enum members read as module globals on the per-request path (``llmload.request.record`` says why)
_SEND, _STREAM, _BODY = Phase.SEND, Phase.STREAM, Phase.BODY
_END_DONE, _END_USAGE = ReplyEnd.DONE, ReplyEnd.USAGE
_REPLY_FIELDS = frozenset({"choices", "content", "output", "data"})  # chat/completions, messages, responses, embeddings
_FOREVER_S = float("inf")  # a read_within that waits as read_some does, but is woken at the first bytes
_CHUNK_ENDPOINTS = frozenset({"chat", "completions"})  # replies of OpenAI completion chunks (``ReplyReader``)
_STREAM_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


class Response(Protocol):
    """An HTTP response whose status and headers have arrived.

    A transport's response may also take a ``consumer`` attribute (None until
    set): a callable it gives the body bytes of each kernel-stamped receive as
    it comes, before queuing them for ``read_some`` (``GeventResponse``). The
    client sets it to account plain token events there (``LoopTokens``); a
    response without the attribute hands every receive to ``read_some``.
    """

    status: int
    content_type: str  # lower-cased media type without parameters; "" if absent
    read_age_s: float  # seconds since the newest bytes of the last read arrived, when it returned (>= 0)
    # how many seconds before the last read's stamp its oldest bytes may have arrived (>= 0): a bound
    # of how far the times given to them are off (how late the read came after the stamp is no error)
    read_lag_s: float
    # seconds since the oldest bytes of the last read had arrived at the latest (>= read_age_s): the
    # poll that found the socket readable returned by then; read_age_s when not known
    read_first_age_s: float
    read_stamped: bool  # True when both came from kernel receive stamps

    @property
    def sent_age_s(self) -> float:
        """Seconds since the request was handed to the kernel, read when post returned (>= 0); 0 = not known."""

    # how long that hand-over took (the request went on the wire within it; seconds); 0 = not timed
    send_lag_s: float

    retry_after: str | None  # the Retry-After header's value; None if absent

    def read_some(self) -> bytes:
        """Return the body bytes of the next receive, in order; b"" at the clean end of the body.

        A transport may hand bytes out a little after they arrived (the
        production one batches them, ``llmload.net.transport``): the ``read_*``
        times say when they arrived, so no measured time depends on when this
        returns. ``read_within`` and ``drain``, which wait on time, return at the
        first bytes.

        Raises:
            RequestTimeout: no bytes within the idle timeout.
            ConnectionClosedError: the body was cut short.
            TransportError: the connection failed.
        """
        ...

    def header(self, name: str) -> str | None:
        """The value of the response header ``name`` (any case); None if absent."""
        ...

    def read_within(self, within_s: float) -> bytes | None:
        """As ``read_some``, but None when no bytes arrive within ``within_s`` s (the body is then still open)."""
        ...

    def drain(self, within_s: float, limit_bytes: int) -> bool:
        """Read and discard the rest of the body for at most ``within_s`` s and ``limit_bytes``; True if it ended.

        Never raises for the connection's failures: the body then did not end.
        """
        ...

    def close(self) -> None:
        """Release the connection; discard it if the body was not fully read. Idempotent."""
        ...


class Transport(Protocol):
    """Sends one request and returns once status and headers are in."""

    def connect(self) -> None:
        """Have a connection ready so that ``post`` writes the request at once.

        Raises:
            RequestTimeout: no connection within the connect timeout.
            TransportError: refused, DNS or TLS failure.
        """
        ...

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST ``body`` to ``path``.

        Raises:
            RequestTimeout: connect or header wait timed out.
            TransportError: refused, reset, DNS or TLS failure.
        """
        ...


class StreamingClient:
    """Runs one request at a time over a transport and measures it."""

    def __init__(
        self,
        transport: Transport,
        *,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
        token_counter: TokenCounter | None = None,
        total_timeout_s: float = Timeouts().total_s,
        keep_text: bool = False,
        compare_tokens: bool = False,
        same_text: SameTextWatch | None = None,
    ) -> None:
        """Create a client.

        Args:
            transport: sends requests (one connection per client is typical).
            clock: monotonic seconds, for every duration.
            wall_clock: Unix seconds, only to label when a request started.
            token_counter: local tokenizer used when the server sends no usage.
            total_timeout_s: limit on one request from send to end of body,
                checked after every read (the transport's idle timeout bounds
                each read).
            keep_text: put the generated text in ``RequestRecord.output_text``
                (multi-turn chat needs the reply).
            compare_tokens: when the server sends usage, also count the output
                with ``token_counter`` into ``RequestRecord.client_completion_tokens``
                (a diagnostic of how the two disagree; one tokenizer call per request).
            same_text: the process's watch of recent replies, shared by its
                clients (the same-text rule of ``llmload.request.degenerate``);
                None: that rule is not applied.
        """
        self._transport = transport
        self._clock = clock
        self._wall_clock = wall_clock
        self._token_counter = token_counter
        self._total_timeout_s = total_timeout_s
        self._keep_text = keep_text
        self._compare_tokens = compare_tokens and token_counter is not None
        self._scan_json = new_scanner()
        self._same_text = same_text
        self._pieces: list[str] = []  # the last reply's generated text pieces (for the degenerate-output rules)
        self.request_sent = False
        self.reply_end: ReplyEnd | None = None  # what ended the last streamed reply (None: not streamed, or failed)

    def run(self, request: LLMRequest) -> RequestRecord:
        """Send ``request``, read the whole reply and return its record.

        Never raises for a per-request failure: those become the record's
        ``outcome`` and ``error`` (``classify``). ``BaseException``s that are
        not ``Exception`` (``GreenletExit``, ``KeyboardInterrupt``) propagate
        after the response is closed; ``request_sent`` then tells whether the
        request had been handed to ``Transport.post`` (the server may have it:
        a stop counts it as cancelled) or not (the server never saw it).
        """
        record = RequestRecord(
            endpoint=request.endpoint,
            model=request.model,
            started_at_unix=self._wall_clock(),
            requested_prompt_tokens=request.requested_prompt_tokens,
            requested_output_tokens=request.min_output_tokens,
        )
        clock = self._clock
        self.request_sent = False
        self.reply_end = None
        self._pieces = []
        phase = _SEND
        seen: StreamSeen | None = None
        t0 = clock()
        try:
            self._transport.connect()
            t_ready = clock()
            record.connect_s = t_ready - t0
            t0 = t_ready  # the request's clock starts on a ready connection
            self.request_sent = True  # from here on the server may have the request
            headers = _STREAM_HEADERS if request.stream else _JSON_HEADERS
            if request.headers:
                headers = {**headers, **dict(request.headers)}
            response = self._transport.post(request.path, request.body, headers)
            t_headers = clock()
            sent_age_s = response.sent_age_s
            if sent_age_s:
                # the request's clock starts when it went to the kernel: building it (or a garbage
                # collection meanwhile) is the client's delay before the send, part of connect_s
                t_sent = t_headers - sent_age_s
                if t_sent > t0:
                    record.connect_s = (record.connect_s or 0.0) + (t_sent - t0)
                    t0 = t_sent
                # the clock starts before the hand-over: a kernel that held the client inside it made
                # every time of this request up to that much long (a bound, like a read lag)
                record.send_lag_s = response.send_lag_s or None
            record.headers_s = t_headers - t0
            try:
                status, ctype = response.status, response.content_type
                if not 200 <= status < 300:
                    self._read_http_error(response, record, t0, len(request.body))
                elif ctype == "text/event-stream" or (request.stream and not _is_json(ctype)):
                    phase = _STREAM
                    seen = StreamSeen(response.header("content-encoding"), ctype)
                    self._read_stream(response, record, request, t0, seen)
                else:
                    phase = _BODY
                    self._read_json(response, record, request, t0)
            finally:
                response.close()
        except Exception as exc:
            self.reply_end = None
            failure = classify(phase, exc)
            if failure is None:
                raise
            end_s = record.end_s if failure.at_last_read and record.end_s is not None else clock() - t0
            message = str(exc)
            if seen is not None and failure.outcome is not Outcome.SERVER_ERROR:  # the server's own words suffice
                message = f"{message.rstrip('. ')}; {seen.describe()}"
            return _fail(record, failure.outcome, failure.category, message, end_s, status=failure.status)
        if record.error is None and not is_normal_finish(record.finish_reason):
            _fail_finish(record)
        if record.error is None and request.endpoint != "embeddings":  # embeddings generate nothing
            _check_empty(record)
            if record.error is None:
                _check_degenerate(record, self._pieces, request, self._same_text)
        self._pieces = []
        return record

    # ── replies ──────────────────────────────────────────────────────────
    def _read_stream(
        self, response: Response, record: RequestRecord, request: LLMRequest, t0: float, seen: StreamSeen
    ) -> None:
        """Read an SSE reply into ``record``; raises what ``FAILURES`` lists for ``Phase.STREAM``.

        ``record.end_s`` is the arrival of the last read (or the end of the
        body), failed or not; what arrived is accounted either way. ``seen``
        gathers what arrived, for the failure message.
        """
        clock, read = self._clock, response.read_some
        lags = record.read_lags_s
        deadline_s = self._total_timeout_s
        # pieces: for a tokenizer, the text, degenerate output
        reader: ReplyReader | TypedReplyReader = (
            ReplyReader(self._scan_json, keep_text=True)
            if request.endpoint in _CHUNK_ENDPOINTS
            else TypedReplyReader(request.endpoint, keep_text=True)
        )
        acc, feed = reader.acc, reader.feed
        seen.acc = acc
        t = 0.0
        size = 0
        json_head = b""
        first_pending = True
        # after the first token, plain token events are accounted in the loop as they arrive (LoopTokens):
        # the transport must take a consumer, and the reader must be one of completion chunks
        tap: LoopTokens | None = None
        takes: Any = response  # a transport's response that takes a consumer (GeventResponse.consumer), if it does
        tappable = type(reader) is ReplyReader and getattr(takes, "consumer", False) is None
        try:
            while True:
                if tap is not None:
                    tap.t = t
                try:
                    if reader.finish_at_s is None or reader.has_partial_event:
                        # woken at each receive until the first token (LoopTokens then take the plain ones); the
                        # total timeout is judged by arrival times, as for every read, not by the clock here
                        got = response.read_within(_FOREVER_S) if first_pending and tappable else read()
                        if got is None:
                            continue  # not for _FOREVER_S: the read timeout comes first
                        data = got
                    else:  # a finish chunk was the last event: wait a bounded time for usage, [DONE] or the end
                        wait_s = reader.finish_at_s + FINISH_WAIT_S - t  # t: the last read's arrival
                        got = response.read_within(wait_s) if wait_s > 0 else None
                        if got is None:
                            self.reply_end = ReplyEnd.FINISH_WAIT
                            break
                        data = got
                except ConnectionClosedError as closed:
                    if tap is not None and tap.t > t:
                        t = tap.t
                    if acc.finish_reason is None and reader.has_partial_event:
                        # the last event, its blank line never sent before the close, may carry the finish
                        unread = acc.unread_events
                        try:
                            reader.finish(t)
                        except ReplyFailure as failure:
                            if failure.outcome is Outcome.SERVER_ERROR:
                                raise  # an error object in that event says more than the close
                            acc.unread_events = unread  # a cut event is no event the close's message counts
                    if acc.finish_reason is None:
                        raise closed
                    reader.finish(t)  # a close after the finish ends the reply; a cut event still fails
                    self.reply_end = ReplyEnd.CLOSE
                    break
                if tap is not None and tap.t > t:
                    t = tap.t  # tokens accounted in the loop while this read waited
                if not data:
                    seen.body_ended = True
                    reader.finish(t)  # an event pending without its blank line arrived with the last read
                    t = clock() - t0
                    break
                # as _arrived (inlined: once per read)
                stamped = response.read_stamped
                if stamped:
                    lags.append(response.read_lag_s)
                else:
                    record.unstamped_reads += 1
                arrived_s = clock() - t0 - response.read_age_s
                t_before = t
                if arrived_s > t:  # noqa: PLR1730 - a plain comparison, once per read
                    t = arrived_s
                if not size:
                    seen.head = data[:_HEAD_BYTES]
                    if seen.content_type != "text/event-stream" and data.lstrip()[:1] == b"{":
                        json_head = data  # one JSON body under another media type: a server that did not stream
                        size = len(data)
                        break
                size += len(data)
                events = acc.events
                boundary = first_pending and not reader.has_partial_event
                feed(data, t)
                if first_pending and acc.token_times_s:
                    first_pending = False
                    if tappable:
                        tap = LoopTokens(reader, lags, clock, t0, deadline_s)  # type: ignore[arg-type]
                        takes.consumer = tap.take
                    first_age_s = response.read_first_age_s
                    if (
                        stamped
                        and boundary
                        and first_age_s > response.read_age_s
                        and acc.events - events == len(acc.token_times_s)
                    ):
                        first_s = arrived_s + response.read_age_s - first_age_s
                        if first_s < t:
                            acc.token_times_s[0] = first_s if first_s > t_before else t_before
                            if acc.first_content_s == t:
                                acc.first_content_s = acc.token_times_s[0]
                # one timed event and no bytes past it (a later segment's would own the stamp; the read
                # then ends inside an event): the stamp is that event's own arrival, not a pile-up's
                if stamped:
                    if acc.events - events <= (2 if reader.usage_ended else 1) and (
                        data[-2:] == b"\n\n" or data[-4:] == b"\r\n\r\n"  # a slice: cheaper than endswith
                    ):
                        lags[-1] = 0.0
                    elif tappable:  # several events in one read: its lag spans the loop's hold, so hold the least
                        takes.note_several_events()
                if acc.done:
                    break
                if reader.usage_ended:
                    self.reply_end = ReplyEnd.USAGE
                    break
                if t > deadline_s:
                    raise TotalTimeout(f"no complete reply within {deadline_s:g} s")
        finally:
            if tap is not None:
                takes.consumer = None
                size += tap.size
                t = max(t, tap.t)
            seen.size = size
            self._fill(record, acc, request)
            record.end_s = t
        if json_head:
            self._read_unlabelled_json(response, record, request, t0, seen=seen, first=json_head)
            return
        if acc.done:
            self.reply_end = _END_DONE
            response.drain(DRAIN_S, _DRAIN_BYTES)
        elif self.reply_end is _END_USAGE:
            response.drain(DRAIN_S, _DRAIN_BYTES)  # for [DONE] and the end of the body; else the connection goes
        elif self.reply_end is None and acc.finish_reason is not None:
            self.reply_end = ReplyEnd.BODY_END
        elif acc.finish_reason is None:
            if not acc.events and seen.head.lstrip()[:1] == b"{":  # JSON lines are no SSE field: nothing dispatched
                raise IncompleteReplyError(
                    "one JSON body where an event stream was announced (Content-Type: text/event-stream, "
                    "no data: lines): a server or gateway that does not stream but labels its reply as a stream"
                )
            if request.endpoint not in _CHUNK_ENDPOINTS:
                final = "response.completed" if request.endpoint == "responses" else "message_stop"
                raise IncompleteReplyError(f"the body ended without a stop reason or {final} event")
            raise IncompleteReplyError("the body ended without a finish_reason or [DONE]")

    def _read_json(self, response: Response, record: RequestRecord, request: LLMRequest, t0: float) -> None:
        """Read a whole JSON reply into ``record``; raises what ``FAILURES`` lists for ``Phase.BODY``."""
        body, end_s = self._read_all(response, t0, _JSON_BODY_BYTES, record)
        record.end_s = end_s
        self._take_json(body, end_s, response, record, request)

    def _take_json(
        self, body: bytes, end_s: float, response: Response, record: RequestRecord, request: LLMRequest
    ) -> None:
        """Account a whole JSON reply whose last bytes arrived at ``end_s``; raises ``ValueError`` if not JSON."""
        try:
            obj = json.loads(body)
        except ValueError as exc:
            if body.lstrip()[:1] == b"<" or body.startswith(GZIP_MAGIC):  # a proxy's page, or a compressed body
                raise ValueError(f"not JSON but {summarize_body(body, response.content_type)}") from exc
            raise ValueError(f"{exc}: {body[:120]!r}") from exc
        # FastAPI's {"detail": ...} is an error in a 2xx body too when nothing of a reply came with it
        error = read_server_error(obj, None, http_body=type(obj) is dict and not _REPLY_FIELDS.intersection(obj))
        if error is not None:
            raise ReplyFailure(Outcome.SERVER_ERROR, error.category, error.message, response.status)
        acc = ReplyAccumulator()
        endpoint = request.endpoint
        if endpoint == "embeddings":
            acc.add(parse_embeddings_body(obj, request.inputs), end_s)
            self._fill(record, acc, request, streamed=False)
            record.completion_tokens = TokenCount.unknown()  # not applicable: embeddings generate nothing
            record.inputs = request.inputs
            record.streamed = False
            return
        if endpoint == "responses":
            acc.response_id = response_id(obj)
        acc.add(
            parse_responses_body(obj)
            if endpoint == "responses"
            else parse_messages_body(obj)
            if endpoint == "messages"
            else parse_chunk(obj),
            end_s,
        )
        self._fill(record, acc, request, streamed=False)
        record.streamed = False

    def _read_unlabelled_json(
        self,
        response: Response,
        record: RequestRecord,
        request: LLMRequest,
        t0: float,
        *,
        seen: StreamSeen,
        first: bytes,
    ) -> None:
        """A streamed request answered with one JSON body that is not labelled ``application/json``.

        Read as a non-streamed reply when it is valid JSON; otherwise an
        incomplete stream that names what the body began with. ``first``: the
        body's first read, which arrived at ``record.end_s``.
        """
        body, end_s = self._read_all(response, t0, _JSON_BODY_BYTES, record, first=first, first_s=record.end_s or 0.0)
        record.end_s = end_s
        seen.size, seen.body_ended = len(body), len(body) < _JSON_BODY_BYTES
        try:
            self._take_json(body, end_s, response, record, request)
        except ValueError as exc:  # invalid JSON (ReplyFailure and SSEProtocolError are no ValueError)
            raise IncompleteReplyError(f"not an event stream and not valid JSON ({exc})") from exc

    def _read_http_error(self, response: Response, record: RequestRecord, t0: float, request_bytes: int) -> None:
        """Record a non-2xx reply as ``classify_status`` says (``THROTTLED`` ones with their ``Retry-After``).

        A body that is not an OpenAI error object (a proxy's HTML or text
        page) becomes one line: status, the page's title, the ``Server``
        header and, for a 413, ``request_bytes`` (``llmload.request.error_pages``).
        """
        status = response.status
        try:
            body, t = self._read_all(response, t0, _ERROR_BODY_BYTES, record)
        except (TotalTimeout, TransportError, OSError) as exc:  # the status decides; the body is only detail
            body, t = f"(body unreadable: {exc})".encode(), self._clock() - t0
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        error = read_server_error(obj, None, http_body=True)
        kind = error.kind if error is not None else None
        if error is not None:
            message = readable_message(error.message)
        else:
            message = describe_error_page(
                status,
                body,
                response.content_type,
                server=response.header("server"),
                request_bytes=request_bytes,
                upgrade=response.header("upgrade"),
            )
        failure = classify_status(status, kind, response.retry_after)
        if failure.outcome is Outcome.THROTTLED:
            record.retry_after_s = parse_retry_after(response.retry_after, self._wall_clock())
        _fail(record, failure.outcome, failure.category, message, t, status=status)

    def _arrived(self, response: Response, record: RequestRecord, t0: float, previous_s: float, lag_s: float) -> float:
        """When the bytes of the read that just returned arrived (seconds after send); notes ``lag_s`` in ``record``.

        Our clock when the read returned, minus how long its newest bytes had
        waited (``read_age_s``). The lag kept (``lag_s``) is ``read_lag_s``,
        which covers the oldest of them, or 0 for bytes whose newest stamp is
        the time of all they carry (one event, one body). Two
        reads of bytes stamped alike can map ~0.1 us apart (the kernel's clock
        and ours are read at different instants): arrival times never go back
        (``previous_s``), and never before the send.
        """
        if response.read_stamped:
            record.read_lags_s.append(lag_s)
        else:
            record.unstamped_reads += 1
        arrived_s = self._clock() - t0 - response.read_age_s
        return arrived_s if arrived_s > previous_s else previous_s

    def _read_all(
        self,
        response: Response,
        t0: float,
        limit: int,
        record: RequestRecord,
        *,
        first: bytes = b"",
        first_s: float = 0.0,
    ) -> tuple[bytes, float]:
        """The whole body (at most ``limit`` bytes) and when its last bytes arrived (seconds after send).

        ``first``: body bytes already read (at ``first_s``), if any. A body
        that already holds one whole JSON reply (``_whole_reply``) and gets
        nothing more within ``DRAIN_S`` ends there (a server or proxy may keep
        it open, as some do after ``[DONE]``): its end is the arrival of the
        reply's last bytes, and the connection, its message unfinished, is
        dropped at ``close``. Bytes that do come are read on, so a longer body
        (JSON lines) is judged whole.
        """
        parts = [first] if first else []
        size = len(first)
        t = first_s
        closes = first.rstrip()[-1:] == b"}"  # the last byte but whitespace read so far may end a JSON reply
        while True:
            if closes:  # the body's end is due; whitespace may come first
                try:
                    got = response.read_within(DRAIN_S)
                except ConnectionClosedError:
                    if not _whole_reply(parts):
                        raise
                    return b"".join(parts), t  # closed right after a whole JSON reply, as when held a while
                if got is None and _whole_reply(parts):
                    return b"".join(parts), t  # held open after a whole JSON reply
                data = response.read_some() if got is None else got
            else:
                data = response.read_some()
            if data.strip():
                closes = data.rstrip()[-1:] == b"}"
            if not data:
                return b"".join(parts), t if parts else self._clock() - t0
            t = self._arrived(response, record, t0, t, 0.0)  # one body: its end is the newest stamp, exact
            parts.append(data)
            size += len(data)
            if size > limit:
                return b"".join(parts)[:limit], t
            if t > self._total_timeout_s:
                raise TotalTimeout(f"no complete reply within {self._total_timeout_s:g} s")

    def _fill(
        self, record: RequestRecord, acc: ReplyAccumulator, request: LLMRequest, *, streamed: bool = True
    ) -> None:
        record.token_times_s = acc.token_times_s
        record.first_content_s = acc.first_content_s
        record.finish_reason = acc.finish_reason
        output = resolve_output_tokens(acc, counter=self._token_counter, streamed=streamed)
        record.completion_tokens, record.token_counts = output.count, output.token_counts
        record.hidden_reasoning_tokens, record.usage_notes = output.hidden_reasoning_tokens, output.notes
        record.reasoning_tokens, record.cached_prompt_tokens = acc.reasoning_tokens, acc.cached_tokens
        if acc.cached_tokens is not None and acc.prompt_tokens is not None and acc.cached_tokens > acc.prompt_tokens:
            record.cached_prompt_tokens = None  # more cached than sent: not a figure to add up
            record.usage_notes = (*record.usage_notes, UsageNote.CACHED_ABOVE_PROMPT)
        record.skipped_part, record.usage_without_completion = acc.skipped_part, acc.usage_without_completion
        record.response_id = acc.response_id
        record.prompt_tokens = resolve_prompt_tokens(
            server_tokens=acc.prompt_tokens, prompt_text=request.prompt_text, counter=self._token_counter
        )
        self._pieces = acc.pieces
        if self._keep_text:
            record.output_text = "".join(acc.pieces)
        if self._compare_tokens and self._token_counter is not None and output.count.source is TokenSource.SERVER:
            # Both counts exist: the server's usage wins; the tokenizer's is a diagnostic only.
            record.client_completion_tokens = self._token_counter.count("".join(acc.pieces))


# ── helpers ──────────────────────────────────────────────────────────────
def _whole_reply(parts: list[bytes]) -> bool:
    """True when the bytes read so far are one JSON object that is a whole reply, not the first line of a stream.

    A whole reply is known by its shape, not by what it lacks: a chat or
    completions reply (``choices`` whose first entry has a ``message`` or a
    ``text``), a Messages reply (``type: message``), a Responses reply
    (``object: response``), an embeddings list (``object: list``), or an
    error object (``error``, ``object: error``, FastAPI's ``detail``). JSON
    lines that stream (chunks, ``type: response.created``, a filter-results
    line, Ollama's ``done: false``) are none of these; their next lines may
    come later than ``DRAIN_S``.
    """
    try:
        obj = json.loads(b"".join(parts))
    except ValueError:
        return False
    if type(obj) is not dict:
        return False
    kind = obj.get("object")
    if kind in ("response", "list", "error") or obj.get("type") == "message" or obj.get("error") is not None:
        return True
    choices = obj.get("choices")
    if type(choices) is list and choices:
        first = choices[0]
        return type(first) is dict and "delta" not in first and ("message" in first or "text" in first)
    return choices is None and obj.get("detail") is not None and not _REPLY_FIELDS.intersection(obj)


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _fail(
    record: RequestRecord,
    outcome: Outcome,
    category: str,
    message: str,
    end_s: float,
    *,
    status: int | None = None,
) -> RequestRecord:
    record.outcome = outcome
    record.error = ErrorInfo(category, message[:_MESSAGE_CHARS], status)
    record.end_s = end_s
    return record


def _fail_finish(record: RequestRecord) -> None:
    """Fail a reply whose finish_reason is not a normal end (``llmload.request.finish``), even with [DONE]."""
    category = abnormal_finish_category(record.finish_reason)
    if category is None:
        return
    _fail(
        record,
        Outcome.SERVER_ERROR,
        category,
        f"the server ended the reply with finish_reason {record.finish_reason!r} after "
        f"{len(record.token_times_s)} token events (completion_tokens={record.completion_tokens.value!r}): "
        "not a normal end (stop, length, tool_calls, content_filter); the request failed, its tokens "
        "are not counted",
        record.end_s if record.end_s is not None else 0.0,
    )


def _check_degenerate(
    record: RequestRecord, pieces: list[str], request: LLMRequest, watch: SameTextWatch | None
) -> None:
    """Fail a degenerate reply (``llmload.request.degenerate``): one token repeated, or the same text."""
    text = "".join(pieces) if len(pieces) < MIN_REPEAT_UNITS else None  # a short reply: joined once for both rules
    repeated = repeated_piece(pieces, text)
    if repeated is not None:
        piece, count, units = repeated
        _fail(
            record,
            Outcome.SERVER_ERROR,
            DEGENERATE_REPEATED,
            f"degenerate output: {piece!r} makes {count} of the reply's {units} pieces; "
            f"text: {sample_of(''.join(pieces))!r}",
            record.end_s if record.end_s is not None else 0.0,
        )
        return
    events = len(pieces) if record.streamed else record.completion_tokens.value or 0  # a whole reply: its tokens
    if watch is None or events < MIN_SAME_TEXT_PIECES:
        return
    if text is None:
        text = "".join(pieces)
    same = watch.repeats((record.endpoint, record.model), text, request.prompt_text)
    if same is not None:
        _fail(
            record,
            Outcome.SERVER_ERROR,
            DEGENERATE_SAME_TEXT,
            f"degenerate output: the same text as {same - 1} of this process's {SAME_TEXT_WINDOW} latest "
            f"replies, to different prompts; text: {sample_of(text)!r}",
            record.end_s if record.end_s is not None else 0.0,
        )


def _check_empty(record: RequestRecord) -> None:
    """Mark a well-formed reply without any generated token as EMPTY (not a success with TTFT 0).

    A reply left empty by typed parts that hold no text llmload reads says which (``skipped_part``).
    """
    if record.token_times_s:
        return
    skipped = f"; {record.skipped_part}, which carries no text llmload reads" if record.skipped_part else ""
    _fail(
        record,
        Outcome.EMPTY,
        "empty response",
        f"no generated token in the reply (finish_reason={record.finish_reason!r}, "
        f"completion_tokens={record.completion_tokens.value!r}){skipped}",
        record.end_s if record.end_s is not None else 0.0,
    )
