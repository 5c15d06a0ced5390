"""Checks and scripted-server routes shared by the process tests (tests/integration) and the in-process
edge tests (tests/edge). Imports no Locust, so either tier may use it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from llmload.testing import ReceivedRequest, Reply, json_reply

__all__ = ["MODELS", "check_against_sim", "models_route"]

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})


def models_route(post_reply: Reply) -> Callable[[ReceivedRequest], Reply]:
    """A scripted server's route: ``GET /v1/models`` lists model ``m``; every other request gets ``post_reply``."""

    def reply(request: ReceivedRequest) -> Reply:
        if request.method == "GET" and request.path == "/v1/models":
            return json_reply(200, MODELS)
        return post_reply

    return reply


def check_against_sim(section: dict[str, Any], truth: dict[str, float], endpoint: str) -> None:
    """One endpoint's figures against the simulator's: every success counted once, plus the probe."""
    done = section["requests"]["succeeded"]
    assert section["requests"]["failed"] == 0
    assert truth["requests_completed"] == done + 1  # the preflight probe
    assert truth["requests_aborted"] == 0
    assert section["tokens"]["prompt_source"] == "server"
    assert section["tokens"]["prompt"] * (done + 1) == truth["prompt_tokens"] * done  # a fixed prompt
    if endpoint == "embeddings":
        assert section["tokens"]["completion"] is None  # nothing generated: not applicable, never 0
        assert section["throughput"]["output_tokens_per_s"] is None
        assert truth["completion_tokens"] == 0
        assert section["latency"]["ttft_s"]["count"] == 0
        assert section["throughput"]["inputs_per_s"] > 0
    else:
        assert section["tokens"]["completion_source"] == "server"
        assert 1 <= truth["completion_tokens"] - section["tokens"]["completion"] <= 2  # the probe's tokens
        assert section["latency"]["ttft_s"]["count"] == done
        assert section["latency"]["ttft_s"]["p50"] > 0.005  # at least one decode step (5 ms)
    assert section["latency"]["e2e_s"]["count"] == done
