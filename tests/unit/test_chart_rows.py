"""What the report's and the web UI's charts draw (issue 24): partial intervals, warnings, limits, links, fields."""

from __future__ import annotations

import argparse
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from llmload.aggregate.histogram import LatencyHistogram
from llmload.errors import InvalidOptionsError
from llmload.exporters.chart_rows import (
    client_warnings,
    interval_of,
    is_partial,
    latency_cdf,
    load_charts,
    mark_partial,
    results_warnings,
)
from llmload.exporters.html import chart_rows, render_report, write_html_report
from llmload.exporters.web_charts import field_messages, form_fields, series_payload, threshold_lines
from llmload.exporters.web_tables import reachable_url
from llmload.settings.config import RunConfig
from llmload.settings.options import GROUPS, OPTIONS
from llmload.settings.thresholds import parse_threshold
from tests.unit.test_html_report import CHROMIUM, _chart_data, _Page, dump_dom, with_timeseries_and_server
from tests.unit.test_readme_schema import closed_loop


def _cut_run() -> dict[str, Any]:
    """A run whose last interval, cut at the stop, holds 3 requests in 0.076 s (39.5 req/s beside 17)."""
    doc = with_timeseries_and_server(closed_loop())
    total = [row for row in doc["timeseries"] if row["endpoint"] is None]
    last = dict(total[-1], t=30.0, interval_s=0.076, succeeded=3, requests_per_s=3 / 0.076)
    last["output_tokens_per_s"] = 90 / 0.076
    doc["timeseries"] = [*doc["timeseries"], last]
    doc["run"]["options"]["timeseries_interval_s"] = 10.0
    return doc


def test_issue24_the_cut_short_last_interval_is_marked_partial_in_the_report_data() -> None:
    doc = _cut_run()
    rows = chart_rows(doc)
    assert [row["partial"] for row in rows] == [False, False, False, True]
    assert [row["rate_left_out"] for row in rows] == [False, False, False, True]
    assert rows[-1]["requests_per_s"] == pytest.approx(39.47, abs=0.01)  # the figure itself is not changed
    page = _Page(render_report([doc]))
    data = _chart_data(page)
    assert [row["rate_left_out"] for row in data["runs"][0]["timeseries"]] == [False, False, False, True]
    assert {"requests_per_s", "output_tokens_per_s", "server_generation_tokens_per_s"} <= set(data["rate_columns"])


def test_a_partial_interval_of_half_an_interval_or_more_or_the_only_one_keeps_its_rate() -> None:
    half = mark_partial([{"interval_s": 10.0}, {"interval_s": 6.0}], 10.0)
    assert [(r["partial"], r["rate_left_out"]) for r in half] == [(False, False), (True, False)]
    only = mark_partial([{"interval_s": 3.0}], 10.0)  # a run shorter than one interval: its one rate stays
    assert [(r["partial"], r["rate_left_out"]) for r in only] == [(True, False)]


def test_issue24_web_ui_rows_of_an_ended_run_mark_the_partial_interval() -> None:
    doc = _cut_run()
    payload = series_payload("run-1", "stopped", timeline=None, series=_empty(), results=doc)
    assert payload["interval_s"] == 10.0
    assert [row["partial"] for row in payload["rows"]] == [False, False, False, True]
    assert [row["rate_left_out"] for row in payload["rows"]] == [False, False, False, True]


def _empty() -> Any:
    from llmload.aggregate.series import IntervalSeries

    return IntervalSeries.empty()


def test_interval_of_falls_back_to_the_longest_row_and_is_partial_needs_a_length() -> None:
    rows = [{"interval_s": 5.0}, {"interval_s": 1.25}]
    assert interval_of({}, rows) == 5.0
    assert [r["partial"] for r in mark_partial(rows, 5.0)] == [False, True]
    assert [r["rate_left_out"] for r in mark_partial(rows, 5.0)] == [False, True]
    assert not is_partial({"interval_s": None}, 5.0)
    assert not is_partial({"interval_s": 1.0}, None)


def test_issue24_report_time_series_legends_are_in_the_fields_terms_and_the_axis_unit() -> None:
    page = _Page(render_report([_cut_run()]))
    canvases = list(page.with_attr("data-fields"))
    assert canvases
    for canvas in canvases:
        labels = (canvas.get("data-labels") or "").split(",")
        fields = (canvas.get("data-fields") or "").split(",")
        assert len(labels) == len(fields), canvas["id"]
        assert not any(re.search(r"_s$|_per_s$", label) for label in labels), canvas["id"]  # no column names
        if canvas.get("data-scale") == "1000":  # an axis in ms: every legend says ms
            assert all("(ms)" in label for label in labels), canvas["id"]
    ids = {canvas["id"] for canvas in canvases}
    assert {"ts-ttft", "ts-itl", "ts-tpot", "ts-e2e", "ts-requests"} <= ids


