"""Throttled replies (429/503) end to end: their own outcome, and no request storm (NC-09).

Single-process runs in this process (``tests/edge/cluster.run_locust_here``) against a
scripted loopback server, each bounded by -t and a timeout.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from llmload.edge.users import ChatUser
from llmload.testing import CF, C, Framing, ReceivedRequest, Reply, ScriptedServer, U, W, json_reply, sse
from tests.edge.cluster import run_locust_here

_MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
_RATE_LIMITED = json.dumps({"error": {"code": "rate_limit_exceeded", "message": "Rate limit reached.", "type": "429"}})


class ThrottleWindow:
    """The first POST streams normally; every POST in the next ``window_s`` gets ``status`` at once; then normal."""

    def __init__(
        self,
        status: int,
        *,
        window_s: float = 2.0,
        retry_after: str | None = "1",
        body: str = _RATE_LIMITED,
        delay_ms: float = 0,
    ) -> None:
        self.status, self.window_s, self.retry_after = status, window_s, retry_after
        self.body, self.delay_ms = body, delay_ms
        self._lock = threading.Lock()
        self._first_s: float | None = None
        self.in_window = 0

    def __call__(self, request: ReceivedRequest) -> Reply:
        if request.method == "GET":
            return json_reply(200, _MODELS)
        now = time.monotonic()
        with self._lock:
            if self._first_s is None:
                self._first_s = now
            elif now - self._first_s < self.window_s:
                self.in_window += 1
                headers = {"Content-Type": "application/json"}
                if self.retry_after is not None:
                    headers["Retry-After"] = self.retry_after
                body = self.body.encode()
                return Reply(
                    [W(self.delay_ms, body)], status=self.status, headers=headers, framing=Framing.CONTENT_LENGTH
                )
        return Reply([W(2, sse(C({"content": "a"}), CF("stop"), U(3, 1), "[DONE]"))])


def _run(server: ScriptedServer, tmp_path, *extra: str) -> tuple[dict, str]:
    """Results and console output (summary on stdout, Locust's tables on stderr) of one run."""
    out = tmp_path / "r.json"
    proc = run_locust_here(
        ChatUser,
        ["--headless", "--only-summary", "-H", server.base_url, "--model", "m", "--skip-preflight",
         "--results-json", str(out), "--max-failure-ratio", "1", *extra],
        users=1,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout + proc.stderr


@pytest.mark.parametrize("status", [429, 503])
def test_nc09_closed_loop_user_honours_retry_after_instead_of_storming(tmp_path, status):
    script = ThrottleWindow(status)
    with ScriptedServer(script) as server:
        results, output = _run(server, tmp_path, "-u", "1", "-t", "4s")
    requests = results["requests"]
    throttled = requests["by_outcome"]["throttled"]
    # 2 s of throttling with Retry-After: 1 costs about two requests (at 0 s and 1 s), not thousands
    assert 1 <= throttled == script.in_window <= 4, (throttled, script.in_window)
    assert requests["by_outcome"]["http_error"] == 0
    assert requests["failed"] == throttled  # throttled requests count toward --max-failure-ratio
    assert requests["succeeded"] >= 2  # normal service resumed after the window
    assert [(e["category"].split()[:2], e["count"]) for e in results["errors"]] == [(["HTTP", str(status)], throttled)]
    assert any(
        line.startswith("Throttled (429/503):") and line.split()[2] == str(throttled) for line in output.splitlines()
    )
    # Locust's failure table lists the category as plain text (RequestError.__repr__ is its message)
    assert any(f": HTTP {status}" in line and "Error(" not in line for line in output.splitlines()), output[-2000:]


def test_nc09_closed_loop_without_retry_after_backs_off_exponentially(tmp_path):
    script = ThrottleWindow(429, window_s=2.5, retry_after=None)
    with ScriptedServer(script) as server:
        results, _ = _run(server, tmp_path, "-u", "1", "-t", "4s")
    # pauses of 0.5-1 s, 1-2 s, 2-4 s: at most three throttled requests in 2.5 s
    assert 1 <= results["requests"]["by_outcome"]["throttled"] == script.in_window <= 3


def test_nc09_max_retry_after_caps_the_pause(tmp_path):
    script = ThrottleWindow(429, retry_after="3600")
    with ScriptedServer(script) as server:
        results, _ = _run(server, tmp_path, "-u", "1", "-t", "4s", "--max-retry-after", "0.5")
    # an hour asked, half a second honoured: about four throttled requests in 2 s, and service resumed
    assert 2 <= results["requests"]["by_outcome"]["throttled"] <= 6
    assert results["requests"]["succeeded"] >= 2


def test_nc09_bare_503_without_retry_after_is_a_failure_not_throttling(tmp_path):
    down = json.dumps({"error": {"message": "upstream connect error", "type": "ServiceUnavailableError"}})
    script = ThrottleWindow(503, window_s=1.0, retry_after=None, body=down, delay_ms=50)
    with ScriptedServer(script) as server:
        results, output = _run(server, tmp_path, "-u", "1", "-t", "3s")
    by_outcome = results["requests"]["by_outcome"]
    assert by_outcome["throttled"] == 0
    assert 1 <= by_outcome["http_error"] == script.in_window  # no back-off: an outage is not a rate limit
    assert [(e["category"], e["status"]) for e in results["errors"]] == [("HTTP 503 ServiceUnavailableError", 503)]
    assert "Throttled (429/503):" not in output


def test_nc09_open_loop_schedule_is_not_changed_by_throttling(tmp_path):
    script = ThrottleWindow(429)
    with ScriptedServer(script) as server:
        results, output = _run(server, tmp_path, "-u", "4", "-t", "3s", "--request-rate", "20", "--arrival", "constant")
    throttled = results["requests"]["by_outcome"]["throttled"]
    assert throttled == script.in_window >= 25  # ~40 arrivals fall in the 2-s window; none is held back
    assert "Throttled (429/503):" in output
