"""A headless run refused at init still says so: one line, the blocked results, exit status 2, here.

Each locust command line runs in this process (``tests/edge/cluster.run_locustfile_here``;
``--processes 2``: a master and two workers) against a scripted loopback server or none. The runs
stopped by a signal, and a master waiting for workers that never come, stay process tests in
``tests/integration/test_blocked_at_init.py``.
"""

from __future__ import annotations

import pytest

from llmload.testing import ScriptedServer, json_reply
from tests.edge.cluster import run_locustfile_here
from tests.integration.procs import free_port
from tests.integration.test_blocked_at_init import _MODELS, _blocked


@pytest.mark.parametrize(
    ("case", "extra", "reason"),
    [
        ("wrong model", ["--model", "other"], 'model "other" not served; available: m'),
        ("dead server", ["-H", "DEAD"], "cannot reach"),
        ("bad option", ["--max-tokens", "abc"], "--max-tokens must be a positive integer, got 'abc'"),
        ("framing header", ["--header", "Content-Length: 3"], "the Content-Length header is refused"),
        # issue 24: --batch-size was accepted and ignored by a run without EmbeddingsUser
        (
            "batch size without embeddings",
            ["--batch-size", "8"],
            "--batch-size 8 applies to EmbeddingsUser only, and this run has no embeddings user (ChatUser)",
        ),
        # -u 0 idled to -t and then failed "no request finished": refused before load instead
        ("no users", ["-u", "0"], "-u 0 starts no user, so no request would be sent; pass -u N with N >= 1"),
        # Locust's forked workers dial --master-port: a master bound elsewhere waited for ever, START said success
        (
            "processes on another port",
            ["--processes", "2", "--master-bind-host", "127.0.0.1", "--master-bind-port", "PORT"],
            "the forked workers connect to --master-port 5557, so none would join; pass --master-port",
        ),
    ],
)
def test_headless_run_blocked_at_init_writes_blocked_results_with_the_reason(tmp_path, case, extra, reason):
    out = tmp_path / "nested" / "r.json"
    with ScriptedServer(lambda _request: json_reply(200, _MODELS)) as server:
        host = f"http://127.0.0.1:{free_port()}" if "DEAD" in extra else server.base_url
        args = [str(free_port()) if a == "PORT" else a for a in extra if a not in ("-H", "DEAD")]
        proc = run_locustfile_here(
            ["-f", "locustfiles/chat.py", "--headless", "-H", host, "-u", "2", "-r", "2", "--num-requests", "4",
             "--results-json", str(out), *args],
            timeout_s=90,
        )  # fmt: skip
        posts = [r for r in server.requests if r.method == "POST"]
    assert proc.returncode == 2, (case, proc.stderr[-3000:])
    assert "llmload: error: " in proc.stderr
    assert reason in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    results = _blocked(out, proc.stdout)
    assert reason in results["blocked"]
    assert reason in results["verdict"]
    # no model chosen: unknown (null), not ""; a --model given is the one the run would have sent
    assert results["run"]["model"] == ("other" if "--model" in extra else None)
    assert posts == []  # nothing was sent (preflight probes included: the checks before them failed)
