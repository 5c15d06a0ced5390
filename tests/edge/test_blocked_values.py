"""A run refused before load records the values it was given, the refused ones included, in process.

Locust's ``LocalRunner`` with llmload's hooks (``tests/edge/cluster.run_local``) against a
scripted server that lists model ``m``; the blocked results are read from the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.edge.users import ChatUser
from llmload.testing import ScriptedServer, json_reply
from tests.checks import MODELS, models_route
from tests.edge.cluster import run_local

_GIVEN = ["--model", "mx", "--num-requests", "4", "--temperature", "0.3", "--warmup-requests", "2"]


def _blocked(tmp_path: Path, args: list[str], users: int = 2) -> dict:
    """The blocked results the run wrote to ``--results-json`` (a run refused at its options has no runtime)."""
    out = tmp_path / "r.json"
    with ScriptedServer(models_route(json_reply(200, MODELS))) as srv:
        argv = ["--headless", "-H", srv.base_url, "--results-json", str(out), *args]
        run = run_local(ChatUser, srv.base_url, argv, users=users)
        sent = list(srv.requests)
    assert run.exit_status == 2
    results = json.loads(out.read_text())
    assert results["exit_status"] == 2
    assert results["requests"]["total"] == 0
    assert sent == []  # refused before the preflight
    return results


def _as_given(options: dict) -> None:
    """``_GIVEN`` is what the options section says, not the defaults."""
    assert options["model"] == "mx"
    assert options["num_requests"] == 4
    assert options["temperature"] == 0.3
    assert options["warmup_requests"] == 2


@pytest.mark.parametrize(
    ("refused", "given"),
    [
        (["--max-tokens", "abc"], {"--max-tokens": "abc"}),
        (["--max-tokens", "0", "--seed", "soon"], {"--max-tokens": "0", "--seed": "soon"}),
        (["--arrival", "gamma"], {"--arrival": "gamma"}),  # a rule over several options: no --request-rate
        (["--header", "Content-Length: 3"], {"--header": "***"}),  # a secret option's value is never written
    ],
    ids=["one value", "two values", "cross-option rule", "secret option"],
)
def test_blocked_results_record_the_refused_values_as_given_and_the_other_options_too(tmp_path, refused, given) -> None:
    """Issue 24: the blocked results of a run refused for its options recorded every option's default
    (model null, num_requests null, max_tokens 128), so the file did not say why it was blocked. Now the
    refused values are in ``run.refused_options`` as given, and every other option as given."""
    results = _blocked(tmp_path, [*_GIVEN, *refused])
    assert results["run"]["refused_options"] == given
    assert results["run"]["num_requests"] == 4
    _as_given(results["run"]["options"])
    for flag in given:
        assert flag in results["blocked"]


@pytest.mark.parametrize(
    ("refused", "given", "users"),
    [
        (["-u", "0"], {"-u": "0"}, 0),
        (["--batch-size", "8"], {"--batch-size": "8"}, 2),
    ],
    ids=["no users", "batch size without embeddings"],
)
def test_blocked_results_of_a_refused_launch_check_record_its_value_as_given(tmp_path, refused, given, users) -> None:
    """Issue 24: the checks before the preflight (-u 0, --batch-size without an embeddings user)
    left no trace of the refused value in the results but the message."""
    results = _blocked(tmp_path, [*_GIVEN, *refused], users=users)
    assert results["run"]["refused_options"] == given
    _as_given(results["run"]["options"])


def test_issue24_host_of_an_endpoint_is_refused_with_the_other_bad_values_before_load(tmp_path) -> None:
    """-H http://HOST/v1/chat/completions (the endpoint's whole URL) was accepted: every request
    went to /v1/chat/completions/v1/chat/completions. Now it is refused in the one message that
    lists every refused value, before the preflight, and recorded as given."""
    out = tmp_path / "r.json"
    with ScriptedServer(models_route(json_reply(200, MODELS))) as srv:
        root = srv.base_url
        host = root + "/v1/chat/completions"
        argv = ["--headless", "-H", host, "--results-json", str(out), *_GIVEN, "--max-tokens", "abc"]
        run = run_local(ChatUser, host, argv, users=2)
        sent = list(srv.requests)
    assert run.exit_status == 2
    assert sent == []
    results = json.loads(out.read_text())
    assert results["blocked"].startswith(f"2 invalid options: (1) -H {host} ends in an endpoint path")
    assert f"pass the server's base URL: -H {root}" in results["blocked"]
    assert "(2) --max-tokens must be a positive integer" in results["blocked"]
    assert results["run"]["refused_options"] == {"-H": host, "--max-tokens": "abc"}
    _as_given(results["run"]["options"])