def test_issue24_client_warnings_name_the_read_lag_and_the_cpu_streak() -> None:
    lag = LatencyHistogram()
    lag.add_many([0.0001] * 90 + [0.012] * 10)
    lines = client_warnings(6.0, lag)
    assert len(lines) == 2
    assert "above 90% for 6 s" in lines[0]
    shown = re.search(r"up to ([0-9.]+) ms \(read lag P99", lines[1])
    assert shown is not None
    assert float(shown.group(1)) == pytest.approx(12.0, rel=0.02)
    assert "--processes N" in lines[1]
    quiet = LatencyHistogram()
    quiet.add_many([0.0001] * 100)
    assert client_warnings(4.9, quiet) == []
    doc = closed_loop()
    doc["client"] = {**(doc.get("client") or {}), "read_lag_saturated": True, "read_lag_s": {"p99": 0.012, "max": 0.02}}
    (line,) = [line for line in results_warnings(doc) if "read lag" in line]
    assert "12.0 ms" in line
    assert "max 20.0 ms" in line


def test_issue24_web_payload_carries_warnings_start_and_abort_on_limits() -> None:
    thresholds = (parse_threshold("ttft_p99>10s for 10m"), parse_threshold("error_ratio>0.05"))
    payload = series_payload(
        "run-1", "running", timeline=None, series=_empty(), results=None,
        warnings=["Client saturated: ..."], started_at_unix=1_700_000_000.0, thresholds=thresholds,
    )  # fmt: skip
    assert payload["warnings"] == ["Client saturated: ..."]
    assert payload["started_at_unix"] == 1_700_000_000.0
    assert payload["thresholds"] == [{"text": "ttft_p99>10s for 10m", "column": "ttft_p99_s", "value": 10.0}]
    assert threshold_lines((parse_threshold("output_tok_s<100"),))[0]["column"] == "output_tokens_per_s"


@pytest.mark.parametrize(
    ("url", "host", "shown"),
    [
        ("http://0.0.0.0:9646/metrics", "loadbox:8089", "http://loadbox:9646/metrics"),
        ("http://0.0.0.0:9646/metrics", "10.1.2.3", "http://10.1.2.3:9646/metrics"),
        ("http://[::]:9646/metrics", "[fd00::1]:8089", "http://[fd00::1]:9646/metrics"),
        ("http://127.0.0.1:9646/metrics", "loadbox:8089", "http://127.0.0.1:9646/metrics"),
    ],
)
def test_issue24_run_tab_links_prometheus_on_a_reachable_host(url: str, host: str, shown: str) -> None:
    assert reachable_url(url, host) == shown


def test_issue24_three_invalid_form_values_are_reported_each_at_its_field() -> None:
    options = argparse.Namespace(**{spec.dest: spec.default for spec in OPTIONS})
    options.max_tokens, options.read_timeout, options.temperature = "abc", "-1", "hot"
    with pytest.raises(InvalidOptionsError) as caught:
        RunConfig.from_options(options)
    fields = field_messages(caught.value)
    assert set(fields) == {"max_tokens", "read_timeout", "temperature"}
    assert "'abc'" in fields["max_tokens"]
    assert "'hot'" in fields["temperature"]


def test_issue24_host_of_an_endpoint_is_reported_at_the_forms_host_field() -> None:
    options = argparse.Namespace(**{spec.dest: spec.default for spec in OPTIONS})
    options.host, options.max_tokens = "http://h:8000/v1/chat/completions", "abc"
    with pytest.raises(InvalidOptionsError) as caught:
        RunConfig.from_options(options)
    fields = field_messages(caught.value)
    assert set(fields) == {"host", "max_tokens"}  # Locust's own field is named host
    assert "pass the server's base URL: -H http://h:8000" in fields["host"]


def test_issue24_form_fields_carry_their_group_heading_in_the_option_tables_order() -> None:
    groups = [field["group"] for field in form_fields().values()]
    assert set(groups) <= set(GROUPS)
    assert len(set(groups)) > 3
    order = [GROUPS.index(group) for group in dict.fromkeys(groups)]
    assert order == sorted(order)  # one heading per group, each group's fields together
    assert len(dict.fromkeys(groups)) == len([g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g])


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_issue24_report_rate_charts_leave_out_the_cut_short_interval_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    write_html_report(path, [_cut_run()])
    page = _Page(dump_dom(path))
    canvases = {attrs["id"]: attrs for attrs in page.with_attr("data-chart")}
    for rate in ("ts-requests", "ts-throughput", "ts-server-tokens"):
        assert canvases[rate].get("data-left-out") == "1", rate
        assert canvases[rate].get("data-rendered") == "1", rate
    for other in ("ts-ttft", "ts-outcomes", "ts-inflight"):  # counts and latencies show the interval
        assert canvases[other].get("data-left-out") is None, other


