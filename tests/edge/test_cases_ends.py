"""Streams that end oddly and replies that are not what was asked (NC-21, NC-28, NC-29, NC-31): whole runs, here.

Each run is a locust command line run in this process (``tests/edge/cluster.run_locustfile_here``)
against a scripted server on loopback, bounded by ``--num-requests`` and ``-t``; the single
requests behind them are measured in ``tests/integration/test_cases_ends.py``.
"""

from __future__ import annotations

import json

import pytest

from llmload.testing import CF, ROLE, C, ReceivedRequest, Reply, ScriptedServer, W, json_reply, sse
from tests.edge.cluster import run_locustfile_here
from tests.integration.test_cases_ends import _COMPLETION, _H2_GOAWAY, _H2_SETTINGS, _held_after, _held_open, _route


def test_nc21_run_against_a_held_open_body_measures_the_server_rate(tmp_path):
    out = tmp_path / "r.json"
    with ScriptedServer(_route(_held_open(pings=False))) as srv:
        proc = run_locustfile_here(
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", srv.base_url,
                "-u", "1", "-r", "1", "--num-requests", "10", "-t", "60s", "--results-json", str(out),
            ],
            timeout_s=90,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["requests"]["succeeded"] == 10
    e2e = results["latency"]["e2e_s"]
    assert 0.045 < e2e["p50"] < 0.1
    assert results["throughput"]["requests_per_s"] > 5  # ~20/s: 50 ms replies, not 15 s holds (0.07/s)


def test_nc21_kind_finish_no_done_run_warns_once_and_measures_the_server(tmp_path):
    out = tmp_path / "r.json"
    with ScriptedServer(_route(_held_after([sse(CF("stop"))]))) as srv:
        proc = run_locustfile_here(
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", srv.base_url,
                "-u", "1", "-r", "1", "--num-requests", "3", "-t", "60s", "--results-json", str(out),
            ],
            timeout_s=90,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("sent neither [DONE] nor an end of body after the finish_reason") == 1
    results = json.loads(out.read_text())
    assert results["requests"]["succeeded"] == 3
    assert 0.045 < results["latency"]["e2e_s"]["p50"] < 0.1


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "skip-preflight"])
def test_nc31_run_warns_once_that_the_server_did_not_stream(tmp_path, preflight):
    out = tmp_path / "r.json"
    with ScriptedServer(_route(json_reply(200, _COMPLETION, at_ms=20))) as srv:
        proc = run_locustfile_here(
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", srv.base_url,
                "-u", "2", "-r", "2", "--num-requests", "6", "-t", "60s", "--results-json", str(out),
                *([] if preflight else ["--skip-preflight"]),
            ],
            timeout_s=90,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["requests"]["succeeded"] == 6
    assert results["tokens"]["completion"] == 6 * 4
    assert results["latency"]["ttft_s"]["count"] == 0
    assert proc.stderr.count("did not stream") == 1, proc.stderr[-3000:]
    assert "the server streams usage" not in proc.stderr


def _refused_run(reply: Reply) -> tuple[object, list[ReceivedRequest]]:
    with ScriptedServer(reply) as srv:
        proc = run_locustfile_here(
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", srv.base_url,
                "-u", "2", "-r", "2", "--num-requests", "4", "-t", "30s",
            ],
            timeout_s=60,
        )  # fmt: skip
        return proc, srv.requests


@pytest.mark.parametrize(
    "frames", [_H2_SETTINGS + _H2_GOAWAY, _H2_GOAWAY, _H2_SETTINGS], ids=["settings-goaway", "goaway", "settings"]
)
def test_nc29_http2_only_port_is_named_before_load(frames):
    proc, requests = _refused_run(Reply(writes=[W(1, frames)], raw=True))
    assert proc.returncode == 2, proc.stderr[-3000:]  # type: ignore[attr-defined]
    stderr = proc.stderr  # type: ignore[attr-defined]
    assert "the server answered with HTTP/2 frames, not HTTP/1.1 (a gRPC or h2c-only port?)" in stderr
    assert "Is the server up" not in stderr
    assert "Expected HTTP/" not in stderr
    assert [r.method for r in requests] == ["GET"]  # the model list only: nothing posted


def test_nc29_http_version_not_supported_is_named_before_load():
    proc, requests = _refused_run(
        Reply(writes=[W(1, b"HTTP/2 required\n")], status=505, headers={"Content-Type": "text/plain"})
    )
    assert proc.returncode == 2, proc.stderr[-3000:]  # type: ignore[attr-defined]
    stderr = proc.stderr  # type: ignore[attr-defined]
    assert "answered HTTP 505" in stderr
    assert "HTTP Version Not Supported" in stderr
    assert "the server refuses HTTP/1.1" in stderr
    assert [r.method for r in requests] == ["GET"]


@pytest.mark.parametrize(
    ("locustfile", "path", "api", "speaker", "speaker_file"),
    [
        ("chat", "/v1/responses", "the OpenAI Responses API", "ResponsesUser", "responses"),
        ("chat", "/v1/messages", "the Anthropic Messages API", "MessagesUser", "messages"),
        ("completions", "/api/v1/embeddings?x=1", "the embeddings API", "EmbeddingsUser", "embeddings"),
    ],
)
def test_nc28_endpoint_path_of_another_api_is_refused_before_load(locustfile, path, api, speaker, speaker_file):
    with ScriptedServer(_route(Reply(writes=[W(1, sse(ROLE, C({"content": "Hi"}), CF("stop"), "[DONE]"))]))) as srv:
        proc = run_locustfile_here(
            [
                "-f", f"locustfiles/{locustfile}.py", "--headless", "--only-summary", "-H", srv.base_url,
                "-u", "1", "-r", "1", "--num-requests", "2", "-t", "30s", "--endpoint-path", path,
            ],
            timeout_s=60,
        )  # fmt: skip
        requests = srv.requests
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"--endpoint-path {path} is {api}" in proc.stderr
    user = "ChatUser posts chat/completions" if locustfile == "chat" else "CompletionUser posts completions"
    assert user in proc.stderr
    assert f"to load {api}, run {speaker} (locust -f $(llmload locustfile {speaker_file}))" in proc.stderr
    assert requests == []  # refused before anything was sent
