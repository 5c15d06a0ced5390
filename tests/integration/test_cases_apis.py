"""The Responses API, Anthropic Messages and embeddings over real HTTP: ScriptedServer → transport → StreamingClient.

Timings are compared within ±5 ms of the server's real write times (``run.at``).
"""

from __future__ import annotations

import json

import pytest

from llmload.request.api_bodies import build_embeddings_request, build_messages_request, build_responses_request
from llmload.request.record import Outcome, TokenSource
from llmload.testing import CF, ROLE, C, ReceivedRequest, Reply, ScriptedServer, U, W, json_reply, sse, typed
from tests.integration.procs import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timing]

HI = [{"role": "user", "content": "hi"}]


def responses_request(stream: bool = True):
    return build_responses_request(model="m", messages=HI, max_tokens=16, stream=stream)


def messages_request(stream: bool = True):
    return build_messages_request(model="m", messages=HI, max_tokens=16, stream=stream, api_key="k")


def _completed(status: str = "completed", **extra):
    usage = {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 3},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 7,
    }
    return {"response": {"id": "r1", "object": "response", "status": status, "usage": usage, **extra}}


def _nc28_writes():
    return [
        W(10, typed("response.created", {"response": {"id": "r1", "status": "in_progress"}})),
        W(15, typed("response.output_item.added", {"output_index": 0, "item": {"type": "message"}})),
        W(100, typed("response.output_text.delta", {"delta": "Hi", "output_index": 0})),
        W(120, typed("response.output_text.delta", {"delta": " there", "output_index": 0})),
        W(130, typed("response.output_text.done", {"text": "Hi there"})),
        W(140, typed("response.completed", _completed())),
    ]


# NC-28: a Responses user speaks the API: typed events, TTFT at the first text delta, usage at the end.
def test_nc28_responses_stream_is_measured(run_scripted):
    run = run_scripted(Reply(_nc28_writes()), responses_request())
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.ttft_s == run.at(100)  # response.created @10 and output_item.added @15 are no tokens
    assert record.e2e_s == run.at(140)  # response.completed ends the reply (no [DONE])
    assert len(record.token_times_s) == 2
    assert record.token_times_s[1] == run.at(120)
    assert record.completion_tokens.value == 2
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.prompt_tokens.value == 5
    assert record.cached_prompt_tokens == 3
    assert record.finish_reason == "stop"
    body = run.requests[0].json()
    assert run.requests[0].path == "/v1/responses"
    assert body["input"] == "hi"
    assert body["max_output_tokens"] == 16
    assert body["stream"] is True
    assert "messages" not in body
    assert "stream_options" not in body


def test_nc28_responses_body_without_input_is_a_named_400(run_scripted):
    error = {"error": {"message": "Field required: input", "type": "invalid_request_error",
                       "code": "missing_required_parameter", "param": "input"}}  # fmt: skip
    record = run_scripted(json_reply(400, json.dumps(error)), responses_request()).record
    assert record.outcome is Outcome.HTTP_ERROR
    assert record.error is not None
    assert record.error.status == 400
    assert "Field required: input" in record.error.message


def test_responses_reasoning_and_tool_argument_deltas_count_structural_events_do_not(run_scripted):
    writes = [
        W(10, typed("response.created", {"response": {"status": "in_progress"}})),
        W(20, typed("response.reasoning_text.delta", {"delta": ""})),  # empty: no token
        W(60, typed("response.reasoning_text.delta", {"delta": "think"})),
        W(80, typed("response.function_call_arguments.delta", {"delta": '{"a":'})),
        W(90, typed("response.output_text.delta", {"delta": "ok"})),
        W(100, typed("response.completed", _completed())),
    ]
    run = run_scripted(Reply(writes), responses_request())
    record = run.record
    assert record.outcome is Outcome.OK
    assert record.ttft_s == run.at(60)
    assert record.ttfc_s == run.at(90)  # first content: the output text
    assert len(record.token_times_s) == 3


def test_responses_failed_event_is_a_named_server_error(run_scripted):
    failed = {"response": {"status": "failed", "error": {"code": "server_error", "message": "engine died"}}}
    writes = [W(50, typed("response.output_text.delta", {"delta": "Hi"})), W(60, typed("response.failed", failed))]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "response.failed code server_error"
    assert "engine died" in record.error.message


def test_responses_error_event_is_a_named_server_error(run_scripted):
    error = {"code": "rate_limit_exceeded", "message": "slow down", "param": None}
    writes = [W(50, typed("error", error))]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "error/rate_limit_exceeded"
    assert "slow down" in record.error.message


