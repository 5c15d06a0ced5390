"""A plain Locust locustfile for streamed /v1/completions: the baseline `bench/run_bench.py` sets beside llmload.

Written as a Locust user would write it, without llmload: a ``FastHttpUser``
posts with ``stream=True``, reads the body line by line, ``json.loads`` every
SSE ``data:`` event and takes TTFT = first event carrying text − the moment
just before the request call (``time.perf_counter``, seconds).

Lines come from ``response.stream.readline(b"\\n")``, which returns each line
as soon as it has arrived. Iterating ``response.stream`` (geventhttpclient 2.6)
hands out 4 KiB blocks and ``response.iter_content()`` (and so
``client.iter_lines``) 1 KiB blocks, each waiting until the block is full,
which delays the first token by several inter-token intervals.

Settings (environment): PLAIN_NUM_REQUESTS (requests over all processes, split
evenly between ``--processes`` workers, each worker needs ≥ 1 user; default
100), PLAIN_MAX_TOKENS (128), PLAIN_MODEL ("llmload-sim"), PLAIN_PROMPT (or PLAIN_PROMPT_FILE: a file
that holds it),
PLAIN_OUT (results JSON, default plain_results.json). After the last request
the run quits and writes {"ttft_s": [...], "chunks": N, "requests": N,
"failures": N, "first_send_unix": s, "last_end_unix": s}; chunks are the
events that carried text.
"""

from __future__ import annotations

from locust import FastHttpUser, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

import json
import math
import os
import time
from typing import Any

import gevent

NUM_REQUESTS = int(os.environ.get("PLAIN_NUM_REQUESTS", "100"))
MAX_TOKENS = int(os.environ.get("PLAIN_MAX_TOKENS", "128"))
OUT = os.environ.get("PLAIN_OUT", "plain_results.json")
BODY = {
    "model": os.environ.get("PLAIN_MODEL", "llmload-sim"),
    "prompt": (
        open(os.environ["PLAIN_PROMPT_FILE"]).read()  # noqa: SIM115 - read once at import
        if os.environ.get("PLAIN_PROMPT_FILE")
        else os.environ.get("PLAIN_PROMPT", "Write a short story about a lighthouse keeper.")
    ),
    "max_tokens": MAX_TOKENS,
    "ignore_eos": True,
    "stream": True,
    "stream_options": {"include_usage": True},
}

results: dict[str, Any] = {
    "ttft_s": [],
    "chunks": 0,
    "requests": 0,
    "failures": 0,
    "first_send_unix": None,
    "last_end_unix": None,
}
claimed = 0
quota = NUM_REQUESTS
workers_done = 0


class CompletionUser(FastHttpUser):
    """Sends streamed completions back to back until this process's share of PLAIN_NUM_REQUESTS is sent."""

    wait_time = constant(0)

    @task
    def complete(self) -> None:
        """One streamed request: TTFT (s) of the first text event, text events counted as chunks."""
        global claimed  # noqa: PLW0603
        if claimed >= quota:
            raise StopUser
        claimed += 1
        sent_unix = time.time()
        start = time.perf_counter()
        ttft: float | None = None
        chunks = 0
        try:
            response = self.client.post("/v1/completions", json=BODY, stream=True)
            while line := response.stream.readline(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                event = json.loads(data)
                choices = event.get("choices")
                if choices and choices[0].get("text"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - start
        except Exception:
            results["failures"] += 1
        if ttft is not None:
            results["ttft_s"].append(ttft)
        results["chunks"] += chunks
        results["requests"] += 1
        if results["first_send_unix"] is None:
            results["first_send_unix"] = sent_unix
        results["last_end_unix"] = time.time()
        if results["requests"] >= quota:
            _finished(self.environment)


def _finished(environment: Environment) -> None:
    """This process has sent its share: a worker reports to the master, a standalone run quits."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.send_message("plain_done", results)
    elif runner is not None:
        gevent.spawn(runner.quit)


def _merge(part: dict[str, Any]) -> None:
    """Add one worker's results to this (the master's) results."""
    results["ttft_s"].extend(part["ttft_s"])
    for key in ("chunks", "requests", "failures"):
        results[key] += part[key]
    for key, pick in (("first_send_unix", min), ("last_end_unix", max)):
        values = [v for v in (results[key], part[key]) if v is not None]
        results[key] = pick(values) if values else None


@events.init.add_listener
def _on_init(environment: Environment, **_kwargs: Any) -> None:
    global quota  # noqa: PLW0603
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        processes = getattr(environment.parsed_options, "processes", None) or 1
        quota = math.ceil(NUM_REQUESTS / processes)
    if isinstance(runner, MasterRunner):

        def on_worker_done(msg: Any, **_kw: Any) -> None:
            global workers_done  # noqa: PLW0603
            _merge(msg.data)
            workers_done += 1
            if workers_done >= runner.worker_count:
                gevent.spawn(runner.quit)

        runner.register_message("plain_done", on_worker_done)


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_kwargs: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        with open(OUT, "w") as out:
            json.dump(results, out)
