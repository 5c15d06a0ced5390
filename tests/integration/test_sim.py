"""End-to-end tests of ``llmload sim``: a real subprocess on a loopback port, real HTTP.

Only the standard library talks to the simulator (http.client, raw sockets),
every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmload.servermetrics import ServerKind, parse_snapshot

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "llmload-sim"
TIMEOUT_S = 10.0


# ---------------------------------------------------------------- helpers


def start_sim(*args: str, startup_timeout_s: float = 15.0) -> tuple[str, subprocess.Popen[bytes]]:
    """Start ``python -m llmload.sim --port 0 *args``; return its base URL and process.

    The caller must stop the process (``stop_sim``). stderr goes to an
    anonymous temporary file so that a chatty simulator never blocks; it is
    shown if the simulator fails to start.

    Raises:
        RuntimeError: the first stdout line did not announce the port in time.
    """
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- closed below, once the child holds it
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmload.sim", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        cwd=REPO_ROOT,
        env=env,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], startup_timeout_s)
    line = proc.stdout.readline().decode() if ready else ""
    prefix = "llmload sim listening on "
    with stderr:  # the child keeps its own descriptor
        if not line.startswith(prefix):
            proc.kill()
            proc.wait(TIMEOUT_S)
            stderr.seek(0)
            raise RuntimeError(f"sim did not start: first line {line!r}, stderr {stderr.read().decode()!r}")
    return line.removeprefix(prefix).strip(), proc


def stop_sim(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM the simulator and return its exit status (kill after 10 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(TIMEOUT_S)
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


@pytest.fixture
def sim(sim_server: Any) -> Any:
    """Factory fixture: ``sim(*args) -> base_url`` (served in this process); every simulator is stopped at teardown."""
    return sim_server


def _conn(base_url: str) -> http.client.HTTPConnection:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)


def request(base_url: str, method: str, path: str, body: bytes | dict[str, Any] | None = None) -> tuple[int, bytes]:
    """Send one request; return (status, body)."""
    conn = _conn(base_url)
    try:
        raw = json.dumps(body).encode() if isinstance(body, dict) else body
        headers = {"Content-Type": "application/json"} if raw is not None else {}
        conn.request(method, path, body=raw, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post_json(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a JSON body that must succeed; return the decoded reply."""
    status, raw = request(base_url, "POST", path, body)
    assert status == 200, raw
    reply: dict[str, Any] = json.loads(raw)
    return reply


def stream(base_url: str, path: str, body: dict[str, Any]) -> list[tuple[float, str]]:
    """POST a streaming request; return (seconds since send, data) of every SSE event."""
    conn = _conn(base_url)
    try:
        t0 = time.perf_counter()
        conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        events: list[tuple[float, str]] = []
        for _ in range(100_000):
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                events.append((time.perf_counter() - t0, line[6:].rstrip(b"\n").decode()))
        return events
    finally:
        conn.close()


