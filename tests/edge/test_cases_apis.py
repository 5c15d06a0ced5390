"""The Responses API, Anthropic Messages and embeddings users in locust runs here: preflight, keys, history.

Each run is a locust command line run in this process (``tests/edge/cluster.run_locust_here``)
against a scripted server on loopback, bounded by ``--num-requests`` and ``-t``. The streams
themselves (timings within ±5 ms of the server's writes) are measured in
``tests/integration/test_cases_apis.py``.
"""

from __future__ import annotations

import json

import pytest

from llmload.edge.api_users import EmbeddingsUser, MessagesUser, ResponsesUser
from llmload.edge.users import ChatUser
from llmload.testing import CF, ROLE, C, ReceivedRequest, Reply, ScriptedServer, U, W, json_reply, sse, typed
from tests.edge.cluster import CompletedRun, run_locust_here
from tests.integration.test_cases_apis import _completed, _messages_writes, _nc28_writes

_USERS = {"responses": ResponsesUser, "messages": MessagesUser, "embeddings": EmbeddingsUser}


MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})


def _route(post_reply: Reply):
    def reply(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, MODELS) if request.path == "/v1/models" else json_reply(404, "{}")
        return post_reply

    return reply


def _locust(locustfile: str, url: str, *extra: str) -> CompletedRun:
    """``locust -f locustfiles/LOCUSTFILE.py`` with one user and 3 requests, here."""
    return run_locust_here(
        _USERS[locustfile],
        ["--headless", "--only-summary", "-H", url, "-u", "1", "-r", "1", "--num-requests", "3", "-t", "30s", *extra],
        users=1,
        timeout_s=60,
    )


@pytest.mark.parametrize(
    ("locustfile", "status", "api"),
    [
        ("responses", 404, "the OpenAI Responses API: the probe request for ResponsesUser (POST /v1/responses)"),
        ("messages", 405, "the Anthropic Messages API: the probe request for MessagesUser (POST /v1/messages)"),
        ("embeddings", 404, "the embeddings API: the probe request for EmbeddingsUser (POST /v1/embeddings)"),
    ],
)
def test_preflight_refuses_a_server_that_does_not_serve_the_api(locustfile, status, api):
    body = json.dumps({"detail": "Not Found" if status == 404 else "Method Not Allowed"})
    with ScriptedServer(_route(json_reply(status, body))) as srv:
        proc = _locust(locustfile, srv.base_url)
        posts = [r.path for r in srv.requests if r.method == "POST"]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"the server does not serve {api}" in proc.stderr
    assert f"answered HTTP {status}" in proc.stderr
    assert len(posts) == 1  # the probe only: nothing was loaded


def test_nc28_preflight_names_a_strict_servers_400_and_its_message():
    error = {"error": {"message": "Field required: input", "type": "invalid_request_error",
                       "code": "missing_required_parameter", "param": "input"}}  # fmt: skip
    with ScriptedServer(_route(json_reply(400, json.dumps(error)))) as srv:
        proc = _locust("responses", srv.base_url)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "the server rejects the body llmload sends for the OpenAI Responses API" in proc.stderr
    assert "Field required: input" in proc.stderr


