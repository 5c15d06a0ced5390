"""Issue 24: a run with several invalid options names all of them in one line, before any load."""

from __future__ import annotations

import pytest

from tests.integration.procs import free_port, run_locust

pytestmark = pytest.mark.integration


def test_issue24_cli_reports_every_invalid_option_at_once():
    proc = run_locust(
        ["-f", "locustfiles/chat.py", "--headless", "-H", f"http://127.0.0.1:{free_port()}", "-u", "1",
         "--max-tokens", "abc", "--read-timeout", "-1", "--temperature", "hot"],
        timeout_s=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("llmload: error: ")]
    assert line.startswith("llmload: error: 3 invalid options: (1) --max-tokens must be a positive integer, got 'abc'")
    assert "(2) --temperature" in line or "(2) --read-timeout" in line
    for flag in ("--max-tokens", "--read-timeout", "--temperature"):
        assert flag in line
    assert "cannot reach" not in proc.stderr  # refused before the preflight


def test_issue24_cli_reports_a_host_of_an_endpoint_with_the_other_invalid_options():
    root = f"http://127.0.0.1:{free_port()}"
    proc = run_locust(
        ["-f", "locustfiles/chat.py", "--headless", "-H", f"{root}/v1/chat/completions", "-u", "1",
         "--max-tokens", "abc"],
        timeout_s=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("llmload: error: ")]
    assert line.startswith(f"llmload: error: 2 invalid options: (1) -H {root}/v1/chat/completions ends in an endpoint")
    assert f"pass the server's base URL: -H {root} (2) --max-tokens" in line
    assert "cannot reach" not in proc.stderr  # refused before the preflight