def test_issue24_latency_cdf_is_one_point_per_bucket_with_the_quantile_rule() -> None:
    hist = LatencyHistogram()
    values = [0.010] * 50 + [0.020] * 40 + [0.100] * 9 + [1.5]
    hist.add_many(values)
    points = latency_cdf(hist)
    assert [share for _, share in points] == [0.5, 0.9, 0.99, 1.0]
    assert [value for value, _ in points] == hist.quantiles([0.5, 0.9, 0.99, 1.0])
    assert points[-1][0] == 1.5  # the exact max
    assert latency_cdf(LatencyHistogram()) == []


def test_latency_cdf_thins_many_buckets_by_share_and_keeps_both_ends() -> None:
    hist = LatencyHistogram()
    hist.add_many([0.001 * 1.05**i for i in range(400)])  # 400 distinct buckets
    points = latency_cdf(hist, max_points=50)
    assert 40 <= len(points) <= 52
    assert points[0][1] == pytest.approx(1 / 400)
    assert points[-1] == [hist.max, 1.0]
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(points))


def test_issue24_report_draws_the_distributions_from_the_histograms_not_four_points() -> None:
    from llmload.aggregate.stats import LLMStats
    from llmload.exporters.results import RunOutcome, build_results
    from tests.unit.test_web_charts import _ok

    stats = LLMStats.empty()
    for i in range(200):
        stats.add(_ok(0.05 + 0.002 * i, 10))
    doc = build_results(RunOutcome(stats))
    e2e = doc["latency_cdf"]["e2e_s"]
    assert len(e2e) > 20  # far more than p50/p90/p99/max
    assert e2e[-1] == [doc["latency"]["e2e_s"]["max"], 1.0]
    page = _Page(render_report([doc]))
    cdf = _chart_data(page)["runs"][0]["cdf"]
    assert cdf["e2e_s"] == [[value * 1000.0, share] for value, share in e2e]
    assert "from the run's histograms" in render_report([doc])
    old = {key: value for key, value in doc.items() if key != "latency_cdf"}  # a file written before the field
    assert len(_chart_data(_Page(render_report([old])))["runs"][0]["cdf"]["e2e_s"]) == 4


def _users_sweep() -> dict[str, Any]:
    """A users sweep 1, 8, 64, 256 whose output tok/s stops rising after 64 (the knee)."""
    from llmload.sweep import parse_sweep, step_section, sweep_document

    steps = []
    for users, tokens, ttft_p99 in ((1, 100.0, 0.05), (8, 700.0, 0.08), (64, 2000.0, 0.4), (256, 2040.0, 2.5)):
        doc = closed_loop()
        doc["throughput"]["output_tokens_per_s"] = tokens
        doc["latency"]["ttft_s"]["p99"] = ttft_p99
        steps.append(step_section(float(users), doc))
    return sweep_document(parse_sweep("users=1,8,64,256"), steps, ttft_p99_limit_s=None)


def test_issue24_sweep_view_draws_throughput_and_ttft_itl_against_users_with_the_knee_marked() -> None:
    from llmload.exporters.sweep_report import render_sweep_report, sweep_points

    document = _users_sweep()
    assert document["knee"]["step"] == 64.0
    points = sweep_points(document)
    assert [p["x"] for p in points] == [1.0, 8.0, 64.0, 256.0]
    assert [p["knee"] for p in points] == [False, False, True, False]
    assert [p["values"]["throughput.output_tokens_per_s"] for p in points] == [100.0, 700.0, 2000.0, 2040.0]
    page = _Page(render_sweep_report(document))
    ids = page.ids()
    assert {"sweep-tokens", "sweep-requests", "sweep-ttft", "sweep-itl", "steps-table", "knee"} <= ids
    text = render_sweep_report(document)
    assert "Knee: step 64" in text
    assert 'class="knee" data-step="64"' in text


def test_issue24_sweep_view_of_a_rate_sweep_uses_the_achieved_rate_and_shows_the_target() -> None:
    from llmload.exporters.sweep_report import render_sweep_report, sweep_points
    from tests.unit.test_readme_schema import sweep_file

    document = sweep_file()
    points = sweep_points(document)
    assert [p["x"] for p in points] == [_get_achieved(s) for s in document["steps"]]
    text = render_sweep_report(document)
    assert "Target req/s" in text
    assert "Achieved req/s" in text


def _get_achieved(section: dict[str, Any]) -> Any:
    return (section.get("load") or {}).get("achieved_rate_per_s")