@pytest.mark.parametrize(
    ("reason", "outcome", "finish"),
    [
        ("max_output_tokens", Outcome.OK, "length"),
        ("content_filter", Outcome.OK, "content_filter"),
        ("server_overloaded", Outcome.SERVER_ERROR, "incomplete:server_overloaded"),
    ],
)
def test_responses_incomplete_maps_its_reason_onto_the_finish_reasons(run_scripted, reason, outcome, finish):
    incomplete = _completed("incomplete", incomplete_details={"reason": reason})
    writes = [
        W(50, typed("response.output_text.delta", {"delta": "Hi"})),
        W(60, typed("response.incomplete", incomplete)),
    ]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.finish_reason == finish
    assert record.outcome is outcome
    if outcome is not Outcome.OK:
        assert record.error is not None
        assert record.error.category == f"finish_reason {finish}"


def test_responses_stream_cut_before_completed_is_a_named_stream_error(run_scripted):
    writes = [W(50, typed("response.output_text.delta", {"delta": "Hi"}))]
    record = run_scripted(Reply(writes), responses_request()).record
    assert record.outcome is Outcome.STREAM_ERROR
    assert record.error is not None
    assert "response.completed" in record.error.message


def test_responses_non_streamed_reply(run_scripted):
    body = {
        "object": "response", "status": "completed",
        "output": [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hm"}]},
                   {"type": "message", "content": [{"type": "output_text", "text": "Hi there"}]}],
        "usage": {"input_tokens": 5, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 1}},
    }  # fmt: skip
    record = run_scripted(json_reply(200, json.dumps(body), at_ms=50), responses_request(stream=False)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.streamed is False
    assert record.completion_tokens.value == 4
    assert record.prompt_tokens.value == 5
    assert record.reasoning_tokens == 1
    assert record.ttft_s is None  # no token times without a stream


# ── Anthropic Messages ─────────────────────────────────────────────────────
def _messages_writes(stop_reason: str = "end_turn"):
    start = {"message": {"id": "m1", "type": "message", "role": "assistant", "content": [], "model": "m",
                         "usage": {"input_tokens": 7, "output_tokens": 1, "cache_read_input_tokens": 2}}}  # fmt: skip
    return [
        W(10, typed("message_start", start)),
        W(12, typed("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}})),
        W(15, typed("ping")),
        W(60, typed("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}})),
        W(70, typed("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": "x"}})),
        W(80, typed("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "Hello"}})),
        W(90, typed("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}})),
        W(95, typed("content_block_stop", {"index": 2})),
        W(100, typed("message_delta", {"delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 3}})),
        W(110, typed("message_stop")),
    ]


def test_messages_stream_is_measured_with_its_headers(run_scripted):
    run = run_scripted(Reply(_messages_writes()), messages_request())
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.ttft_s == run.at(60)  # the thinking delta; message_start, block start and ping are no tokens
    assert record.ttfc_s == run.at(80)
    assert record.e2e_s == run.at(110)
    assert len(record.token_times_s) == 3  # signature_delta carries no text
    assert record.completion_tokens.value == 3
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.prompt_tokens.value == 7
    assert record.cached_prompt_tokens == 2
    assert record.finish_reason == "stop"
    sent = run.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["x-api-key"] == "k"
    assert sent.json()["max_tokens"] == 16
    assert sent.json()["messages"] == HI


@pytest.mark.parametrize(
    ("stop_reason", "finish", "outcome"),
    [
        ("max_tokens", "length", Outcome.OK),
        ("stop_sequence", "stop", Outcome.OK),
        ("tool_use", "tool_calls", Outcome.OK),
        ("pause_turn", "pause_turn", Outcome.SERVER_ERROR),
    ],
)
def test_messages_stop_reason_maps_onto_finish_reasons(run_scripted, stop_reason, finish, outcome):
    record = run_scripted(Reply(_messages_writes(stop_reason)), messages_request()).record
    assert record.finish_reason == finish
    assert record.outcome is outcome


def test_messages_error_event_is_a_named_server_error(run_scripted):
    error = {"error": {"type": "overloaded_error", "message": "Overloaded"}}
    writes = [*_messages_writes()[:4], W(70, typed("error", error))]
    record = run_scripted(Reply(writes), messages_request()).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == "overloaded_error"
    assert "Overloaded" in record.error.message


def test_messages_non_streamed_reply(run_scripted):
    body = {"type": "message", "content": [{"type": "text", "text": "Hello there"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 7, "output_tokens": 2}}  # fmt: skip
    record = run_scripted(json_reply(200, json.dumps(body), at_ms=40), messages_request(stream=False)).record
    assert record.outcome is Outcome.OK, record.error
    assert record.finish_reason == "length"
    assert record.completion_tokens.value == 2
    assert record.prompt_tokens.value == 7


# ── embeddings ─────────────────────────────────────────────────────────────
def _embeddings(vectors, prompt_tokens=6):
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return json.dumps({"object": "list", "data": data, "usage": {"prompt_tokens": prompt_tokens, "total_tokens": 6}})


def test_embeddings_batch_is_measured_from_usage(run_scripted):
    request = build_embeddings_request(model="m", inputs=["a b", "c d", "e f"])
    run = run_scripted(json_reply(200, _embeddings([[0.1, 0.2]] * 3), at_ms=30), request)
    record = run.record
    assert record.outcome is Outcome.OK, record.error
    assert record.e2e_s == run.at(30)
    assert record.prompt_tokens.value == 6
    assert record.prompt_tokens.source is TokenSource.SERVER
    assert record.completion_tokens.value is None  # nothing is generated: not applicable, never 0
    assert record.completion_tokens.source is TokenSource.UNKNOWN
    assert record.inputs == 3
    assert record.ttft_s is None
    assert run.requests[0].json()["input"] == ["a b", "c d", "e f"]


def test_embeddings_reply_without_usage_has_unknown_input_tokens_never_zero(run_scripted):
    """Issue 24: the reply is a success, its input tokens unknown (counted as prompt source "unknown")."""
    request = build_embeddings_request(model="m", inputs=["a b", "c d"])
    body = json.dumps({"object": "list", "data": [{"index": i, "embedding": [0.1]} for i in range(2)]})
    record = run_scripted(json_reply(200, body, at_ms=10), request).record
    assert record.outcome is Outcome.OK, record.error
    assert (record.prompt_tokens.value, record.prompt_tokens.source) == (None, TokenSource.UNKNOWN)
    assert record.inputs == 2


@pytest.mark.parametrize(
    ("vectors", "category"),
    [([[0.1]] * 2, "wrong number of embeddings"), ([[0.1], [], [0.3]], "empty embedding")],
    ids=["two-of-three", "empty-vector"],
)
def test_embeddings_wrong_or_empty_vectors_fail(run_scripted, vectors, category):
    request = build_embeddings_request(model="m", inputs=["a", "b", "c"])
    record = run_scripted(json_reply(200, _embeddings(vectors), at_ms=10), request).record
    assert record.outcome is Outcome.SERVER_ERROR
    assert record.error is not None
    assert record.error.category == category


# ── preflight: a server that does not serve the API, or rejects the body ───
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})


def _route(post_reply: Reply):
    def reply(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, MODELS) if request.path == "/v1/models" else json_reply(404, "{}")
        return post_reply

    return reply


def _locust(locustfile: str, url: str, *extra: str):
    return run_locust(
        ["-f", f"locustfiles/{locustfile}.py", "--headless", "--only-summary", "-H", url,
         "-u", "1", "-r", "1", "--num-requests", "3", "-t", "30s", *extra],
        timeout_s=60,
    )  # fmt: skip


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
        proc = run_locust(
            ["-f", "locustfiles/messages.py", "--headless", "--only-summary", "-H", srv.base_url,
             "-u", "1", "-r", "1", "--num-requests", "2", "-t", "30s"],
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
        proc = run_locust(
            ["-f", "locustfiles/messages.py", "--headless", "--only-summary", "-H", srv.base_url,
             "-u", "1", "-r", "1", "--num-requests", "1", "-t", "30s", "--header", "Authorization: Bearer gw-token"],
            timeout_s=60,
            env={"OPENAI_API_KEY": ""},
        )  # fmt: skip
        posts = [r for r in srv.requests if r.method == "POST"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(posts) == 2
    for sent in posts:
        assert sent.headers["authorization"] == "Bearer gw-token"  # a gateway's own token, passed on purpose
        assert "x-api-key" not in sent.headers  # no key was set


def test_mixed_chat_and_messages_users_send_the_key_each_the_apis_way(tmp_path):
    locustfile = tmp_path / "chat_messages.py"
    locustfile.write_text(
        "from llmload.edge import api_users, hooks, users\n"
        "class Chat(users.ChatUser):\n    pass\n"
        "class Messages(api_users.MessagesUser):\n    pass\n"
        "hooks.install()\n"
    )

    def route(request: ReceivedRequest) -> Reply:
        if request.path == "/v1/chat/completions":
            return Reply([W(5, sse(ROLE, C({"content": "hi"}))), W(6, sse(CF("stop"), U(3, 1), "[DONE]"))])
        return _route(Reply(_messages_writes()))(request)

    with ScriptedServer(route) as srv:
        proc = run_locust(
            ["-f", str(locustfile), "--headless", "--only-summary", "-H", srv.base_url,
             "-u", "2", "-r", "2", "--num-requests", "4", "-t", "30s"],
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
