"""Request builders: exact JSON bodies, include_usage when streaming, clear errors."""

from __future__ import annotations

import json

import pytest

from llmload.errors import ConfigError
from llmload.request.payloads import (
    build_chat_request,
    build_completion_request,
    check_endpoint_path,
    check_host_path,
    check_host_v1,
    doubled_v1_hint,
)

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]


def test_build_chat_request_body_and_path():
    request = build_chat_request(model="m", messages=MESSAGES, max_tokens=32, temperature=0.5)
    assert request.endpoint == "chat"
    assert request.path == "/v1/chat/completions"
    assert request.stream is True
    assert json.loads(request.body) == {
        "model": "m",
        "messages": MESSAGES,
        "max_tokens": 32,
        "temperature": 0.5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_build_completion_request_body_and_path():
    request = build_completion_request(model="m", prompt="Once", max_tokens=8, requested_prompt_tokens=1)
    assert request.endpoint == "completions"
    assert request.path == "/v1/completions"
    assert request.prompt_text == "Once"
    assert request.requested_prompt_tokens == 1
    assert json.loads(request.body) == {
        "model": "m",
        "prompt": "Once",
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_build_request_non_stream_has_no_stream_options():
    body = json.loads(build_completion_request(model="m", prompt="p", max_tokens=8, stream=False).body)
    assert body["stream"] is False
    assert "stream_options" not in body


def test_build_request_non_stream_rejects_stream_options():
    with pytest.raises(ConfigError, match="only apply to streamed requests"):
        build_completion_request(model="m", prompt="p", max_tokens=8, stream=False, extra={"stream_options": {"x": 1}})


def test_build_request_ignore_eos_sent_only_when_true():
    on = json.loads(build_completion_request(model="m", prompt="p", max_tokens=8, ignore_eos=True).body)
    off = json.loads(build_completion_request(model="m", prompt="p", max_tokens=8).body)
    assert on["ignore_eos"] is True
    assert "ignore_eos" not in off


def test_build_request_temperature_omitted_when_none():
    body = json.loads(build_completion_request(model="m", prompt="p", max_tokens=8).body)
    assert "temperature" not in body


def test_build_request_extra_fields_and_stream_options_merge():
    request = build_completion_request(
        model="m",
        prompt="p",
        max_tokens=8,
        extra={"top_p": 0.9, "stream_options": {"continuous_usage_stats": True, "include_usage": False}},
    )
    body = json.loads(request.body)
    assert body["top_p"] == 0.9
    assert body["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}


@pytest.mark.parametrize("key", ["model", "prompt", "messages", "stream", "max_tokens"])
def test_build_request_extra_may_not_override_owned_fields(key):
    with pytest.raises(ConfigError, match=repr(key)):
        build_completion_request(model="m", prompt="p", max_tokens=8, extra={key: 1})


@pytest.mark.parametrize("max_tokens", [0, -1, 1.5, True, "8"])
def test_build_request_rejects_bad_max_tokens(max_tokens):
    with pytest.raises(ConfigError, match="max_tokens must be a positive integer"):
        build_completion_request(model="m", prompt="p", max_tokens=max_tokens)


def test_build_request_rejects_negative_temperature():
    with pytest.raises(ConfigError, match="temperature"):
        build_completion_request(model="m", prompt="p", max_tokens=8, temperature=-0.1)


def test_build_request_rejects_empty_model():
    with pytest.raises(ConfigError, match="--model"):
        build_chat_request(model=" ", messages=MESSAGES, max_tokens=8)


@pytest.mark.parametrize(
    "messages",
    [[], "hello", [{"role": "user"}], [{"role": "user", "content": 3}], [{"content": "x"}], ["hello"]],
)
def test_build_chat_request_rejects_malformed_messages(messages):
    with pytest.raises(ConfigError, match="messages"):
        build_chat_request(model="m", messages=messages, max_tokens=8)


def test_build_chat_request_prompt_text_joins_contents():
    request = build_chat_request(model="m", messages=MESSAGES, max_tokens=8)
    assert request.prompt_text == "be brief\nhello world"


def test_build_request_body_is_compact_utf8():
    request = build_completion_request(model="m", prompt="café", max_tokens=8)
    assert "café".encode() in request.body
    assert b", " not in request.body


# NC-28: a chat or completions body is never posted to another API's path.
@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/v1/responses", "Responses API"),
        ("/openai/v1/responses/", "Responses API"),
        ("/v1/messages?beta=true", "Messages API"),
        ("/v1/embeddings", "embeddings API"),
        ("/V1/Rerank", "rerank API"),
    ],
)
def test_nc28_check_endpoint_path_refuses_other_apis(path, api):
    with pytest.raises(ConfigError, match=api):
        check_endpoint_path(path, "chat")


def test_nc28_refusal_points_at_the_user_that_speaks_the_api():
    with pytest.raises(ConfigError) as refused:
        check_endpoint_path("/v1/responses", "chat")
    assert "run ResponsesUser (locust -f $(llmload locustfile responses))" in str(refused.value)


@pytest.mark.parametrize(
    ("endpoint", "path", "accepted"),
    [
        ("responses", "/v1/responses", True),
        ("responses", "/gw/openai/v1/responses?x=1", True),
        ("responses", "/v1/chat/completions", False),
        ("messages", "/v1/messages", True),
        ("messages", "/v1/responses", False),
        ("embeddings", "/v1/embeddings", True),
        ("embeddings", "/v1/completions", False),
    ],
)
def test_check_endpoint_path_of_the_other_apis_users(endpoint, path, accepted):
    if accepted:
        check_endpoint_path(path, endpoint)
        return
    with pytest.raises(ConfigError, match="to load the"):
        check_endpoint_path(path, endpoint)


@pytest.mark.parametrize(
    "path", ["/openai/deployments/m/chat/completions?api-version=2024-06-01", "/v1/completions", "/generate"]
)
def test_nc28_check_endpoint_path_accepts_completion_paths(path):
    check_endpoint_path(path, "chat")
    check_endpoint_path(path, "completions")


@pytest.mark.parametrize(
    ("host", "path", "hint"),
    [
        ("http://h:8000/v1", "/v1/chat/completions", "drop /v1 from -H (llmload adds /v1/chat/completions)"),
        ("http://h:8000/V1/", "/v1/completions", "drop /v1 from -H (llmload adds /v1/completions)"),
        ("http://h:8000", "/v1/chat/completions", None),
        ("http://h:8000/v1", "/openai/deployments/m/chat/completions", None),  # --endpoint-path without /v1
        ("http://h:8000/api/v10", "/v1/chat/completions", None),
    ],
)
def test_base_url_kind_doubled_v1_hint(host, path, hint):
    assert doubled_v1_hint(host, path) == hint


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("http://h:8000/v1/responses", True),
        ("http://h:8000/v1/messages/", True),
        ("http://h:8000/v1", False),
        ("http://h:8000", False),
        ("https://gw.example.com/openai/v1?api-version=1", False),
        ("https://u:secret@gw.example.com/v1/responses?key=secret", True),
    ],
)
def test_nc28_kind_host_path_of_another_api_is_refused(host, refused):
    if not refused:
        check_host_path(host, "chat")
        return
    with pytest.raises(ConfigError) as caught:
        check_host_path(host, "chat")
    message = str(caught.value)
    assert f"-H {host.partition('?')[0].replace('u:secret@', '')} ends in" in message
    assert "Pass the server's root, -H " in message
    assert "secret" not in message


