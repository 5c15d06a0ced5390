"""The simulator's reply shapes (issue 18): which requests get a shape, and the exact bytes of each.

Pure: ``plan_shapes``, ``ShapedStreamEncoder`` and ``encode_shaped_whole_reply``
are driven directly; the HTTP side is ``tests/integration/test_sim_replies.py``.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from llmload.errors import ConfigError
from llmload.request.sse import SSEDecoder
from llmload.servermetrics import ServerKind, parse_snapshot
from llmload.sim.config import SimConfig, parse_config
from llmload.sim.engine import Engine
from llmload.sim.metrics import SimMetrics
from llmload.sim.protocol import Endpoint, GenerationRequest
from llmload.sim.replies import ReplyPlan
from llmload.sim.shaped_replies import ShapedStreamEncoder, encode_shaped_whole_reply
from llmload.sim.shapes import NO_SHAPE, MetricNames, ShapeConfig, ShapePlan, plan_shapes

WORDS = [b" The", b" answer", b" is", b" 42", b" now"]


def request(
    endpoint: Endpoint = Endpoint.CHAT, *, stream: bool = True, include_usage: bool = True
) -> GenerationRequest:
    return GenerationRequest(
        endpoint=endpoint,
        prompt_tokens=12,
        max_tokens=5,
        min_tokens=0,
        ignore_eos=True,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=False,
    )


def stream_bytes(plan: ShapePlan, req: GenerationRequest | None = None, group: int = 1) -> bytes:
    """The whole stream as the app writes it: role, the tokens in groups of ``group``, the end."""
    req = req or request()
    encoder = ShapedStreamEncoder(req, plan, "c1", 0, "m")
    out = [encoder.role_chunk()] if req.endpoint is Endpoint.CHAT else []
    for start in range(0, len(WORDS), group):
        encoder.add_tokens(WORDS, start, min(start + group, len(WORDS)), out)
    encoder.add_end("stop", len(WORDS), out)
    return b"".join(out)


def events(data: bytes) -> list[object]:
    decoder = SSEDecoder()
    found = [e.data for e in decoder.feed(data)]
    return [d if d == "[DONE]" else json.loads(d) for d in found]


def deltas(data: bytes) -> list[object]:
    return [e["choices"][0].get("delta") for e in events(data) if isinstance(e, dict) and e["choices"]]


# ── which requests get a shape ──────────────────────────────────────────────
def test_shapes_off_by_default_give_no_shape():
    assert plan_shapes(ShapeConfig(), 0, 1, request()) is NO_SHAPE
    assert not ShapeConfig().enabled


@pytest.mark.parametrize(
    ("rate", "field"),
    [
        ("content_parts_rate", "content_parts"),
        ("object_arguments_rate", "object_arguments"),
        ("hidden_reasoning_rate", "hidden_tokens"),
        ("hold_after_done_rate", "hold_s"),
        ("unterminated_end_rate", "unterminated"),
        ("logprobs_tokens_rate", "logprobs"),
        ("no_stream_rate", "no_stream"),
    ],
)
def test_shape_rate_applies_to_its_share_of_requests_reproducibly(rate, field):
    config = ShapeConfig(**{rate: 0.3})
    picked = [bool(getattr(plan_shapes(config, 5, n, request()), field)) for n in range(1, 401)]
    assert 0.22 < sum(picked) / 400 < 0.38
    assert picked == [bool(getattr(plan_shapes(config, 5, n, request()), field)) for n in range(1, 401)]
    every = ShapeConfig(**{rate: 1.0})
    assert all(getattr(plan_shapes(every, 5, n, request()), field) for n in range(1, 21))


def test_shape_draws_are_independent_of_other_shapes():
    alone = [plan_shapes(ShapeConfig(content_parts_rate=0.5), 1, n, request()).content_parts for n in range(1, 101)]
    both = ShapeConfig(content_parts_rate=0.5, hidden_reasoning_rate=0.5)
    assert alone == [plan_shapes(both, 1, n, request()).content_parts for n in range(1, 101)]


def test_shape_chat_only_and_stream_only_shapes_are_dropped_where_they_cannot_apply():
    every = ShapeConfig(
        content_parts_rate=1, object_arguments_rate=1, unterminated_end_rate=1, logprobs_tokens_rate=1, no_stream_rate=1
    )
    completions = plan_shapes(every, 0, 1, request(Endpoint.COMPLETIONS, stream=False))
    assert (completions.content_parts, completions.object_arguments, completions.no_stream) == (False, False, False)
    assert (completions.unterminated, completions.logprobs) == (False, False)
    chat = plan_shapes(every, 0, 1, request())
    assert chat.object_arguments  # object arguments win over content parts
    assert not chat.content_parts
    assert chat.no_stream
    assert not chat.unterminated  # a whole reply has no stream end


def test_shape_unterminated_end_wins_over_hold_after_done():
    plan = plan_shapes(ShapeConfig(hold_after_done_rate=1, unterminated_end_rate=1), 0, 1, request())
    assert plan.unterminated
    assert plan.hold_s == 0.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--content-parts-rate", "1.5"], "--content-parts-rate must be a share within 0..1"),
        (["--tokens-per-chunk", "0"], "--tokens-per-chunk must be an integer >= 1"),
        (["--hold-after-done-s", "-1"], "--hold-after-done-s must be seconds >= 0"),
        (["--hidden-reasoning-tokens", "0"], "--hidden-reasoning-tokens must be an integer >= 1"),
    ],
)
def test_shape_bad_flag_is_refused_naming_it(argv, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(argv)


def test_shape_flags_parse_into_the_config():
    config = parse_config(["--no-stream-rate", "1", "--metric-names", "sglang_", "--hold-ping-s", "1"])
    assert config.shapes == ShapeConfig(no_stream_rate=1.0, metric_names=MetricNames.SGLANG_UNDERSCORE, hold_ping_s=1)
    assert SimConfig().shapes == ShapeConfig()


# ── the bytes of each shape ─────────────────────────────────────────────────
def test_nc20_content_parts_stream_thinking_parts_first_then_text_parts_and_strings():
    data = stream_bytes(ShapePlan(content_parts=True, thinking_tokens=2))
    assert deltas(data)[1:6] == [
        {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": " The"}]}]},
        {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": " answer"}]}]},
        {"content": [{"type": "text", "text": " is"}]},
        {"content": " 42"},
        {"content": [{"type": "text", "text": " now"}]},
    ]
    usage = events(data)[-2]
    assert usage["usage"]["completion_tokens"] == 5
    assert events(data)[-1] == "[DONE]"


def test_object_arguments_stream_is_a_tool_call_with_object_arguments():
    data = stream_bytes(ShapePlan(object_arguments=True))
    found = deltas(data)
    assert found[0] == {"role": "assistant", "content": None}
    first = found[1]["tool_calls"][0]
    assert first == {
        "index": 0,
        "id": "call_sim_0",
        "type": "function",
        "function": {"name": "lookup", "arguments": {"text": " The"}},
    }
    assert found[2] == {"tool_calls": [{"index": 0, "function": {"arguments": {"text": " answer"}}}]}
    assert all(isinstance(d["tool_calls"][0]["function"]["arguments"], dict) for d in found[1:6])
    finish = [e for e in events(data) if isinstance(e, dict) and e["choices"] and e["choices"][0]["finish_reason"]]
    assert finish[0]["choices"][0]["finish_reason"] == "tool_calls"


def test_nc23_hidden_reasoning_usage_counts_unsent_tokens_in_details():
    data = stream_bytes(ShapePlan(hidden_tokens=100))
    assert [d.get("content") for d in deltas(data)[1:6]] == [w.decode() for w in WORDS]  # only the answer is sent
    assert events(data)[-2]["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 105,
        "total_tokens": 117,
        "completion_tokens_details": {"reasoning_tokens": 100},
    }


def test_nc27_unterminated_end_finish_chunk_carries_usage_one_newline_no_done():
    data = stream_bytes(ShapePlan(unterminated=True))
    assert b"[DONE]" not in data
    last = data.rsplit(b"\n\n", 1)[1]
    assert last.startswith(b"data: {")
    assert last.endswith(b"}\n")
    assert not last.endswith(b"\n\n")
    chunk = json.loads(last.removeprefix(b"data: "))
    assert chunk["choices"][0]["finish_reason"] == "stop"
    assert chunk["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize("endpoint", [Endpoint.CHAT, Endpoint.COMPLETIONS])
def test_nc26_logprobs_several_tokens_per_chunk_and_no_usage(endpoint):
    data = stream_bytes(ShapePlan(logprobs=True, tokens_per_chunk=2), request(endpoint), group=2)
    chunks = [e for e in events(data) if isinstance(e, dict) and e["choices"][0]["finish_reason"] is None]
    if endpoint is Endpoint.CHAT:
        chunks = chunks[1:]  # the role chunk
        counts = [len(c["choices"][0]["logprobs"]["content"]) for c in chunks]
        assert chunks[0]["choices"][0]["delta"]["content"] == " The answer"
        assert chunks[0]["choices"][0]["logprobs"]["content"][1]["token"] == " answer"
    else:
        counts = [len(c["choices"][0]["logprobs"]["tokens"]) for c in chunks]
        assert chunks[0]["choices"][0]["text"] == " The answer"
    assert counts == [2, 2, 1]
    assert not any("usage" in e for e in events(data) if isinstance(e, dict))  # include_usage was asked for
    assert events(data)[-1] == "[DONE]"


def test_shaped_whole_reply_parts_object_arguments_and_reasoning():
    reply = ReplyPlan(words=WORDS, finish_reason="stop")
    req = request(stream=True)
    parts = json.loads(
        encode_shaped_whole_reply(
            req, reply, ShapePlan(content_parts=True, thinking_tokens=2), request_id="c", created_unix=0, model="m"
        )
    )
    assert parts["object"] == "chat.completion"
    assert parts["choices"][0]["message"]["content"] == [
        {"type": "thinking", "thinking": [{"type": "text", "text": " The answer"}]},
        {"type": "text", "text": " is 42 now"},
    ]
    tool = json.loads(
        encode_shaped_whole_reply(
            req, reply, ShapePlan(object_arguments=True), request_id="c", created_unix=0, model="m"
        )
    )
    message = tool["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"]["arguments"] == {"text": " The answer is 42 now"}
    assert tool["choices"][0]["finish_reason"] == "tool_calls"
    hidden = json.loads(
        encode_shaped_whole_reply(
            req, reply, ShapePlan(hidden_tokens=3, no_stream=True), request_id="c", created_unix=0, model="m"
        )
    )
    assert hidden["usage"]["completion_tokens"] == 8
    assert hidden["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}


# ── NC-24: the simulator's /metrics in SGLang's spellings ────────────────────
@pytest.mark.parametrize("names", [MetricNames.SGLANG_UNDERSCORE, MetricNames.SGLANG_COLON])
def test_nc24_sim_metric_names_sglang_are_read_as_sglang(names):
    registry = CollectorRegistry()
    metrics = SimMetrics(registry, Engine(SimConfig()), model="m", max_num_seqs=8, metric_names=names)
    metrics.vllm.prompt_tokens.inc(5)
    metrics.vllm.generation_tokens.inc(2)
    metrics.vllm.success["stop"].inc()
    metrics.vllm.ttft_s.observe(0.01)
    metrics.vllm.tpot_s.observe(0.01)  # SGLang has no such histogram: dropped
    text = generate_latest(registry).decode()
    assert f"{names.value}prompt_tokens_total" in text
    assert "vllm" not in text
    snap = parse_snapshot(text, model="m")
    assert snap.kind is ServerKind.SGLANG
    assert (snap.values["prompt_tokens"], snap.values["generation_tokens"]) == (5, 2)
    assert snap.values["requests_succeeded"] == 1
    assert snap.histograms["ttft_s"].count == 1
    assert snap.names["prompt_tokens"] == f"{names.value}prompt_tokens_total"
