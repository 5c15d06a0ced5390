"""`locust --html-report` against `llmload sim` writes the report; `llmload report` rebuilds the same page."""

from __future__ import annotations

import json
import subprocess
import sys

import markupsafe
import pytest

from llmload.exporters.html import render_report
from tests.integration.procs import run_locust
from tests.integration.test_sim import start_sim, stop_sim
from tests.unit.test_html_report import CHROMIUM, _Page, dump_dom

pytestmark = pytest.mark.integration


def test_locust_run_with_html_report_writes_the_report_of_its_results(tmp_path):
    base_url, sim = start_sim()
    try:
        results_path, report_path = tmp_path / "results.json", tmp_path / "out" / "report.html"
        out = run_locust(
            [
                *("-f", "locustfiles/chat.py", "--headless", "-H", base_url, "-u", "2", "-r", "2"),
                *("--num-requests", "8", "--max-tokens", "8", "--results-json", str(results_path)),
                *("--html-report", str(report_path)),
            ],
            timeout_s=90,
        )
    finally:
        stop_sim(sim)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(results_path.read_text())
    page = report_path.read_text(encoding="utf-8")
    assert page == render_report([results])  # the report reads the results document only
    assert str(markupsafe.escape(results["verdict"])) in page
    assert 'data-path="requests.succeeded"' in page
    assert results["requests"]["succeeded"] == 8
    # the sim publishes vLLM metrics: the report charts the server beside the client
    assert 'id="ts-server-tokens"' in page
    assert 'id="ts-server-requests"' in page
    data = json.loads(_Page(page).scripts[0])
    server_gen = [row["server_generation_tokens"] for row in data["runs"][0]["timeseries"]]
    assert sum(g or 0 for g in server_gen) == results["server"]["generation_tokens"] == results["tokens"]["completion"]
    rebuilt = tmp_path / "rebuilt.html"
    cli = subprocess.run(
        [sys.executable, "-m", "llmload", "report", str(results_path), "-o", str(rebuilt)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert rebuilt.read_text(encoding="utf-8") == page
    if CHROMIUM:
        body = next(attrs for tag, attrs in _Page(dump_dom(report_path)).tags if tag == "body")
        assert body.get("data-chart-errors") == ""
        assert int(body.get("data-charts-rendered") or 0) >= 4
