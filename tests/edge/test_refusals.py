"""Failures a single-process run reports (BC-29) and hosts refused before load (NC-28), in process.

Locust's ``LocalRunner`` with llmload's hooks (``tests/edge/cluster.run_local``) against a scripted
server; what a ``locust`` process would print is read with ``capsys``. These used to start a
``locust`` process each, only to read its results and its one-line message.
"""

from __future__ import annotations

import json

import pytest

from llmload.edge.users import ChatUser, CompletionUser
from llmload.testing import ScriptedServer, json_reply
from tests.checks import MODELS, models_route
from tests.edge.cluster import run_local
from tests.simserver import serve

NOT_SERVED = json.dumps(
    {"error": {"message": "model 'm' is not served", "type": "NotFoundError", "param": None, "code": 404}}
)


# Case BC-29: errors mid-run -> failure rate shown, exit non-zero.
def test_bc29_every_request_404_mid_run_is_reported_and_exits_nonzero(capsys) -> None:
    with ScriptedServer(models_route(json_reply(404, NOT_SERVED))) as srv:
        args = ["--headless", "--only-summary", "-H", srv.base_url, "--num-requests", "20", "--skip-preflight"]
        run = run_local(ChatUser, srv.base_url, args, users=4)
    assert run.exit_status == 1
    results = run.results
    assert results is not None
    assert results["requests"]["failed"] == 20
    assert results["requests"]["succeeded"] == 0
    assert results["requests"]["failure_ratio"] == 1.0
    assert [e["category"] for e in results["errors"]] == ["HTTP 404 NotFoundError"]
    assert "FAILED: all 20 requests failed; exit status 1" in capsys.readouterr().out


# Case BC-29: preflight probe against a server whose generation endpoint refuses the model.
def test_bc29_preflight_probe_failure_stops_before_load(capsys) -> None:
    with ScriptedServer(models_route(json_reply(404, NOT_SERVED))) as srv:
        run = run_local(CompletionUser, srv.base_url, ["--headless", "-H", srv.base_url], users=4)
        posts = [r for r in srv.requests if r.method == "POST"]
    assert run.exit_status == 2
    err = capsys.readouterr().err
    assert "probe request for CompletionUser (POST /v1/completions) failed: HTTP 404 NotFoundError" in err
    assert "Drop /v1" not in err
    assert len(posts) == 1  # the probe only; no load


# The OpenAI base_url habit: -H http://host/v1 would make llmload post /v1/v1/chat/completions. It was
# found only by the preflight's 404 (ending in an unrelated --model hint); now refused before anything is sent.
@pytest.mark.parametrize("suffix", ["/v1", "/v1/"], ids=["v1", "v1-slash"])
def test_base_url_kind_host_ending_in_v1_is_refused_before_load_with_the_root_to_pass(suffix, capsys) -> None:
    with ScriptedServer(models_route(json_reply(200, MODELS))) as srv:
        root = srv.base_url
        host = root + suffix
        run = run_local(ChatUser, host, ["--headless", "-H", host, "--model", "m"], users=1)
        requests = srv.requests
    assert run.exit_status == 2
    err = capsys.readouterr().err
    assert (
        f"-H {host} ends in /v1 and llmload adds /v1/chat/completions itself, so every request would go to "
        f"/v1/v1/chat/completions and fail. Pass the server's root without /v1: -H {root} "
    ) in err
    assert "--model" not in err
    assert requests == []  # refused before anything was sent, the model list included
    assert run.results is not None
    assert run.results["run"]["refused_options"] == {"-H": host}


@pytest.mark.parametrize(
    ("user", "path", "api"),
    [
        (ChatUser, "/v1/responses", "the OpenAI Responses API"),
        (CompletionUser, "/v1/embeddings/", "the embeddings API"),
    ],
)
def test_nc28_kind_host_naming_another_api_is_refused_before_load(user, path, api, capsys) -> None:
    with ScriptedServer(models_route(json_reply(200, "{}"))) as srv:
        root = srv.base_url
        host = root + path
        run = run_local(user, host, ["--headless", "-H", host], users=1)
        requests = srv.requests
    assert run.exit_status == 2
    err = capsys.readouterr().err
    assert f"-H {host} ends in {path.rstrip('/')}, which is {api}" in err
    own = "/v1/chat/completions" if user is ChatUser else "/v1/completions"
    assert f"Pass the server's root, -H {root} (llmload adds {own})" in err
    assert requests == []  # refused before anything was sent


# A new user's run at --max-tokens beyond the model's context: preflight only warned, then every request
# failed (HTTP 400). With one prompt for every request, the server's max_model_len now stops it first.
def test_one_prompt_and_max_tokens_beyond_the_served_context_length_is_refused_before_load(capsys) -> None:
    with serve("--max-model-len", "64") as sim:
        args = ["--headless", "-H", sim.url, "--num-requests", "4", "--max-tokens", "100", "--prompt", "Say hi."]
        run = run_local(CompletionUser, sim.url, args, users=1)
        sent = sim.total("requests_completed", "/v1/completions") + sim.total("requests_rejected", "/v1/completions")
    assert run.exit_status == 2
    err = capsys.readouterr().err
    assert "--max-tokens (100)" in err
    assert "exceeds the model's context length (64 tokens, max_model_len in GET /v1/models)" in err
    prompt = int(err.split("CompletionUser: prompt (")[1].split(" tokens")[0])
    assert f"Pass --max-tokens {64 - prompt} or less (use --skip-preflight to send them anyway)" in err
    assert sent == 1  # the probe only; no load


def test_prompts_of_varied_lengths_beyond_the_context_are_a_warning_not_a_stop(tmp_path, caplog) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "Say hi."}\n{"prompt": "Say hello."}\n')
    with serve("--max-model-len", "64") as sim:
        args = ["--headless", "-H", sim.url, "--num-requests", "2", "--max-tokens", "100", "--dataset", str(dataset),
                "--max-failure-ratio", "1"]  # fmt: skip
        run = run_local(CompletionUser, sim.url, args, users=1)
    assert "exceeds the model's context length (64 tokens" in caplog.text
    assert "requests with a prompt this long will be refused or cut short" in caplog.text
    assert run.results is not None
    assert run.results["requests"]["failed"] == 2  # the load was sent: the user asked for it
