"""The LLM tab's chart data and the form's labels (issue 10, items 3 and B6): no server, no browser."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmload.aggregate.series import IntervalSeries
from llmload.exporters.timeline import Timeline
from llmload.exporters.web_charts import (
    CHART_COLUMNS,
    FAILURE_COLUMNS,
    RowCache,
    form_fields,
    script_tags,
    series_payload,
)
from llmload.request.record import ErrorInfo, Outcome, RequestRecord, TokenCount, TokenSource
from llmload.servermetrics import SERVER_COLUMNS
from llmload.settings.options import OPTIONS, OptionSpec


def _ok(e2e_s: float, completion: int) -> RequestRecord:
    return RequestRecord(
        endpoint="chat", model="m", started_at_unix=1_700_000_000.0,
        token_times_s=[0.05, 0.05 + e2e_s / 2], first_content_s=0.05, end_s=e2e_s,
        prompt_tokens=TokenCount(10, TokenSource.SERVER), completion_tokens=TokenCount(completion, TokenSource.SERVER),
    )  # fmt: skip


def _timeout() -> RequestRecord:
    return RequestRecord(
        endpoint="chat", model="m", started_at_unix=1_700_000_000.0, outcome=Outcome.TIMEOUT,
        error=ErrorInfo("timeout", "read timed out", None), end_s=1.0,
    )  # fmt: skip


def _run(written: int, *, interval_s: float = 1.0) -> tuple[Timeline, IntervalSeries]:
    """A run with one request per interval in intervals 0..written (the last one still in progress)."""
    timeline, series = Timeline(interval_s), IntervalSeries.empty()
    for index in range(written + 1):
        series.add(index, _ok(0.1 * (index + 1), 10 * (index + 1)))
        timeline.sample(index * interval_s + 0.5, {"in_flight_requests": index, "users": 4, "workers": 0})
    series.add(1, _timeout())
    rows = timeline.due_rows(series, written * interval_s)  # intervals 0..written-1 complete
    assert len(rows) == 2 * written
    return timeline, series


def _payload(timeline: Timeline, series: IntervalSeries, **kw: Any) -> dict[str, Any]:
    state = kw.pop("state", "running")
    return series_payload("run-1", state, timeline=timeline, series=series, results=kw.pop("results", None), **kw)


def test_series_payload_before_any_run_is_empty() -> None:
    payload = series_payload("", "ready", timeline=None, series=IntervalSeries.empty(), results=None)
    assert payload == {
        "run_id": "", "state": "ready", "interval_s": None, "ended": False, "in_progress_included": False, "rows": [],
        "warnings": [], "started_at_unix": None, "thresholds": [],
    }  # fmt: skip


def test_series_payload_gives_complete_intervals_only_as_total_rows_with_increasing_t() -> None:
    payload = _payload(*_run(3))
    rows = payload["rows"]
    assert [row["t"] for row in rows] == [0.0, 1.0, 2.0]  # interval 3 is in progress: left out
    assert payload["in_progress_included"] is False
    assert payload["ended"] is False
    assert all(list(row) == [*CHART_COLUMNS, "partial", "rate_left_out"] for row in rows)
    assert not any(row["partial"] or row["rate_left_out"] for row in rows)  # complete intervals only
    assert [row["output_tokens_per_s"] for row in rows] == [10.0, 20.0, 30.0]
    assert [row["in_flight_requests"] for row in rows] == [0, 1, 2]
    assert rows[1]["timeout"] == 1
    assert rows[1]["failed"] == 1
    assert rows[0]["failed"] == 0
    assert rows[0]["ttft_p50_s"] == pytest.approx(0.05, rel=0.05)
    assert "timeout" in FAILURE_COLUMNS
    assert "cancelled" not in FAILURE_COLUMNS


def test_series_payload_since_t_gives_only_later_rows() -> None:
    run = _run(3)
    assert [row["t"] for row in _payload(*run, since_t=0.0)["rows"]] == [1.0, 2.0]
    assert _payload(*run, since_t=2.0)["rows"] == []


def test_series_payload_after_the_run_gives_the_results_rows_including_the_last_partial_interval() -> None:
    timeline, series = _run(2)
    payload = _payload(timeline, series, state="stopped", results={"timeseries": timeline.rows(series, 2.4)})
    assert payload["ended"] is True
    assert [row["t"] for row in payload["rows"]] == [0.0, 1.0, 2.0]
    assert payload["rows"][-1]["interval_s"] == pytest.approx(0.4)
    assert [row["partial"] for row in payload["rows"]] == [False, False, True]
    assert [row["rate_left_out"] for row in payload["rows"]] == [False, False, True]  # 0.4 of an interval
    assert sum(row["succeeded"] for row in payload["rows"]) == 3


def test_b6_every_form_field_has_a_label_in_the_fields_terms_its_full_help_and_default() -> None:
    fields = form_fields()
    in_form = [spec for spec in OPTIONS if not spec.launch_only]
    assert list(fields) == [spec.dest for spec in in_form]
    assert fields["slo"]["label"] == "SLO (goodput)"
    assert fields["ignore_eos"]["label"].startswith("Ignore EOS")
    assert fields["max_tokens"] == {
        "label": "Max tokens (reply length)", "help": "max_tokens per request (positive integer).", "default": "128",
        "group": "Reply length and sampling",
    }  # fmt: skip
    assert fields["slo"]["default"] == "none"
    assert fields["no_stream"]["default"] == "off: streaming"
    assert fields["model"]["default"] == "the first model GET /v1/models lists"
    # never "unset": the default llmload options and the README show
    assert fields["arrival"]["default"] == "poisson (with --request-rate)"
    assert fields["burstiness"]["default"] == "1 (with --arrival gamma)"
    assert fields["request_rate"]["default"] == "not set: closed loop"
    assert all(field["default"] == spec.default_text for field, spec in zip(fields.values(), in_form, strict=True))
    labels = [field["label"] for field in fields.values()]
    assert len(set(labels)) == len(labels)
    assert all(field["help"] == spec.help for field, spec in zip(fields.values(), in_form, strict=True))
    assert "prometheus_port" not in fields  # launch-only: not in the form


def test_b6_an_option_without_a_label_is_refused_where_it_is_declared() -> None:
    with pytest.raises(ValueError, match="--new-thing needs a label"):
        OptionSpec("--new-thing", "help", "Load")


def test_page_config_cannot_close_its_script_element() -> None:
    tags = script_tags({"base": "/x", "fields": {"a": {"label": "</script><b>", "help": "", "default": ""}}})
    data = tags.split('type="application/json">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)["fields"]["a"]["label"] == "</script><b>"
    assert 'src="/x/llmload/static/chart.umd.min.js"' in tags
    assert 'src="/x/llmload/static/llmtab.js"' in tags


def test_row_cache_computes_each_complete_interval_once_and_starts_over_for_new_series() -> None:
    timeline, series = _run(2)
    cache = RowCache()
    first = _payload(timeline, series, cache=cache)["rows"]
    series.add(0, _timeout())  # a late report for interval 0: the cache keeps its first figures
    again = _payload(timeline, series, cache=cache)["rows"]
    assert again == first
    assert again[0]["failed"] == 0
    timeline.due_rows(series, 3.0)  # interval 2 completes
    assert [row["t"] for row in _payload(timeline, series, cache=cache)["rows"]] == [0.0, 1.0, 2.0]
    after_reset = IntervalSeries.empty()  # RESET: a new series
    assert all(row["succeeded"] == 0 for row in _payload(timeline, after_reset, cache=cache)["rows"])
    assert _payload(timeline, series)["rows"][0]["failed"] == 1  # without the cache: computed afresh


def test_chart_rows_carry_the_server_columns_read_at_each_interval_end() -> None:
    timeline, series = Timeline(1.0, extra_columns=SERVER_COLUMNS), IntervalSeries.empty()
    for index in range(3):
        series.add(index, _ok(0.2, 10))
        timeline.sample(index + 0.5, {"in_flight_requests": 1, "users": 4, "workers": 0})
    timeline.add_extra(0, {"server_running_requests": 3, "server_kv_cache_usage": 0.25})
    timeline.add_extra(1, {"server_generation_tokens_per_s": 42.0})
    timeline.due_rows(series, 3.0)
    rows = _payload(timeline, series, cache=RowCache())["rows"]
    assert [(r["server_running_requests"], r["server_kv_cache_usage"]) for r in rows] == [(3, 0.25), (None, None)] + [
        (None, None)
    ] * (len(rows) - 2)
    assert rows[1]["server_generation_tokens_per_s"] == 42.0
    assert rows[0]["in_flight_requests"] == 1  # the gauge samples are kept beside the extra columns
