"""Issue 24: a hung server stops the run at --preflight-timeout (or -t), with a line per step that waits.

Before, the preflight waited up to --read-timeout (300 s) without a word. Three kinds of hang,
each a locust command line run in this process (``tests/edge/cluster.run_locustfile_here``), bounded
by a timeout: a server that accepts the connection and never answers
GET /v1/models; the same with only -t given; a server that answers the model list but keeps the
probe request open forever, trickling keep-alive comments (so no read timeout ever fires).
"""

from __future__ import annotations

import json
from pathlib import Path

from llmload.testing import Reply, ScriptedServer, W, json_reply
from tests.edge.cluster import run_locustfile_here as run_locust
from tests.integration.test_blocked_at_init import SilentServer

_MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
_ARGS = ["-f", "locustfiles/chat.py", "--headless", "-u", "2", "-r", "2"]


def _blocked_reason(out: Path) -> str:
    results = json.loads(out.read_text())
    assert results["requests"]["total"] == 0
    assert results["exit_status"] == 2
    reason: str = results["blocked"]
    return reason


def test_issue24_silent_server_stops_at_the_preflight_timeout_saying_what_it_waited_for(tmp_path):
    out = tmp_path / "r.json"
    with SilentServer() as server:
        url = f"http://127.0.0.1:{server.port}"
        proc = run_locust(
            [*_ARGS, "-H", url, "--num-requests", "4", "--preflight-timeout", "2", "--results-json", str(out)],
            timeout_s=60,  # --read-timeout is 300 s: a run that waited for it would time out here
        )
        assert server.accepted.is_set()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"llmload preflight: waiting for GET {url}/v1/models (up to 2 s)" in proc.stderr, proc.stderr[-3000:]
    line = f"llmload: error: preflight: no complete answer to GET {url}/v1/models within 2 s"
    assert line in proc.stderr, proc.stderr[-3000:]
    assert "--preflight-timeout" in _blocked_reason(out)
    assert "Traceback" not in proc.stderr


def test_issue24_run_time_bounds_the_preflight_too(tmp_path):
    out = tmp_path / "r.json"
    with SilentServer() as server:
        url = f"http://127.0.0.1:{server.port}"
        proc = run_locust([*_ARGS, "-H", url, "-t", "2s", "--results-json", str(out)], timeout_s=60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"waiting for GET {url}/v1/models (up to 2 s)" in proc.stderr, proc.stderr[-3000:]
    assert "within 2 s" in _blocked_reason(out)


def test_issue24_probe_kept_open_by_keepalive_comments_is_bounded(tmp_path):
    """Bytes keep coming (an SSE comment every 0.3 s for a minute), so only the step's own limit ends it."""
    out = tmp_path / "r.json"
    pings = Reply(writes=[W(i * 300, b": ping\n\n") for i in range(200)])

    def reply(request):
        return json_reply(200, _MODELS) if request.method == "GET" else pings

    with ScriptedServer(reply) as server:
        proc = run_locust(
            [*_ARGS, "-H", server.base_url, "--num-requests", "4", "--preflight-timeout", "2", "--read-timeout", "60",
             "--results-json", str(out)],
            timeout_s=60,
        )  # fmt: skip
        posts = [r for r in server.requests if r.method == "POST"]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "waiting for the probe request POST /v1/chat/completions (ChatUser) (up to 2 s)" in proc.stderr, proc.stderr[
        -3000:
    ]
    assert "no complete answer to the probe request POST /v1/chat/completions (ChatUser) within 2 s" in proc.stderr
    assert len(posts) == 1  # the probe only: no load was sent
    assert "--preflight-timeout" in _blocked_reason(out)