def test_issue24_report_cli_writes_the_sweep_view_of_a_sweep_file(tmp_path: Path, capsys: Any) -> None:
    import json

    from llmload.cli import main as cli_main

    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_users_sweep()))
    assert cli_main(["report", str(path), "-o", str(tmp_path / "s.html")]) == 0
    assert "sweep view written" in capsys.readouterr().out
    assert "Knee: step 64" in (tmp_path / "s.html").read_text()
    other = tmp_path / "r.json"
    other.write_text(json.dumps(closed_loop()))
    assert cli_main(["report", str(path), str(other), "-o", str(tmp_path / "c.html")]) == 2
    assert "pass it alone for the sweep view" in capsys.readouterr().err


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_issue24_sweep_view_charts_render_in_chromium_with_the_knee(tmp_path: Path) -> None:
    from llmload.exporters.sweep_report import write_sweep_report

    path = tmp_path / "sweep.html"
    write_sweep_report(path, _users_sweep())
    page = _Page(dump_dom(path))
    body = next(attrs for tag, attrs in page.tags if tag == "body")
    assert body.get("data-chart-errors") == ""
    assert body.get("data-charts-rendered") == "4"
    for canvas in page.with_attr("data-chart"):
        assert canvas.get("data-rendered") == "1", canvas["id"]
        assert canvas.get("data-knee") == "64", canvas["id"]
    tokens = next(c for c in page.with_attr("data-chart") if c["id"] == "sweep-tokens")
    assert tokens.get("data-points") == "4"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_issue24_report_draws_the_abort_on_limits_on_their_charts(tmp_path: Path) -> None:
    doc = _cut_run()
    doc["run"]["options"]["abort_on"] = ["ttft_p99>0.5s for 10m", "error_ratio>0.05", "req_s<0.1 for 1m"]
    path = tmp_path / "report.html"
    write_html_report(path, [doc])
    lines = _chart_data(_Page(path.read_text()))["runs"][0]["thresholds"]
    assert [line["column"] for line in lines] == ["ttft_p99_s", "requests_per_s"]  # a ratio has no chart
    canvases = {attrs["id"]: attrs for attrs in _Page(dump_dom(path)).with_attr("data-chart")}
    assert canvases["ts-ttft"].get("data-threshold-lines") == "1"
    assert canvases["ts-requests"].get("data-threshold-lines") == "1"
    assert canvases["ts-itl"].get("data-threshold-lines") == "0"


def _trace_sessions_run() -> dict[str, Any]:
    """A run whose rows have a schedule lag and turns 1 and 2's mean TTFT (turn 2 only in the second interval)."""
    doc = with_timeseries_and_server(closed_loop())
    total = [row for row in doc["timeseries"] if row["endpoint"] is None]
    for row, lag, turns in zip(total, (0.002, 0.004, None), ({"1": 0.1}, {"1": 0.12, "2": 0.3}, None), strict=True):
        row.update(schedule_lag_p99_s=lag, turn_ttft_mean_s=turns)
    return doc


def test_issue21_report_and_web_ui_chart_the_schedule_lag_and_the_ttft_of_each_turn() -> None:
    doc = _trace_sessions_run()
    rows = chart_rows(doc)
    assert [(r["ttft_turn1_mean_s"], r["ttft_turn2_mean_s"], r["ttft_turn3_mean_s"]) for r in rows] == [
        (0.1, None, None),
        (0.12, 0.3, None),
        (None, None, None),
    ]
    charts = {c["id"]: c for c in load_charts(rows)}
    assert charts["ts-schedule-lag"]["fields"] == "schedule_lag_p99_s"
    assert (charts["ts-turn-ttft"]["fields"], charts["ts-turn-ttft"]["labels"]) == (
        "ttft_turn1_mean_s,ttft_turn2_mean_s",
        "turn 1,turn 2",
    )
    page = render_report([doc])
    assert 'id="ts-schedule-lag"' in page
    assert 'data-fields="ttft_turn1_mean_s,ttft_turn2_mean_s"' in page
    web = series_payload("run-1", "stopped", timeline=None, series=_empty(), results=doc)
    assert [r["schedule_lag_p99_s"] for r in web["rows"]] == [0.002, 0.004, None]
    assert [r["ttft_turn2_mean_s"] for r in web["rows"]] == [None, 0.3, None]


def test_issue21_no_lag_or_turn_chart_in_a_closed_loop_without_turns() -> None:
    doc = with_timeseries_and_server(closed_loop())
    assert load_charts(chart_rows(doc)) == []
    page = render_report([doc])
    assert "ts-schedule-lag" not in page
    assert "ts-turn-ttft" not in page
