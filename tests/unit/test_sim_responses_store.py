"""The simulator's stored Responses replies: ``previous_response_id`` continues one, an unknown id is a 400."""

from __future__ import annotations

import json

from llmload.sim.api_replies import ResponseStore, parse_api_request
from llmload.sim.protocol import Endpoint, ErrorReply


def _body(**extra):
    return json.dumps({"model": "m", "input": "hello there", "max_output_tokens": 8, **extra}).encode()


def test_previous_response_id_adds_the_stored_conversation_to_the_input_tokens():
    store = ResponseStore()
    fresh = parse_api_request(Endpoint.RESPONSES, _body(), "m", 4096, store)
    assert not isinstance(fresh, ErrorReply)
    store.keep("resp_a", 120)
    continued = parse_api_request(Endpoint.RESPONSES, _body(previous_response_id="resp_a"), "m", 4096, store)
    assert not isinstance(continued, ErrorReply)
    assert continued[0].prompt_tokens == fresh[0].prompt_tokens + 120


def test_an_unknown_previous_response_id_is_a_400_that_names_it():
    reply = parse_api_request(Endpoint.RESPONSES, _body(previous_response_id="resp_nope"), "m", 4096, ResponseStore())
    assert isinstance(reply, ErrorReply)
    assert reply.status == 400
    assert reply.param == "previous_response_id"
    assert "Previous response with id 'resp_nope' not found" in reply.message
    bad = parse_api_request(Endpoint.RESPONSES, _body(previous_response_id=7), "m", 4096, ResponseStore())
    assert isinstance(bad, ErrorReply)
    assert bad.status == 400


def test_a_continued_conversation_beyond_the_context_length_is_refused():
    store = ResponseStore()
    store.keep("resp_a", 4090)
    reply = parse_api_request(Endpoint.RESPONSES, _body(previous_response_id="resp_a"), "m", 4096, store)
    assert isinstance(reply, ErrorReply)
    assert reply.status == 400
    assert "maximum context length is 4096" in reply.message


def test_the_store_is_bounded_and_drops_the_oldest_first():
    store = ResponseStore(capacity=3)
    for i in range(5):
        store.keep(f"resp_{i}", i)
    assert len(store) == 3
    assert store.context_tokens("resp_0") is None
    assert store.context_tokens("resp_1") is None
    assert [store.context_tokens(f"resp_{i}") for i in (2, 3, 4)] == [2, 3, 4]