def metrics(base_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Scrape /metrics; return {(sample name, sorted labels): value}."""
    status, raw = request(base_url, "GET", "/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(raw.decode())
        for s in family.samples
    }


def metric_sum(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    """Sum a sample name over all its label sets."""
    return sum(v for (n, _), v in samples.items() if n == name)


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "Hello, world!", **fields}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello world"}], **fields}


# ---------------------------------------------------------------- endpoints


def test_sim_models_lists_served_model_and_context(sim: Any) -> None:
    url = sim("--model", "my-model", "--max-model-len", "2048")
    status, raw = request(url, "GET", "/v1/models")
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in body["data"]] == [("my-model", "model", 2048)]


def test_sim_health_returns_200(sim: Any) -> None:
    assert request(sim(), "GET", "/health") == (200, b"")


def test_sim_completion_non_stream_reports_usage(sim: Any) -> None:
    url = sim()
    reply = post_json(url, "/v1/completions", completion(max_tokens=7, ignore_eos=True))
    choice = reply["choices"][0]
    assert reply["object"] == "text_completion"
    assert choice["finish_reason"] == "length"
    assert len(choice["text"].split()) == 7
    assert choice["text"].startswith(" ")
    # "Hello, world!" -> Hello , world ! = 4 prompt tokens
    assert reply["usage"] == {"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11}


def test_sim_completion_default_max_tokens_is_16(sim: Any) -> None:
    reply = post_json(sim(), "/v1/completions", completion(ignore_eos=True))
    assert reply["usage"]["completion_tokens"] == 16


def test_sim_completion_prompt_of_token_ids_counts_one_per_id(sim: Any) -> None:
    reply = post_json(sim(), "/v1/completions", completion(prompt=[5, 6, 7], max_tokens=1))
    assert reply["usage"]["prompt_tokens"] == 3


def test_sim_chat_non_stream_counts_template_overhead(sim: Any) -> None:
    reply = post_json(sim(), "/v1/chat/completions", chat(max_tokens=3, ignore_eos=True))
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert len(reply["choices"][0]["message"]["content"].split()) == 3
    # 3 per message + "user" (1) + "hello world" (2) + 3 reply primer
    assert reply["usage"] == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def test_sim_chat_stream_include_usage_ends_with_empty_choices_chunk(sim: Any) -> None:
    events = stream(
        sim(), "/v1/chat/completions", chat(max_tokens=5, stream=True, stream_options={"include_usage": True})
    )
    data = [e for _, e in events]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert len(contents) == chunks[-1]["usage"]["completion_tokens"]
    assert all(c.startswith(" ") and len(c.split()) == 1 for c in contents)
    finish = chunks[-2]["choices"][0]
    assert finish["delta"] == {}
    assert finish["finish_reason"] in ("stop", "length")
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 9
    assert chunks[-1]["usage"]["total_tokens"] == 9 + len(contents)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1


def test_sim_completion_stream_without_include_usage_sends_no_usage(sim: Any) -> None:
    events = stream(sim(), "/v1/completions", completion(max_tokens=4, ignore_eos=True, stream=True))
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert events[-1][1] == "[DONE]"
    assert [c["choices"][0]["text"] != "" for c in chunks] == [True] * 4 + [False]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in c for c in chunks)


def test_sim_continuous_usage_stats_are_cumulative(sim: Any) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    events = stream(
        sim(),
        "/v1/completions",
        completion(max_tokens=3, ignore_eos=True, stream=True, stream_options=options),
    )
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3, 3]
    assert [c["choices"] == [] for c in chunks] == [False, False, False, False, True]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_sim_ignore_eos_gives_exactly_max_tokens(sim: Any, path: str) -> None:
    url = sim("--output-len-mean", "2", "--decode-step-ms", "1")
    body = completion if path == "/v1/completions" else chat
    for _ in range(3):
        reply = post_json(url, path, body(max_tokens=40, ignore_eos=True))
        assert (reply["usage"]["completion_tokens"], reply["choices"][0]["finish_reason"]) == (40, "length")
        events = stream(url, path, body(max_tokens=40, ignore_eos=True, stream=True))
        tokens = [e for _, e in events if '"content":" ' in e or '"text":" ' in e]
        assert len(tokens) == 40


def _reply_lengths(url: str, n: int) -> list[tuple[int, str]]:
    replies = [post_json(url, "/v1/completions", completion(max_tokens=100)) for _ in range(n)]
    return [(r["usage"]["completion_tokens"], r["choices"][0]["text"]) for r in replies]


def test_sim_early_eos_lengths_vary_and_reproduce_with_seed(sim: Any) -> None:
    first = _reply_lengths(sim("--seed", "1", "--output-len-mean", "8", "--decode-step-ms", "1"), 12)
    again = _reply_lengths(sim("--seed", "1", "--output-len-mean", "8", "--decode-step-ms", "1"), 12)
    other = _reply_lengths(sim("--seed", "2", "--output-len-mean", "8", "--decode-step-ms", "1"), 12)
    lengths = [n for n, _ in first]
    assert first == again
    assert lengths != [n for n, _ in other]
    assert len(set(lengths)) > 3
    assert all(1 <= n < 100 for n in lengths)
    assert 2 < sum(lengths) / len(lengths) < 20


def test_sim_early_eos_reports_finish_reason_stop(sim: Any) -> None:
    reply = post_json(sim("--output-len-mean", "3"), "/v1/chat/completions", chat(max_tokens=500))
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] < 500


# ---------------------------------------------------------------- metrics


def test_sim_metrics_counters_equal_sum_of_usage(sim: Any) -> None:
    url = sim("--output-len-mean", "6")
    usages: list[tuple[str, dict[str, int]]] = []
    for i in range(4):
        r = post_json(url, "/v1/completions", completion(max_tokens=20 + i))
        usages.append(("/v1/completions", r["usage"]))
        events = stream(
            url,
            "/v1/chat/completions",
            chat(max_tokens=20, stream=True, stream_options={"include_usage": True}),
        )
        usages.append(("/v1/chat/completions", json.loads(events[-2][1])["usage"]))
    samples = metrics(url)
    for endpoint in ("/v1/completions", "/v1/chat/completions"):
        label = (("endpoint", endpoint),)
        mine = [u for e, u in usages if e == endpoint]
        assert samples[("llmload_sim_requests_completed_total", label)] == len(mine)
        assert samples[("llmload_sim_prompt_tokens_total", label)] == sum(u["prompt_tokens"] for u in mine)
        assert samples[("llmload_sim_completion_tokens_total", label)] == sum(u["completion_tokens"] for u in mine)
    assert samples[("llmload_sim_time_to_first_token_seconds_count", (("endpoint", "/v1/chat/completions"),))] == 4
    assert samples[("llmload_sim_time_to_first_token_seconds_count", (("endpoint", "/v1/completions"),))] == 0
    assert samples[("llmload_sim_requests_running", ())] == 0
    assert samples[("llmload_sim_requests_waiting", ())] == 0
    assert metric_sum(samples, "llmload_sim_requests_aborted_total") == 0


def test_sim_publishes_vllm_names_equal_to_ground_truth(sim: Any) -> None:
    url = sim("--output-len-mean", "6", "--model", "m1")
    for i in range(3):
        post_json(url, "/v1/completions", completion(max_tokens=20 + i, model="m1"))
        stream(url, "/v1/chat/completions", chat(max_tokens=20, stream=True, model="m1"))
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = metrics(url)
    label = (("engine", "0"), ("model_name", "m1"))
    truth_prompt = metric_sum(samples, "llmload_sim_prompt_tokens_total")
    truth_completion = metric_sum(samples, "llmload_sim_completion_tokens_total")
    assert samples[("vllm:prompt_tokens_total", label)] == truth_prompt > 0
    assert samples[("vllm:generation_tokens_total", label)] == truth_completion > 0
    assert metric_sum(samples, "vllm:request_success_total") == 6
    assert samples[("vllm:time_to_first_token_seconds_count", label)] == 3  # streams only
    assert samples[("vllm:e2e_request_latency_seconds_count", label)] == 6
    assert samples[("vllm:num_preemptions_total", label)] == 0
    snap = parse_snapshot(text, model="m1")
    assert snap.kind is ServerKind.SIM
    assert snap.values["prompt_tokens"] == truth_prompt
    assert snap.values["generation_tokens"] == truth_completion
    assert snap.values["kv_cache_usage"] == 0
    assert snap.histograms["ttft_s"].count == 3


def test_sim_queueing_delays_ttft_beyond_max_num_seqs(sim: Any) -> None:
    url = sim("--max-num-seqs", "2", "--decode-step-ms", "10", "--decode-ms-per-seq", "0")
    ttfts: list[float] = []
    lock = threading.Lock()

    def one() -> None:
        events = stream(url, "/v1/completions", completion(max_tokens=30, ignore_eos=True, stream=True))
        with lock:
            ttfts.append(events[0][0])

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.12)
    mid = metrics(url)
    for t in threads:
        t.join(TIMEOUT_S)
    assert (mid[("llmload_sim_requests_running", ())], mid[("llmload_sim_requests_waiting", ())]) == (2, 2)
    fast, slow = sorted(ttfts)[:2], sorted(ttfts)[2:]
    # the first two hold both slots for 30 steps of 10 ms; the others wait for them
    assert max(fast) < 0.15
    assert min(slow) > 0.25
    ttft_sum = metrics(url)[("llmload_sim_time_to_first_token_seconds_sum", (("endpoint", "/v1/completions"),))]
    assert ttft_sum > 0.5


# ---------------------------------------------------------------- errors


def test_sim_unknown_model_returns_404_with_openai_error(sim: Any) -> None:
    status, raw = request(sim("--model", "m"), "POST", "/v1/completions", {"model": "x", "prompt": "hi"})
    assert status == 404
    assert json.loads(raw) == {
        "error": {
            "message": "model 'x' is not served; available: m",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        }
    }


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/v1/completions", b"{not json", "not valid JSON"),
        ("/v1/completions", b"[1, 2]", "must be a JSON object"),
        ("/v1/completions", b'{"prompt": "hi"}', "'model' is required"),
        ("/v1/completions", b'{"model": "llmload-sim"}', "'prompt' is required"),
        ("/v1/chat/completions", b'{"model": "llmload-sim", "prompt": "hi"}', "'messages' is required"),
        ("/v1/completions", b'{"model": "llmload-sim", "prompt": "hi", "max_tokens": 0}', "'max_tokens'"),
        (
            "/v1/completions",
            b'{"model": "llmload-sim", "prompt": "hi", "max_tokens": 5000}',
            "context length",
        ),
        ("/v1/completions", b'{"model": "llmload-sim", "prompt": "hi", "stream": "yes"}', "'stream'"),
    ],
)
def test_sim_bad_request_returns_400_with_openai_error(sim: Any, path: str, body: bytes, fragment: str) -> None:
    url = sim()
    status, raw = request(url, "POST", path, body)
    assert status == 400
    error = json.loads(raw)["error"]
    assert (error["type"], error["code"]) == ("BadRequestError", 400)
    assert fragment in error["message"]
    rejected = metrics(url)[("llmload_sim_requests_rejected_total", (("code", "400"), ("endpoint", path)))]
    assert rejected == 1


def test_sim_unknown_path_and_wrong_method_are_rejected(sim: Any) -> None:
    url = sim()
    status, raw = request(url, "GET", "/v1/nope")
    assert (status, json.loads(raw)["error"]["code"]) == (404, 404)
    status, raw = request(url, "GET", "/v1/completions")
    assert (status, json.loads(raw)["error"]["code"]) == (405, 405)


def test_sim_bad_option_exits_2_with_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "llmload.sim", "--max-num-seqs", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 2
    assert b"--max-num-seqs must be a positive integer, got 0" in proc.stderr


# ---------------------------------------------------------------- connections and lifecycle


def _raw_stream_request(base_url: str, body: dict[str, Any]) -> socket.socket:
    sock = _connect(base_url)
    _send_completion(sock, body)
    return sock


def _connect(base_url: str) -> socket.socket:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=TIMEOUT_S)


def _send_completion(sock: socket.socket, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw)
    )


def test_sim_client_disconnect_frees_batch_slot(sim: Any) -> None:
    url = sim("--max-num-seqs", "1", "--decode-step-ms", "10")
    sock = _raw_stream_request(url, completion(max_tokens=3000, ignore_eos=True, stream=True))
    received = b""
    while b'"text":" ' not in received:
        received += sock.recv(65536)
    sock.close()
    t0 = time.perf_counter()
    reply = post_json(url, "/v1/completions", completion(max_tokens=3, ignore_eos=True))
    # had the slot stayed taken, this would wait ~30 s behind the 3000-token stream
    assert time.perf_counter() - t0 < 2.0
    assert reply["usage"]["completion_tokens"] == 3
    samples = metrics(url)
    assert samples[("llmload_sim_requests_aborted_total", (("endpoint", "/v1/completions"),))] == 1
    assert samples[("llmload_sim_requests_completed_total", (("endpoint", "/v1/completions"),))] == 1
    assert samples[("llmload_sim_completion_tokens_total", (("endpoint", "/v1/completions"),))] == 3
    assert samples[("llmload_sim_requests_running", ())] == 0


def test_sim_sigterm_stops_cleanly_with_open_streams() -> None:
    url, proc = start_sim()
    try:
        sock = _raw_stream_request(url, completion(max_tokens=1000, ignore_eos=True, stream=True))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
    finally:
        status = stop_sim(proc)
    assert status == 0
    sock.close()


def test_sim_serves_1024_concurrent_streams(sim: Any) -> None:
    # Each stream lasts 20 steps of 100 ms, far longer than the requests take to reach the
    # simulator: connecting 1024 sockets one by one can take longer than a stream on a busy
    # machine (with 25 ms steps the first streams had ended before the last was sent), so all
    # connect first and the requests then go out in one quick loop.
    n_streams, n_tokens = 1024, 20
    url = sim("--max-num-seqs", "1024", "--decode-step-ms", "100", "--decode-ms-per-seq", "0")
    body = completion(max_tokens=n_tokens, ignore_eos=True, stream=True)
    socks = {s.fileno(): s for s in (_connect(url) for _ in range(n_streams))}
    for s in socks.values():
        _send_completion(s, body)
    poller = select.epoll()
    for fd, s in socks.items():
        s.setblocking(False)
        poller.register(fd, select.EPOLLIN)
    buffers = dict.fromkeys(socks, b"")
    first_token_s: dict[int, float] = {}
    end_s: dict[int, float] = {}
    deadline = time.perf_counter() + 20.0
    while len(end_s) < n_streams and time.perf_counter() < deadline:
        for fd, _ in poller.poll(0.5):
            data = socks[fd].recv(65536)
            now = time.perf_counter()
            buffers[fd] += data
            if fd not in first_token_s and b'"text":" ' in buffers[fd]:
                first_token_s[fd] = now
            if not data or buffers[fd].endswith(b"0\r\n\r\n"):
                poller.unregister(fd)
                end_s[fd] = now
    poller.close()
    for s in socks.values():
        s.close()
    assert len(end_s) == n_streams
    # every stream had started before any ended: all 1024 were served at once
    assert max(first_token_s.values()) < min(end_s.values())
    assert [b.count(b'"text":" ') for b in buffers.values()] == [n_tokens] * n_streams
    assert all(b.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") for b in buffers.values())
    assert metrics(url)[("llmload_sim_requests_completed_total", (("endpoint", "/v1/completions"),))] == n_streams


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        (["--port", "{busy}"], "pick another --port, or --port 0 for any free port"),
        (["--host", "nosuchhost.invalid", "--port", "0"], "--host must be an address of this machine"),
    ],
    ids=["port-in-use", "host-not-here"],
)
def test_sim_that_cannot_listen_names_the_option_to_change_and_exits_2(capsys, args, fix) -> None:
    # found by a new-user run: exit 1, and "pick another --port" for a --host that is not this machine's
    from llmload.sim.server import run

    with socket.create_server(("127.0.0.1", 0)) as busy:
        argv = [a.format(busy=busy.getsockname()[1]) for a in args]
        status = run(argv)
    err = capsys.readouterr().err
    assert status == 2
    assert "llmload sim: cannot listen on " in err
    assert fix in err
