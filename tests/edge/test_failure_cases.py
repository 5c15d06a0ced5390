"""Failure cases over whole runs, in this process: every user a stream (BC-24), requests in flight at the stop
(BC-27), no credential in any output (NC-08).

The simulator is served here (``tests/simserver.serve``) and the locust command line runs here
(``tests/edge/cluster.run_locustfile_here``); the other failure cases are in
``tests/integration/test_failure_cases.py``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import urllib.request
import uuid
from pathlib import Path

import gevent
import pytest

from llmload.testing import CF, ROLE, C, ReceivedRequest, Reply, ScriptedServer, U, W, json_reply, sse
from tests.checks import MODELS, models_route
from tests.edge.cluster import run_locustfile_here as run_locust
from tests.integration.procs import free_port
from tests.integration.test_sim import metrics
from tests.simserver import serve


# Case BC-27 C: the run stops while 50 streams are mid-generation -> cancelled_at_stop = 50.
def test_bc27_requests_in_flight_at_stop_are_cancelled_not_failed(tmp_path):
    out = tmp_path / "r.json"
    with serve("--decode-step-ms", "10", "--prefill-base-ms", "0") as sim:
        url = sim.url
        proc = run_locust(
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary", "-H", url, "-u", "50", "-r", "50",
                "-t", "3s", "--ignore-eos", "--max-tokens", "2000", "--skip-preflight", "--results-json", str(out),
            ]
        )  # fmt: skip
    results = json.loads(out.read_text())
    assert results["requests"]["cancelled"] == 50
    assert results["requests"]["failed"] == 0
    assert results["requests"]["succeeded"] == 0
    assert results["latency"]["e2e_s"]["count"] == 0
    assert proc.returncode == 1  # nothing finished: not a passing benchmark
    assert "Cancelled at stop (not counted):" in proc.stdout


# Case BC-24: 256 users give 256 concurrent streams at the server (no client-side pool cap).
# One request per user (--num-requests 256), each a stream of 800 tokens of 10 ms steps or more: every user that
# has sent is still streaming when the last one sends, however long the ramp takes on a busy machine,
# and the run ends when the streams do. With `-t 8s` and 400-token streams, the run's time ran out
# while the ramp was still under way (217 of 256 seen beside 9 CPU hogs, 2026-12-04; 167 beside a
# second test suite).
def test_bc24_server_sees_every_user_as_a_concurrent_stream(tmp_path):
    seen = [0.0]
    sim_args = ("--decode-step-ms", "10", "--decode-ms-per-seq", "0", "--prefill-base-ms", "0", "--max-num-seqs", "512")
    with serve(*sim_args) as sim:
        url = sim.url
        run = gevent.spawn(
            run_locust,
            [
                "-f", "locustfiles/chat.py", "--headless", "--only-summary",
                "-H", url, "-u", "256", "-r", "256", "--num-requests", "256", "-t", "60s", "--ignore-eos",
                "--max-tokens", "800", "--skip-preflight",
            ],
            timeout_s=120,  # ~9 s on a quiet machine; 43-55 s beside 9 CPU hogs
        )  # fmt: skip
        try:
            for _ in range(100):
                if run.ready() or max(seen) >= 256:
                    break
                samples = metrics(url)
                seen.append(samples.get(("llmload_sim_requests_running", ()), 0.0))
                gevent.sleep(0.1)
        finally:
            run.get(timeout=130)
    print("streams seen at the server:", [int(x) for x in seen])
    assert max(seen) == 256


# ── Security: no credential in any output ────────────────
def _run_collecting_every_output(
    tmp_path: Path, host: str, env: dict[str, str], extra: tuple[str, ...] = ()
) -> tuple[int, list[str]]:
    """One 2-worker run with every output on; returns the exit status and the text of every output.

    Outputs: stdout and stderr (DEBUG logs), the results file, the requests
    logs, Locust's HTML report and CSV files, and every Prometheus scrape
    taken while the run was up (the last one after the final totals).
    """
    out, log, html = tmp_path / "r.json", tmp_path / "req.jsonl", tmp_path / "report.html"
    port = free_port()
    args = [
        "-f", "locustfiles/chat.py", "--headless", "-H", host, "--processes", "2",
        "-u", "4", "-r", "4", "--num-requests", "12", "-t", "60s", "--results-json", str(out),
        "--requests-log", str(log), "--loglevel", "DEBUG", "--html", str(html), "--csv", str(tmp_path / "csv"),
        "--prometheus-port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-grace", "10", *extra,
    ]  # fmt: skip
    run = gevent.spawn(run_locust, args, env=env)
    scrapes: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not run.ready() and time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer,
            ):
                scrapes.append(answer.read().decode())
            time.sleep(0.2)
        proc = run.get(timeout=60)
    finally:
        run.kill()
    stdout, stderr = proc.stdout, proc.stderr
    assert scrapes, "the exporter was never scraped"
    assert "llmload_run_info{" in scrapes[-1]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {out, html} <= set(files)
    assert len([p for p in files if p.name.startswith("req")]) == 2  # one requests log per worker
    assert len([p for p in files if p.suffix == ".csv"]) >= 3
    return proc.returncode, [stdout, stderr, *scrapes, *(p.read_text() for p in files)]


def _served(srv: ScriptedServer) -> set[str | None]:
    return {r.headers.get("authorization") for r in srv.requests if r.method == "POST"}


def test_api_key_is_sent_to_the_target_and_never_printed_or_written(tmp_path):
    key = "sk-llmload-test-" + uuid.uuid4().hex
    reply = Reply(writes=[W(5, sse(ROLE, C({"content": "hi"}), CF("stop"), U(3, 1), "[DONE]"))])
    with ScriptedServer(models_route(reply)) as srv:
        code, outputs = _run_collecting_every_output(tmp_path, srv.base_url, {"OPENAI_API_KEY": key})
        auth = _served(srv)
    assert code == 0, outputs[1][-2000:]
    assert auth == {f"Bearer {key}"}
    for text in outputs:
        assert key not in text
        assert key[-12:] not in text


@pytest.mark.parametrize(
    ("form", "sent_as"),
    [
        ("api-key-header", "api-key"),
        ("header", "x-api-key"),
        ("header", "authorization"),
        ("header", "cookie"),
        ("env", "x-gateway-token"),
    ],
)
def test_nc08_api_key_in_any_header_form_is_sent_and_never_printed_or_written(tmp_path, form, sent_as):
    key = "sk-llmload-test-" + uuid.uuid4().hex
    value = {"authorization": f"Bearer {key}", "cookie": f"session={key}"}.get(sent_as, key)
    env, extra = {"OPENAI_API_KEY": ""}, ("--header", "x-trace: visible")
    if form == "api-key-header":
        env["OPENAI_API_KEY"] = key
        extra += ("--api-key-header", sent_as)
    elif form == "header":
        extra += ("--header", f"{sent_as}: {value}")
    else:  # several headers, one per line; a --header on the command line would replace them all
        env["LOCUST_HEADER"] = f"{sent_as}: {value}\nx-trace: visible"
        extra = ()
    reply = Reply(writes=[W(5, sse(ROLE, C({"content": "hi"}), CF("stop"), U(3, 1), "[DONE]"))])
    with ScriptedServer(models_route(reply)) as srv:
        code, outputs = _run_collecting_every_output(tmp_path, srv.base_url, env, extra)
        sent = {r.headers.get(sent_as) for r in srv.requests if r.method == "POST"}
    assert code == 0, outputs[1][-2000:]
    assert sent == {value}
    results = json.loads((tmp_path / "r.json").read_text())
    assert f"{sent_as}: ***" in results["run"]["options"]["request"]["headers"] or form == "api-key-header"
    assert "x-trace: visible" in results["run"]["options"]["request"]["headers"]
    for text in outputs:
        assert key not in text
        assert key[-12:] not in text


def test_nc08_api_key_in_the_query_string_is_sent_and_shown_only_as_stars_by_llmload(tmp_path):
    key = "qk-" + uuid.uuid4().hex
    reply = Reply(writes=[W(5, sse(ROLE, C({"content": "hi"}), CF("stop"), U(3, 1), "[DONE]"))])

    def route(request: ReceivedRequest) -> Reply:
        if request.method == "GET" and request.path.partition("?")[0] == "/v1/models":
            return json_reply(200, MODELS)
        return reply

    with ScriptedServer(route) as srv:
        host = f"{srv.base_url}?api-version=2024-06-01&key={key}"
        code, outputs = _run_collecting_every_output(tmp_path, host, {"OPENAI_API_KEY": ""})
        queries = {r.path.partition("?")[2] for r in srv.requests if r.method == "POST"}
    assert code == 0, outputs[1][-2000:]
    assert queries == {f"api-version=2024-06-01&key={key}"}  # sent as given on every request
    stderr = outputs[1]
    assert "-H carries key in its query string" in stderr  # the warning names the parameter, not its value
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["run"]["host"].endswith("?api-version=2024-06-01&key=***")
    # Locust's own HTML report shows -H as given (the warning says so); every other output hides the key.
    html = (tmp_path / "report.html").read_text()
    for text in outputs:
        if text != html:
            assert key not in text


def test_p2_password_in_the_host_url_is_sent_as_basic_auth_and_never_printed_or_written(tmp_path):
    user, password = "u-" + uuid.uuid4().hex[:8], "pw-" + uuid.uuid4().hex
    reply = Reply(writes=[W(5, sse(ROLE, C({"content": "hi"}), CF("stop"), U(3, 1), "[DONE]"))])
    with ScriptedServer(models_route(reply)) as srv:
        host = srv.base_url.replace("http://", f"http://{user}:{password}@")
        code, outputs = _run_collecting_every_output(tmp_path, host, {"OPENAI_API_KEY": ""})
        auth = _served(srv)
        public = srv.base_url
    assert code == 0, outputs[1][-2000:]
    assert auth == {"Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["run"]["host"] == public
    for text in outputs:
        assert password not in text
        assert f"{user}:" not in text
        assert base64.b64encode(f"{user}:{password}".encode()).decode() not in text
