"""``--requests-log``: one JSON line per finished request, streamed to disk.

Memory stays bounded however long the run: nothing per request is kept in
memory; lines go through the file's buffer and are flushed at stop.
The API key never appears: records carry no headers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from llmload.request.record import RequestRecord

__all__ = ["RequestsLog", "worker_path"]


def worker_path(path: str, worker_index: int | None) -> str:
    """Insert ``.w<index>`` before the extension on workers (``req.jsonl`` → ``req.w0.jsonl``)."""
    if worker_index is None:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.w{worker_index}{ext or '.jsonl'}"


class RequestsLog:
    """Appends one JSON object per request to ``path`` (created with its parent directories).

    Fields: ``started_at_unix``, ``endpoint``, ``model``, ``outcome``, ``error`` (category) and
    ``status``, ``ttft_s``, ``ttfc_s``, ``tpot_s``, ``e2e_s`` (seconds, null = unknown),
    ``dispatch_delay_s`` (open loop or trace: sent this long after it was due; null = closed loop),
    ``prompt_tokens``/``completion_tokens`` with ``*_source``, ``finish_reason``, ``connect_s``,
    ``read_lag_max_s`` (the largest read lag; null: no kernel-stamped read) and ``send_lag_s`` (the
    hand-over of the request's first bytes to the kernel; null: not timed, e.g. TLS);
    usage's ``reasoning_tokens`` and ``cached_prompt_tokens`` (null: the
    server did not say), ``streamed_tokens`` (what TPOT is over) and
    ``usage_notes``.
    """

    def __init__(self, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Line-buffered: each request is on disk at once, so a worker that exits abruptly loses nothing.
        self._file: IO[str] | None = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in close()

    def write(self, record: RequestRecord) -> None:
        """Append ``record`` as one line."""
        if self._file is None:
            return
        error = record.error
        line = {
            "started_at_unix": record.started_at_unix,
            "endpoint": record.endpoint,
            "model": record.model,
            "outcome": record.outcome.value,
            "error": error.category if error else None,
            "status": error.status if error else None,
            "ttft_s": record.ttft_s,
            "ttfc_s": record.ttfc_s,
            "tpot_s": record.tpot_s,
            "e2e_s": record.e2e_s if record.ok else None,
            "prompt_tokens": record.prompt_tokens.value,
            "prompt_tokens_source": record.prompt_tokens.source.value,
            "completion_tokens": record.completion_tokens.value,
            "completion_tokens_source": record.completion_tokens.source.value,
            "finish_reason": record.finish_reason,
            "connect_s": record.connect_s,
            "read_lag_max_s": max(record.read_lags_s, default=None),
            "send_lag_s": record.send_lag_s,
            "dispatch_delay_s": record.dispatch_delay_s,
            **_usage_fields(record),
        }
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")

    def close(self) -> None:
        """Flush and close; later writes are dropped. Idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _usage_fields(record: RequestRecord) -> dict[str, object]:
    """Usage details of one request: reasoning and cached prompt tokens, streamed tokens, usage notes."""
    return {
        "reasoning_tokens": record.reasoning_tokens,
        "cached_prompt_tokens": record.cached_prompt_tokens,
        "streamed_tokens": record.streamed_tokens,
        "usage_notes": [note.value for note in record.usage_notes],
    }