@pytest.mark.parametrize(
    ("host", "endpoint", "endpoint_path", "message"),
    [
        (
            "http://127.0.0.1:8031/v1",
            "chat",
            None,
            "-H http://127.0.0.1:8031/v1 ends in /v1 and llmload adds /v1/chat/completions itself, so every "
            "request would go to /v1/v1/chat/completions and fail. Pass the server's root without /v1: "
            "-H http://127.0.0.1:8031 "
            "(like vLLM bench's --base-url; an OpenAI client's base_url ends in /v1, llmload's -H does not)",
        ),
        (
            "https://u:secret@gw/openai/V1/",
            "completions",
            None,
            "-H https://gw/openai/V1/ ends in /v1 and llmload adds",
        ),
        ("http://h/v1", "chat", "/v1/chat/completions", "--endpoint-path /v1/chat/completions starts with /v1 too"),
        ("https://gw/openai/v1?api-version=1", "chat", None, "-H https://gw/openai (keeping its query string)"),
    ],
)
def test_check_host_v1_refuses_a_host_ending_in_v1_before_a_v1_path(host, endpoint, endpoint_path, message):
    """-H http://HOST/v1 (an OpenAI client's base_url) was let through to a 404 at /v1/v1/models."""
    with pytest.raises(ConfigError) as caught:
        check_host_v1(host, endpoint, endpoint_path)
    assert message in str(caught.value)
    assert "secret" not in str(caught.value)
    assert caught.value.options == ("-H",)


@pytest.mark.parametrize(
    ("host", "endpoint_path"),
    [
        ("http://h:8000", None),
        ("http://h:8000/", None),
        ("https://gw/openai/v1", "/chat/completions"),  # the /v1 is the base of a path without it
        ("http://h:8000/api/v10", None),
    ],
)
def test_check_host_v1_accepts_a_host_whose_path_is_not_doubled(host, endpoint_path):
    check_host_v1(host, "chat", endpoint_path)
