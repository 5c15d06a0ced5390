"""Preflight: model list parsing, model choice, the open-file check (BC-24, BC-29)."""

from __future__ import annotations

import json
import resource
from dataclasses import dataclass

import pytest

from llmload.errors import ConfigError, TransportError
from llmload.request.preflight import ModelList, check_open_files, choose_model, fetch_models


@dataclass
class Reply:
    status: int
    body: bytes


def getter(status: int, body: object):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return lambda path: Reply(status, raw)


def test_preflight_fetch_models_reads_ids_and_context_length():
    models = fetch_models(
        "http://h",
        getter(200, {"data": [{"id": "a", "max_model_len": 4096}, {"id": "b"}]}),
        "OPENAI_API_KEY",
    )
    assert models == ModelList(ids=("a", "b"), context_tokens={"a": 4096})


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [
        (401, b"{}", "(not authorised); set the API key in $OPENAI_API_KEY or pass --api-key-file"),
        (404, b"nope", "answered HTTP 404"),
        (200, b"<html>", "did not return an OpenAI model list"),
        (200, {"data": [{"name": "x"}]}, "did not return an OpenAI model list"),
    ],
)
def test_preflight_fetch_models_refuses_bad_answers(status, body, needle):
    with pytest.raises(ConfigError) as info:
        fetch_models("http://h", getter(status, body), "OPENAI_API_KEY")
    assert needle in str(info.value)


def test_preflight_unreachable_host_is_one_clear_line():
    def refuse(path):
        raise TransportError("POST http://127.0.0.1:1/v1/models: connection refused")

    with pytest.raises(ConfigError) as info:
        fetch_models("http://127.0.0.1:1", refuse, "OPENAI_API_KEY")
    message = str(info.value)
    assert "cannot reach http://127.0.0.1:1/v1/models" in message
    assert "\n" not in message


# Case BC-29: the wrong model name stops the run with the served list.
def test_preflight_choose_model_bc29_names_served_models():
    models = ModelList(ids=("m",), context_tokens={})
    assert choose_model(models, None, "http://h") == "m"
    assert choose_model(models, "m", "http://h") == "m"
    with pytest.raises(ConfigError, match='model "other" not served; available: m'):
        choose_model(models, "other", "http://h")
    with pytest.raises(ConfigError, match="lists no model"):
        choose_model(ModelList(ids=(), context_tokens={}), None, "http://h")


def test_preflight_choose_model_not_served_says_to_pass_one_of_the_served_names():
    """Listing the served names was not enough: the message also says what to pass."""
    models = ModelList(ids=("llama-3-8b", "qwen-7b"), context_tokens={})
    with pytest.raises(ConfigError) as info:
        choose_model(models, "gpt-4o", "http://h")
    message = str(info.value)
    assert message.startswith('model "gpt-4o" not served; available: llama-3-8b, qwen-7b. ')
    assert message.endswith("Pass --model <one of them>, e.g. --model llama-3-8b")
    with pytest.raises(ConfigError, match=r"available: none \(http://h/v1/models lists no model\)\. Check that -H"):
        choose_model(ModelList(ids=(), context_tokens={}), "gpt-4o", "http://h")


def test_preflight_open_files_within_limit_changes_nothing():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert check_open_files(10) is None or soft < 266
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[1] == hard


def test_preflight_open_files_above_hard_limit_is_refused_with_numbers():
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("hard open-file limit is unlimited here")
    with pytest.raises(ConfigError) as info:
        check_open_files(hard + 10)
    assert f"< needed ~{hard + 10 + 256}" in str(info.value)
    assert "--processes N" in str(info.value)


def test_preflight_base_url_with_v1_suffix_says_to_drop_it():
    with pytest.raises(ConfigError) as info:
        fetch_models("http://h:8000/v1", getter(404, b'{"error":"not found"}'), "OPENAI_API_KEY")
    assert "drop the /v1: pass -H http://h:8000" in str(info.value)
    assert "b'" not in str(info.value)
    assert "API key" not in str(info.value)
    assert "--model" not in str(info.value)  # the 404 is about the path, not a server without a model list
    with pytest.raises(ConfigError, match="a server without a model list needs --model NAME"):
        fetch_models("http://h:8000", getter(404, b'{"error":"not found"}'), "OPENAI_API_KEY")
