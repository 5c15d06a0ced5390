"""Request bodies of the Responses API, Anthropic Messages and embeddings."""

from __future__ import annotations

import json

import pytest

from llmload.errors import ConfigError
from llmload.request.api_bodies import (
    ANTHROPIC_VERSION,
    build_embeddings_request,
    build_messages_request,
    build_responses_request,
)


def test_responses_body_one_user_message_is_a_string_input():
    request = build_responses_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    body = json.loads(request.body)
    assert body == {"model": "m", "input": "hi", "max_output_tokens": 8, "stream": True}
    assert request.endpoint == "responses"
    assert request.path == "/v1/responses"


def test_responses_body_system_becomes_instructions_and_turns_are_items():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    body = json.loads(
        build_responses_request(
            model="m", messages=messages, max_tokens=4, stream=False, previous_response_id="resp_1"
        ).body
    )
    assert body["instructions"] == "be brief"
    assert body["input"] == messages[1:]
    assert body["previous_response_id"] == "resp_1"
    assert body["stream"] is False


def test_responses_body_drops_chat_stream_options_from_extra():
    request = build_responses_request(
        model="m", messages=[{"role": "user", "content": "x"}], max_tokens=4, extra={"stream_options": {}, "top_p": 1}
    )
    body = json.loads(request.body)
    assert "stream_options" not in body
    assert body["top_p"] == 1


def test_messages_body_and_headers():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    request = build_messages_request(model="m", messages=messages, max_tokens=8, api_key="sk")
    body = json.loads(request.body)
    assert body == {"model": "m", "max_tokens": 8, "system": "s", "messages": [messages[1]], "stream": True}
    assert dict(request.headers) == {"anthropic-version": ANTHROPIC_VERSION, "x-api-key": "sk"}


def test_messages_body_without_key_sends_only_the_version():
    request = build_messages_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    assert dict(request.headers) == {"anthropic-version": ANTHROPIC_VERSION}


def test_embeddings_body_is_a_batch_and_expects_one_vector_each():
    request = build_embeddings_request(model="m", inputs=["a", "b"])
    assert json.loads(request.body) == {"model": "m", "input": ["a", "b"]}
    assert request.inputs == 2
    assert request.stream is False


@pytest.mark.parametrize(
    "call",
    [
        lambda: build_responses_request(model="m", messages=[{"role": "system", "content": "s"}], max_tokens=4),
        lambda: build_messages_request(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=0),
        lambda: build_embeddings_request(model="m", inputs=[]),
        lambda: build_embeddings_request(model="m", inputs="text"),
        lambda: build_responses_request(model="", messages=[{"role": "user", "content": "x"}], max_tokens=4),
        lambda: build_messages_request(
            model="m", messages=[{"role": "user", "content": "x"}], max_tokens=4, extra={"max_tokens": 9}
        ),
    ],
    ids=["only-system", "zero-max-tokens", "no-inputs", "string-inputs", "no-model", "reserved-extra"],
)
def test_bad_arguments_are_refused_with_a_config_error(call):
    with pytest.raises(ConfigError):
        call()


def test_ignore_eos_asks_for_the_exact_length_and_sets_the_minimum():
    messages = [{"role": "user", "content": "x"}]
    for build in (build_responses_request, build_messages_request):
        request = build(model="m", messages=messages, max_tokens=12, ignore_eos=True)
        assert json.loads(request.body)["ignore_eos"] is True
        assert request.min_output_tokens == 12
        assert build(model="m", messages=messages, max_tokens=12).min_output_tokens is None
