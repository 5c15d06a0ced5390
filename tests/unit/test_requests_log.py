"""--requests-log: one JSON line per request, per worker file."""

import json

from llmload.exporters.requests_log import RequestsLog, worker_path
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource


def test_requests_log_worker_path_inserts_the_index():
    assert worker_path("out/req.jsonl", None) == "out/req.jsonl"
    assert worker_path("out/req.jsonl", 3) == "out/req.w3.jsonl"
    assert worker_path("out/req", 0) == "out/req.w0.jsonl"


def test_requests_log_writes_one_line_per_record(tmp_path):
    path = tmp_path / "sub" / "req.jsonl"
    log = RequestsLog(str(path))
    ok = RequestRecord(endpoint="chat", model="m", started_at_unix=1.5, token_times_s=[0.1, 0.3], end_s=0.4)
    ok.completion_tokens = TokenCount(3, TokenSource.SERVER)
    ok.read_lags_s = [0.0, 0.0004]
    ok.send_lag_s = 0.00002
    bad = RequestRecord(endpoint="chat", model="m", started_at_unix=2.0, outcome=Outcome.HTTP_ERROR, end_s=0.2)
    bad.error = ErrorInfo("HTTP 500 InternalServerError", "boom", 500)
    log.write(ok)
    log.write(bad)
    log.close()
    log.write(ok)  # after close: dropped, no error
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0]["ttft_s"] == 0.1
    assert lines[0]["e2e_s"] == 0.4
    assert lines[0]["completion_tokens"] == 3
    assert lines[0]["completion_tokens_source"] == "server"
    assert (lines[0]["read_lag_max_s"], lines[0]["send_lag_s"]) == (0.0004, 0.00002)
    assert (lines[1]["read_lag_max_s"], lines[1]["send_lag_s"]) == (None, None)
    assert lines[1]["outcome"] == "http_error"
    assert lines[1]["error"] == "HTTP 500 InternalServerError"
    assert lines[1]["e2e_s"] is None
