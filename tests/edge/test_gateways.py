"""Real servers and gateways: request shaping, auth headers, model lists.

Each scripted server on loopback copies what a real deployment answers; every
run is a single-process run in this process (``tests/edge/cluster.run_locust_here``),
bounded by ``--num-requests`` and a timeout.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable

import pytest

from llmload.edge.users import ChatUser
from llmload.testing import CF, ROLE, C, ReceivedRequest, Reply, ScriptedServer, U, W, json_reply, sse
from tests.edge.cluster import run_locust_here

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
STREAM = sse(ROLE, C({"content": "Hi"}), C({"content": " there"}), CF("stop"), "[DONE]")
STREAM_WITH_USAGE = sse(ROLE, C({"content": "Hi"}), C({"content": " there"}), CF("stop"), U(5, 2), "[DONE]")


def _error(message: str, kind: str, code: str | None, param: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def _stream() -> Reply:
    return Reply(writes=[W(2, STREAM)])


def _run(url: str, tmp_path, *extra: str, env: dict[str, str] | None = None, n: int = 6):
    out = tmp_path / "r.json"
    proc = run_locust_here(
        ChatUser,
        ["--headless", "--only-summary", "-H", url, "-u", "2", "--num-requests", str(n), "--results-json", str(out),
         *extra],
        users=2,
        env={"OPENAI_API_KEY": "", **(env or {})},
    )  # fmt: skip
    results = json.loads(out.read_text()) if out.exists() and out.read_text().strip() else None
    return proc, results


def _posts(srv: ScriptedServer) -> list[ReceivedRequest]:
    return [r for r in srv.requests if r.method == "POST"]


# ── NC-01: the endpoint refuses stream_options ─────────────────────────
def _strict(status: int) -> Callable[[ReceivedRequest], Reply]:
    def reply(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, MODELS)
        if "stream_options" in request.json():
            if status == 422:
                detail = [{"type": "extra_forbidden", "loc": ["body", "stream_options"], "msg": "Extra inputs"}]
                return json_reply(422, json.dumps({"detail": detail}))
            message = "Unknown parameter: 'stream_options'."
            return json_reply(400, _error(message, "invalid_request_error", "unknown_parameter", "stream_options"))
        return _stream()

    return reply


@pytest.mark.parametrize("status", [400, 422])
def test_nc01_endpoint_refusing_stream_options_is_retried_once_without_it_and_remembered(tmp_path, status):
    with ScriptedServer(_strict(status)) as srv:
        proc, results = _run(srv.base_url, tmp_path)
        posts = _posts(srv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert results["requests"]["total"] == results["requests"]["succeeded"] == 6
    with_field = [p for p in posts if "stream_options" in p.json()]
    assert len(with_field) == 1  # the preflight probe; every later request went without it
    assert len(posts) == 1 + 1 + 6  # refused probe, probe again, six requests
    assert proc.stderr.count("refused stream_options") == 1
    assert "streamed chunks" in proc.stderr
    assert results["tokens"]["completion_source"] == "chunk-count"
    assert results["run"]["options"]["request"]["stream_usage"] == "auto"


@pytest.mark.parametrize("users", ["1", "4"])
def test_nc01_refusal_met_mid_run_is_retried_once_per_request_not_counted_as_a_failure(tmp_path, users):
    with ScriptedServer(_strict(400)) as srv:
        proc, results = _run(srv.base_url, tmp_path, "--skip-preflight", "-u", users, "-r", users)
        posts = _posts(srv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert results["requests"]["succeeded"] == 6
    assert results["requests"]["failed"] == 0
    refused = sum("stream_options" in p.json() for p in posts)
    assert 1 <= refused <= int(users)  # only requests sent before the first refusal came back
    assert len(posts) == 6 + refused  # each refused request sent once more, without the field
    assert proc.stderr.count("refused stream_options") == 1


def test_nc01_stream_usage_off_never_asks_and_on_keeps_asking(tmp_path):
    with ScriptedServer(_strict(400)) as srv:
        off, off_results = _run(srv.base_url, tmp_path, "--stream-usage", "off")
        assert not any("stream_options" in p.json() for p in _posts(srv))
    assert off.returncode == 0, off.stderr[-3000:]
    assert off_results["requests"]["succeeded"] == 6
    with ScriptedServer(_strict(400)) as srv:
        on, _ = _run(srv.base_url, tmp_path, "--stream-usage", "on")
    assert on.returncode == 2
    assert "probe request for ChatUser" in on.stderr
    assert ".." not in on.stderr.split("probe request for ChatUser", 1)[1].splitlines()[0]


# ── NC-08: gateway auth header and a query string on every request ─────
def _azure(key: str, *, model_list: bool) -> Callable[[ReceivedRequest], Reply]:
    def reply(request: ReceivedRequest) -> Reply:
        if request.headers.get("api-key") != key:
            return json_reply(
                401, json.dumps({"error": {"code": "401", "message": "Access denied due to invalid subscription key."}})
            )
        if model_list and request.method == "GET" and request.path == "/openai/v1/models":
            return json_reply(200, MODELS)
        if model_list and request.method == "POST" and request.path == "/openai/v1/chat/completions":
            return Reply(writes=[W(2, STREAM_WITH_USAGE)])
        if request.method == "POST" and request.path == "/openai/deployments/m/chat/completions?api-version=2024-06-01":
            return Reply(writes=[W(2, STREAM_WITH_USAGE)])
        return json_reply(404, json.dumps({"error": {"code": "404", "message": "Resource not found"}}))

    return reply


def test_nc08_key_in_a_named_header_with_the_openai_layout_under_a_prefix(tmp_path):
    key = "k-test-0123456789"
    with ScriptedServer(_azure(key, model_list=True)) as srv:
        proc, results = _run(
            srv.base_url + "/openai", tmp_path, "--api-key-header", "api-key", env={"OPENAI_API_KEY": key}
        )
        posts = _posts(srv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert results["requests"]["succeeded"] == 6
    assert all(p.headers.get("api-key") == key and "authorization" not in p.headers for p in posts)
    assert results["run"]["options"]["request"]["key_header"] == "api-key"
    assert key not in proc.stdout + proc.stderr + json.dumps(results)


def test_nc08_azure_deployment_path_with_query_string_and_no_model_list(tmp_path):
    key = "k-test-abcdef"
    url = "/openai?api-version=2024-06-01"
    with ScriptedServer(_azure(key, model_list=False)) as srv:
        proc, results = _run(
            srv.base_url + url, tmp_path,
            "--header", f"api-key: {key}", "--header", "x-trace: on", "--model", "m",
            "--endpoint-path", "/deployments/m/chat/completions",
        )  # fmt: skip
        posts = _posts(srv)
        gets = [r for r in srv.requests if r.method == "GET"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert results["requests"]["succeeded"] == 6
    assert {p.path for p in posts} == {"/openai/deployments/m/chat/completions?api-version=2024-06-01"}
    assert all(p.headers.get("x-trace") == "on" for p in posts)
    assert gets[0].path == "/openai/v1/models?api-version=2024-06-01"
    assert "no model list; using --model m as given" in proc.stderr
    assert results["run"]["options"]["request"]["headers"] == ["api-key: ***", "x-trace: on"]
    assert key not in proc.stdout + proc.stderr + json.dumps(results)


def test_nc08_401_with_a_key_set_does_not_claim_the_key_is_unset(tmp_path):
    with ScriptedServer(_azure("right-key", model_list=True)) as srv:
        wrong, _ = _run(
            srv.base_url + "/openai", tmp_path, "--api-key-header", "api-key", env={"OPENAI_API_KEY": "wrong-key"}
        )
        unset, _ = _run(srv.base_url + "/openai", tmp_path, "--api-key-header", "api-key")
    assert wrong.returncode == 2
    assert "HTTP 401 (not authorised) to the API key sent as api-key" in wrong.stderr
    assert "set the API key in" not in wrong.stderr
    assert "wrong-key" not in wrong.stderr + wrong.stdout
    assert unset.returncode == 2
    assert "set the API key in $OPENAI_API_KEY" in unset.stderr
    assert "//" not in wrong.stderr.split("GET ", 1)[1].split("://", 1)[1].split()[0]


def test_an_empty_api_key_file_is_refused_before_load_not_sent_as_no_key(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("\n")
    with ScriptedServer(_azure("right-key", model_list=True)) as srv:
        proc, _ = _run(srv.base_url + "/openai", tmp_path, "--api-key-file", str(key_file))
        served = len(srv.requests)
    assert proc.returncode == 2
    assert f"--api-key-file '{key_file}': its first line is empty" in proc.stderr
    assert served == 0  # refused before the preflight


# ── NC-11: a server without GET /v1/models ──────────────────────────────
def _no_model_list(request: ReceivedRequest) -> Reply:
    if request.method == "POST" and request.path == "/v1/chat/completions":
        return _stream()
    body = {"code": 404, "type": "ResourceNotFoundException", "message": "Requested resource is not found"}
    return json_reply(404, json.dumps(body))


def test_nc11_missing_model_list_is_a_warning_with_model_and_a_stop_asking_for_it_without(tmp_path):
    with ScriptedServer(_no_model_list) as srv:
        given, results = _run(srv.base_url, tmp_path, "--model", "m")
        missing, _ = _run(srv.base_url, tmp_path)
        skipped, skipped_results = _run(srv.base_url, tmp_path, "--model", "m", "--skip-preflight")
    assert given.returncode == 0, given.stderr[-3000:]
    assert results["requests"]["succeeded"] == 6
    assert "answered HTTP 404: the server has no model list; using --model m as given" in given.stderr
    assert missing.returncode == 2
    assert "needs --model NAME" in missing.stderr
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert skipped_results["requests"]["succeeded"] == 6


# ── NC-17: the endpoint wants max_completion_tokens; extra body fields ──
def _wants_max_completion_tokens(request: ReceivedRequest) -> Reply:
    if request.method == "GET":
        return json_reply(200, MODELS)
    if "max_tokens" in request.json():
        message = (
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
        )
        return json_reply(400, _error(message, "invalid_request_error", "unsupported_parameter", "max_tokens"))
    return Reply(writes=[W(2, STREAM_WITH_USAGE)])


def test_nc17_max_completion_tokens_field_and_extra_body_fields_reach_the_server(tmp_path):
    extra = {"top_p": 0.5, "chat_template_kwargs": {"enable_thinking": False}}
    with ScriptedServer(_wants_max_completion_tokens) as srv:
        refused, _ = _run(srv.base_url, tmp_path)
        proc, results = _run(
            srv.base_url, tmp_path, "--max-tokens-field", "max_completion_tokens", "--max-tokens", "7",
            "--extra-body", json.dumps(extra),
        )  # fmt: skip
        bodies = [p.json() for p in _posts(srv)][1:]
    assert refused.returncode == 2
    assert "max_completion_tokens" in refused.stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert results["requests"]["succeeded"] == 6
    assert all(b["max_completion_tokens"] == 7 or b["max_completion_tokens"] == 2 for b in bodies)
    assert all(b["top_p"] == 0.5 and b["chat_template_kwargs"] == {"enable_thinking": False} for b in bodies)
    assert results["run"]["options"]["request"]["max_tokens_field"] == "max_completion_tokens"
    assert json.loads(results["run"]["options"]["request"]["extra_body"]) == extra


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('{"n": 2}', "--extra-body sets n=2: several choices per request break"),
        ('{"stream": false}', "--extra-body may not set 'stream': llmload sets it; use --no-stream"),
        ('{"max_tokens": 5}', "use --max-tokens and --max-tokens-field"),
        ('{"stream_options": {"include_usage": false}}', "use --stream-usage"),
        ('{"echo": true}', "the prompt would count as output tokens"),
        ("[1]", "--extra-body must be a JSON object"),
    ],
)
def test_nc17_extra_body_keys_that_break_accounting_are_refused_before_load(tmp_path, body, needle):
    with ScriptedServer(_wants_max_completion_tokens) as srv:
        proc, _ = _run(srv.base_url, tmp_path, "--extra-body", body)
        assert not _posts(srv)
    assert proc.returncode == 2
    assert needle in proc.stderr


# ── small things: wording ──────────────────────────────────────────────
def test_g_small_no_stream_start_up_line_does_not_mention_stream_options(tmp_path):
    def reply(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, MODELS)
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}  # fmt: skip
        return json_reply(200, json.dumps(body))

    with ScriptedServer(reply) as srv:
        proc, _ = _run(srv.base_url, tmp_path, "--no-stream", n=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stream_options" not in proc.stderr
    assert "token counts come from the server's usage in each reply" in proc.stderr


def test_g_small_double_slash_and_gzip_body_are_named(tmp_path):
    def reply(request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(404, "{}")
        return Reply(writes=[W(2, gzip.compress(STREAM))])

    with ScriptedServer(reply) as srv:
        _, results = _run(srv.base_url + "/api/", tmp_path, "--model", "m", "--skip-preflight", n=2)
        listing, _ = _run(srv.base_url + "/api/", tmp_path, n=2)
    assert "/api/v1/models" in listing.stderr
    assert "//v1" not in listing.stderr
    assert results["requests"]["failed"] == 2
    assert "Content-Encoding: gzip" in json.dumps(results["errors"])