def test_nc28_responses_user_runs_the_case_stream(tmp_path):
    out = tmp_path / "r.json"
    with ScriptedServer(_route(Reply(_nc28_writes()))) as srv:
        proc = _locust("responses", srv.base_url, "--results-json", str(out))
        bodies = [r.json() for r in srv.requests if r.method == "POST"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["requests"]["succeeded"] == 3
    assert results["tokens"]["completion"] == 6
    assert results["tokens"]["prompt"] == 15
    assert results["latency"]["ttft_s"]["p50"] == pytest.approx(0.1, abs=0.02)
    assert all("input" in body and "messages" not in body for body in bodies)


def test_messages_user_sends_the_api_key_as_x_api_key_and_the_version():
    with ScriptedServer(_route(Reply(_messages_writes()))) as srv:
        proc = run_locust_here(
            MessagesUser,
            ["--headless", "--only-summary", "-H", srv.base_url,
             "-u", "1", "-r", "1", "--num-requests", "2", "-t", "30s"],
            users=1,
            timeout_s=60,
            env={"OPENAI_API_KEY": "sk-test-key"},
        )  # fmt: skip
        posts = [r for r in srv.requests if r.method == "POST"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(posts) == 3  # the probe and two requests
    for sent in posts:
        assert sent.path == "/v1/messages"
        assert sent.headers["x-api-key"] == "sk-test-key"
        assert sent.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in sent.headers  # the key goes the API's way only, the probe included
    assert "sk-test-key" not in proc.stdout + proc.stderr


def test_messages_user_keeps_an_authorization_header_passed_explicitly():
    with ScriptedServer(_route(Reply(_messages_writes()))) as srv:
        proc = run_locust_here(
            MessagesUser,
            ["--headless", "--only-summary", "-H", srv.base_url,
             "-u", "1", "-r", "1", "--num-requests", "1", "-t", "30s", "--header", "Authorization: Bearer gw-token"],
            users=1,
            timeout_s=60,
            env={"OPENAI_API_KEY": ""},
        )  # fmt: skip
        posts = [r for r in srv.requests if r.method == "POST"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(posts) == 2
    for sent in posts:
        assert sent.headers["authorization"] == "Bearer gw-token"  # a gateway's own token, passed on purpose
        assert "x-api-key" not in sent.headers  # no key was set


def test_mixed_chat_and_messages_users_send_the_key_each_the_apis_way():
    """A locustfile with a chat user class and a Messages user class (two users: one of each)."""

    class Chat(ChatUser):
        pass

    class Messages(MessagesUser):
        pass

    def route(request: ReceivedRequest) -> Reply:
        if request.path == "/v1/chat/completions":
            return Reply([W(5, sse(ROLE, C({"content": "hi"}))), W(6, sse(CF("stop"), U(3, 1), "[DONE]"))])
        return _route(Reply(_messages_writes()))(request)

    with ScriptedServer(route) as srv:
        proc = run_locust_here(
            [Chat, Messages],
            ["--headless", "--only-summary", "-H", srv.base_url, "-u", "2", "-r", "2", "--num-requests", "4",
             "-t", "30s"],
            users=2,
            timeout_s=60,
            env={"OPENAI_API_KEY": "sk-test-key"},
        )  # fmt: skip
        posts = [r for r in srv.requests if r.method == "POST"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    chat = [r for r in posts if r.path == "/v1/chat/completions"]
    messages = [r for r in posts if r.path == "/v1/messages"]
    assert chat
    assert messages
    assert all(r.headers["authorization"] == "Bearer sk-test-key" and "x-api-key" not in r.headers for r in chat)
    assert all(r.headers["x-api-key"] == "sk-test-key" and "authorization" not in r.headers for r in messages)


# ── server-side history of multi-turn Responses (previous_response_id) ─────
def _writes_with_id(rid: str):
    completed = _completed()
    completed["response"]["id"] = rid
    return [
        W(5, typed("response.created", {"response": {"id": rid, "status": "in_progress"}})),
        W(10, typed("response.output_text.delta", {"delta": "Hi", "output_index": 0})),
        W(15, typed("response.output_text.delta", {"delta": " there", "output_index": 0})),
        W(20, typed("response.completed", completed)),
    ]


def _turns_run(history: str, *, stream: bool = True):
    posts = iter(range(1, 1000))

    def route(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, MODELS) if request.path == "/v1/models" else json_reply(404, "{}")
        n = next(posts)
        if stream:
            return Reply(_writes_with_id(f"resp_{n}"))
        usage = _completed()["response"]["usage"]
        body = {"id": f"resp_{n}", "object": "response", "status": "completed", "usage": usage,
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi there"}]}]}  # fmt: skip
        return json_reply(200, json.dumps(body))

    extra = () if stream else ("--no-stream",)
    with ScriptedServer(route) as srv:
        proc = _locust("responses", srv.base_url, "--turns", "3", "--responses-history", history, "--prompt", "Hello",
                       *extra)  # fmt: skip
        bodies = [r.json() for r in srv.requests if r.method == "POST"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    return bodies


@pytest.mark.parametrize("stream", [True, False])
def test_responses_server_history_sends_only_the_new_turn_with_previous_response_id(stream):
    probe, first, second, third = _turns_run("server", stream=stream)
    assert "previous_response_id" not in probe
    assert "previous_response_id" not in first
    assert first["input"] == "Hello"
    assert second["previous_response_id"] == "resp_2"  # the first turn's reply (the probe was resp_1)
    assert second["input"] == "Hello"  # only the new user message: the server holds the rest
    assert third["previous_response_id"] == "resp_3"
    assert third["input"] == "Hello"


def test_responses_client_history_sends_the_whole_conversation():
    _, first, second, third = _turns_run("client")
    assert all("previous_response_id" not in body for body in (first, second, third))
    assert first["input"] == "Hello"
    assert [item["role"] for item in second["input"]] == ["user", "assistant", "user"]
    assert second["input"][1]["content"] == "Hi there"
    assert len(third["input"]) == 5
