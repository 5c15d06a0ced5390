"""Tokenizer rules that need a fresh process (BC-15/17): what it reads from its environment at import.

huggingface_hub reads ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and ``HF_HOME`` once, at import: a test that
allows hub access by the environment and checks that no request is sent needs a process started with
that environment. The other workload runs (datasets, multi-turn, warm-up, goodput, synthetic lengths)
run in process: ``tests/edge/test_workloads.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from llmload.request.client import StreamingClient
from llmload.request.payloads import build_chat_request
from llmload.request.record import TokenSource
from llmload.request.tokens import HFTokenCounter
from llmload.testing import CF, C, U, sse
from tests.integration.procs import run_locust
from tests.integration.test_sim import REPO_ROOT, metrics, start_sim, stop_sim
from tests.unit.test_client import FakeResponse, FakeTransport

pytestmark = [pytest.mark.integration]

TIMEOUT_S = 90
CHAT_FILE = "locustfiles/chat.py"


def _locust(locustfile: str, host: str, *args: str, env: dict[str, str] | None = None):
    return run_locust(
        ["-f", locustfile, "--headless", "--only-summary", "-H", host, "-t", "60s", "--prometheus-port", "0", *args],
        timeout_s=TIMEOUT_S,
        env=env,
    )


# A tokenizer name that is not local stops before load, without a hub request.
def test_bc17_tokenizer_name_not_local_stops_before_load_without_hub_request(tmp_path):
    url, sim = start_sim("--model", "my-model")
    hub = socket.socket()
    try:
        hub.bind(("127.0.0.1", 0))
        hub.listen(8)
        hub.setblocking(False)
        env = {
            "HF_HUB_OFFLINE": "0",  # even with hub access allowed by the environment: no request
            "TRANSFORMERS_OFFLINE": "0",
            "HF_ENDPOINT": f"http://127.0.0.1:{hub.getsockname()[1]}",
            "HF_HOME": str(tmp_path / "hf"),
        }
        proc = _locust(CHAT_FILE, url, "-u", "1", "--num-requests", "2", "--model", "my-model",
                       "--tokenizer", "my-model", env=env)  # fmt: skip
        with pytest.raises(BlockingIOError):
            hub.accept()  # nobody connected to the "hub"
        served = metrics(url)
    finally:
        hub.close()
        stop_sim(sim)
    assert proc.returncode == 2
    assert (
        'cannot load tokenizer "my-model": not a local path and hub access is disabled; '
        "add --allow-download to fetch it from the Hugging Face hub, "
        "pass --tokenizer PATH or rely on server-reported usage"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr
    completed = sum(v for (name, _), v in served.items() if name == "llmload_sim_requests_completed_total")
    assert completed == 0


# Case BC-15: usage present → server count used, tokenizer count kept as a diagnostic
def test_bc15_server_usage_wins_tokenizer_count_is_a_diagnostic(tiny_bos_tokenizer):
    body = sse(C({"content": "Hel"}), C({"content": "lo"}), C({"content": " world"}), CF("stop"), U(4, 3), "[DONE]")
    request = build_chat_request(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    counter = HFTokenCounter(tiny_bos_tokenizer)
    client = StreamingClient(
        FakeTransport(FakeResponse([body], 200, "text/event-stream")), token_counter=counter, compare_tokens=True
    )
    record = client.run(request)
    assert record.completion_tokens.value == 3
    assert record.completion_tokens.source is TokenSource.SERVER
    assert record.client_completion_tokens == 2  # "Hello world" once, no BOS
    plain = StreamingClient(FakeTransport(FakeResponse([body], 200, "text/event-stream")), token_counter=counter)
    assert plain.run(request).client_completion_tokens is None


def test_tokenizer_hub_id_in_local_cache_loads_without_any_hub_request(tmp_path, tiny_tokenizer):
    snapshot = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    tiny_tokenizer.save(str(snapshot / "tokenizer.json"))
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    (tmp_path / "hf" / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hf" / "hub" / "models--org--tiny" / "refs" / "main").write_text("abc123")
    hub = socket.socket()
    try:
        hub.bind(("127.0.0.1", 0))
        hub.listen(8)
        hub.setblocking(False)
        code = (
            "from llmload.request.tokens import load_tokenizer\n"
            "print(load_tokenizer('org/tiny').count('Hello world'))\n"
            "try:\n    load_tokenizer('org/absent')\nexcept Exception as exc:\n    print(exc)\n"
        )
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0",
            "HF_ENDPOINT": f"http://127.0.0.1:{hub.getsockname()[1]}",
            "HF_HOME": str(tmp_path / "hf"),
            "PYTHONPATH": str(REPO_ROOT),
        }
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=60, check=False)  # fmt: skip
        with pytest.raises(BlockingIOError):
            hub.accept()
    finally:
        hub.close()
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "2"
    assert lines[1].startswith('cannot load tokenizer "org/absent": not a local path and hub access is disabled')
