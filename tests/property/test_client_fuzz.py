"""Fuzzing the streaming client: random bytes, random splits, random status/content type.

Whatever the server sends, ``StreamingClient.run`` returns a record (no
exception escapes), a non-success always has an error reason, and a success
always has a first token and an end time.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmload.request.record import Outcome
from llmload.testing import CF, ROLE, C, U, sse
from tests.unit.test_client import CHAT, COMPLETION, run

VALID = sse(ROLE, C({"content": "Hel"}), C({"content": "lo"}), CF("stop"), U(3, 2), "[DONE]")

fragments = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"data: ",
            b"data:",
            b"\n\n",
            b"\r\n",
            b"\r",
            b": ping\n\n",
            b"data: [DONE]\n\n",
            b'data: {"choices":[]}\n\n',
            b'data: {"error":{"message":"boom","type":"X"}}\n\n',
            b'data: {"choices":[{"index":0,"delta":{"content":"\xc3',
            b'\xa9"}}]}\n\n',
            b'{"object":"error","message":"m","type":"T","code":400}',
            VALID,
        ]
    ),
)


def _split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(raw[last:p])
        last = p
    pieces.append(raw[last:])
    return [p for p in pieces if p]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.lists(fragments, max_size=12).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
    status=st.sampled_from([200, 200, 200, 400, 404, 429, 500, 503]),
    content_type=st.sampled_from(["text/event-stream", "application/json", "text/plain", ""]),
    chat=st.booleans(),
)
def test_client_fuzz_never_raises_and_failures_carry_a_reason(body, cuts, status, content_type, chat):
    record, _ = run(_split(body, cuts), request=CHAT if chat else COMPLETION, status=status, content_type=content_type)
    if record.outcome is Outcome.OK:
        assert status == 200
        assert record.ttft_s is not None
        assert record.e2e_s is not None
        assert record.error is None
    else:
        assert record.error is not None
        assert record.error.category
        assert len(record.error.message) <= 500


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(VALID)), max_size=10))
def test_client_fuzz_valid_stream_succeeds_whatever_the_split(cuts):
    record, _ = run(_split(VALID, cuts))
    assert record.outcome is Outcome.OK
    assert record.completion_tokens.value == 2
    assert record.prompt_tokens.value == 3
