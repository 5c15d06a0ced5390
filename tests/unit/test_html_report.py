"""The HTML report (llmload.exporters.html) and `llmload report`, from results documents of every README mode."""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import markupsafe
import pytest

from llmload.aggregate.series import IntervalSeries
from llmload.cli import main as cli_main
from llmload.exporters.drift import drift_section
from llmload.exporters.html import (
    ReportError,
    compare_rows,
    latency_cdf_points,
    load_results,
    render_report,
    write_html_report,
)
from llmload.servermetrics import SERVER_COLUMNS
from llmload.servermetrics.names import GAUGES
from llmload.testing import ok_record
from tests.unit.test_readme_schema import MODES, closed_loop, open_loop

SECTIONS = ("warnings", "summary", "latency", "timeseries", "failures", "server", "configuration")


class _Page(HTMLParser):
    """Tags and attributes of a page, the text of its elements by id, and its scripts."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data

    def ids(self) -> set[str]:
        return {attrs["id"] for _, attrs in self.tags if attrs.get("id")}

    def with_attr(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for _, attrs in self.tags if name in attrs]


def _ts_row(t: float, endpoint: str | None, succeeded: int, failed: int, scale: float) -> dict[str, Any]:
    """A time-series row as the README's results schema (timeseries[]) describes it."""
    row: dict[str, Any] = {"t": t, "interval_s": 10.0, "endpoint": endpoint, "model": endpoint and "m"}
    row |= {"succeeded": succeeded, "failed": failed, "cancelled": 0, "prompt_tokens": 10 * succeeded}
    row |= {"output_tokens": 30 * succeeded, "requests_per_s": succeeded / 10, "output_tokens_per_s": 3.0 * succeeded}
    row |= {"total_tokens_per_s": 4.0 * succeeded, "read_lag_p99_s": 0.0002}
    for metric in ("ttft", "itl", "tpot", "e2e"):
        for q, factor in (("p50", 1.0), ("p90", 1.5), ("p99", 2.0)):
            row[f"{metric}_{q}_s"] = 0.01 * scale * factor if succeeded else None
    row |= {"in_flight_requests": 4 if endpoint is None else None, "users": 4 if endpoint is None else None}
    row |= dict.fromkeys(SERVER_COLUMNS)
    if endpoint is None and succeeded:  # the server read at the interval's end (total row only)
        row |= {"server_running_requests": 3.0, "server_waiting_requests": 1.0, "server_kv_cache_usage": 0.25}
        row |= {"server_generation_tokens": 31 * succeeded, "server_generation_tokens_per_s": 3.1 * succeeded}
        row |= {"server_prompt_tokens": 10 * succeeded, "server_prompt_tokens_per_s": 1.0 * succeeded}
        row |= {"server_scrape_s": 0.004, "server_scrape_failures": 0}
    return row


def with_timeseries_and_server(document: dict[str, Any]) -> dict[str, Any]:
    """The closed-loop document plus the `timeseries` rows and `server` section of the README schema."""
    doc = copy.deepcopy(document)
    doc["timeseries"] = [
        _ts_row(0.0, None, 5, 1, 1.0),
        _ts_row(0.0, "chat", 5, 1, 1.0),
        _ts_row(10.0, None, 7, 0, 1.3),
        _ts_row(20.0, None, 0, 0, 1.0),
    ]
    latency = {"mean": 0.03, "p50": 0.028, "p90": 0.04, "p99": 0.05, "count": 12}
    doc["server"] = {
        "kind": "llmload-sim",
        "complete": True,
        "prompt_tokens": 30,
        "generation_tokens": 9,
        "prompt_cached_tokens": None,
        "prefix_cache_hit_ratio": None,
        "notes": [],
        "endpoints": [
            {
                "url": "http://127.0.0.1:8000/metrics",
                "kind": "llmload-sim",
                "scrapes": 3,
                "failed_scrapes": 0,
                "error": None,
            }
        ],
        "counters": {"preemptions": 0},
        "gauges": {  # every gauge the server section names, as summarise writes them
            **{name: {"mean": None, "max": None, "samples": 0} for name in GAUGES},
            "running_requests": {"mean": 3.5, "max": 4.0, "samples": 2},
        },
        "latency": {"ttft_s": latency, "itl_s": None, "tpot_s": None, "e2e_s": latency, "queue_s": None},
        "names": {"running requests": "vllm:num_requests_running"},
        "cross_check": {
            "tokens": "client = server",
            "prompt_tokens_diff": 0,
            "generation_tokens_diff": 0,
            "ttft_client_minus_server_s": {"mean": 0.0008, "p50": -0.00002},
        },
    }
    return doc


def _chart_data(page: _Page) -> dict[str, Any]:
    return json.loads(page.scripts[0])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_html_report_renders_every_section_in_each_readme_mode(mode):
    document = MODES[mode]()
    page = _Page(render_report([document]))
    assert set(SECTIONS) <= page.ids()
    assert {"summary-table", "config-table", "verdict-0"} <= page.ids()
    text = render_report([document])
    assert str(markupsafe.escape(document["verdict"])) in text
    verdict_class = next(attrs["class"] for _, attrs in page.tags if attrs.get("id") == "verdict-0")
    assert (
        verdict_class
        == "verdict "
        + {
            "blocked": "blocked",
            "failed": "failed",
            "closed": "failed",
            "open": "passed",
            "unlimited": "passed",
            "trace": "passed",
            "sessions": "passed",
            "aborted": "failed",
            "partial": "partial",
        }[mode]
    )
    canvases = [attrs["id"] for attrs in page.with_attr("data-chart")]
    assert canvases[:4] == ["cdf-ttft_s", "cdf-itl_s", "cdf-tpot_s", "cdf-e2e_s"]
    if document["timeseries"]:  # the closed-loop mode has time-series rows: their charts follow
        assert len(canvases) > 4
        assert all(c.startswith("ts-") for c in canvases[4:])
        assert "No time series in this results file" not in text
    else:
        assert canvases == ["cdf-ttft_s", "cdf-itl_s", "cdf-tpot_s", "cdf-e2e_s"]
        assert "No time series in this results file" in text


def test_html_report_shows_failures_lost_workers_saturation_and_configuration():
    document = closed_loop()
    text = render_report([document])
    error = document["errors"][0]
    assert f"<td>{error['category']}</td>" in text
    assert error["samples"][0] in text
    assert "Lost workers: w1" in text
    assert "load generator saturated (CPU &gt; 90% for 6.0 s)" in text
    assert "options.workload.input_tokens.mean" in text  # configuration: run.options flattened
    open_text = render_report([open_loop()])
    assert "target rate 10 req/s not met" in open_text


def test_html_report_blocked_run_says_why_and_shows_no_latency():
    document = MODES["blocked"]()
    text = render_report([document])
    assert "Blocked before load: model &#34;other&#34; not served; available: m" in text
    assert all(points == [] for points in _chart_data(_Page(text))["runs"][0]["cdf"].values())


def test_html_report_shows_an_unknown_model_as_na_not_none():
    """A run refused before a model was chosen has run.model null: the header says n/a."""
    document = MODES["blocked"]()
    document["run"]["model"] = None
    text = render_report([document])
    assert "<tr><td>Model</td><td>n/a</td></tr>" in text
    assert "<td>None</td>" not in text


def test_html_report_draws_time_series_and_server_metrics_when_present():
    document = with_timeseries_and_server(closed_loop())
    text = render_report([document])
    page = _Page(text)
    series = [attrs for attrs in page.with_attr("data-chart") if attrs["data-chart"] == "timeseries"]
    assert len(series) == 8 + 3  # the client's, then the server's: tok/s, running/waiting, KV cache
    rows = _chart_data(page)["runs"][0]["timeseries"]
    assert [row["t"] for row in rows] == [0.0, 10.0, 20.0]  # the run total only, per-endpoint rows left out
    assert all(row["endpoint"] is None for row in rows)
    fields = {f for attrs in series for f in (attrs["data-fields"] or "").split(",")}
    assert fields <= set(rows[0])  # every charted field is a key of the README's timeseries rows
    assert "No time series" not in text
    assert "<td>llmload-sim</td>" in text
    assert "client = server" in text
    assert "running_requests" in text
    assert "+0.80" in text
    assert "Not collected" not in text
    assert "<td>gpu_power_w</td>" not in text  # a gauge never sampled is left out, not shown as n/a
    assert "ts-server-gpu" not in text  # and gets no chart
    assert "<td>preemptions</td>" in text


def test_html_report_charts_server_gauges_and_server_vs_client_tokens_per_s():
    document = with_timeseries_and_server(closed_loop())
    page = _Page(render_report([document]))
    charts = {attrs["id"]: attrs for attrs in page.with_attr("data-chart")}
    tokens = charts["ts-server-tokens"]
    assert tokens["data-fields"] == "output_tokens_per_s,server_generation_tokens_per_s"
    assert tokens["data-labels"] == "client (requests finished),server (generated)"
    assert charts["ts-server-requests"]["data-fields"] == "server_running_requests,server_waiting_requests"
    kv = charts["ts-server-kv"]
    assert (kv["data-fields"], kv["data-scale"]) == ("server_kv_cache_usage", "100")
    rows = _chart_data(page)["runs"][0]["timeseries"]
    assert [r["server_generation_tokens_per_s"] for r in rows] == [15.5, 21.7, None]  # the chart's data, null gaps
    assert [r["server_kv_cache_usage"] for r in rows] == [0.25, 0.25, None]


def test_html_report_has_no_server_charts_without_server_columns():
    document = with_timeseries_and_server(closed_loop())
    for row in document["timeseries"]:
        row.update(dict.fromkeys(SERVER_COLUMNS))  # --server-metrics off: the columns are null
    text = render_report([document])
    assert "ts-server-" not in text
    assert "Server, beside the client" not in text


def test_html_report_compare_charts_the_server_series_of_both_runs():
    a = with_timeseries_and_server(closed_loop())
    b = copy.deepcopy(a)
    for row in b["timeseries"]:
        if row["server_kv_cache_usage"] is not None:
            row["server_kv_cache_usage"] = 0.5
    page = _Page(render_report([a, b], names=["seqs 8", "seqs 16"]))
    assert {"ts-server-tokens", "ts-server-requests", "ts-server-kv"} <= page.ids()
    runs = _chart_data(page)["runs"]
    assert [run["label"] for run in runs] == ["seqs 8", "seqs 16"]
    assert [[r["server_kv_cache_usage"] for r in run["timeseries"]] for run in runs] == [
        [0.25, 0.25, None],
        [0.5, 0.5, None],
    ]


def test_html_report_references_no_remote_script_or_stylesheet():
    text = render_report([with_timeseries_and_server(closed_loop()), open_loop()])
    page = _Page(text)
    for tag, attrs in page.tags:
        assert tag not in ("link", "iframe", "img", "object", "embed"), (tag, attrs)
        if tag == "script":
            assert "src" not in attrs, attrs
    assert len(page.scripts) == 3
    assert all(len(script) > 100 for script in page.scripts)
    styles = re.findall(r"<style>(.*?)</style>", text, flags=re.S)
    assert styles
    assert not any(re.search(r"url\(|@import", style) for style in styles)
    assert "Chart.js v4" in page.scripts[1]  # the library is inlined


def test_html_report_escapes_every_value_from_the_results():
    document = closed_loop()
    attack = '</script><script>alert("x")</script><img src=x onerror=alert(1)>'
    document["run"]["model"] = attack
    document["run"]["run_id"] = attack
    document["errors"][0]["samples"] = [attack]
    document["run"]["options"]["model"] = attack
    text = render_report([document])
    page = _Page(text)
    assert len(page.scripts) == 3
    assert not any(tag == "img" for tag, _ in page.tags)
    assert _chart_data(page)["runs"][0]["label"] == attack  # the chart data carries it as data, intact
    assert "&lt;/script&gt;" in text


def _table(text: str) -> dict[str, dict[str, Any]]:
    """Summary table rows by key path: the values and delta the page states in data attributes."""
    page = _Page(text)
    rows: dict[str, dict[str, Any]] = {}
    current = None
    for tag, attrs in page.tags:
        if tag == "tr":
            current = attrs.get("data-path")
            if current:
                rows[current] = {"delta": float(attrs["data-delta"]) if attrs.get("data-delta") else None, "values": []}
        elif tag == "td" and current and "data-value" in attrs:
            rows[current]["values"].append(float(attrs["data-value"] or "nan"))
    return rows


def _lookup(document: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        document = document[part] if isinstance(document, dict) else None
    return document


def test_html_report_compare_deltas_equal_the_differences_of_the_inputs():
    a, b = closed_loop(), open_loop()
    b["latency"]["ttft_s"]["p99"] = 0.4375  # make the latency rows differ too
    b["throughput"]["output_tokens_per_s"] = 1234.5
    table = _table(render_report([a, b]))
    checked = 0
    for path, row in table.items():
        value_a, value_b = _lookup(a, path), _lookup(b, path)
        if isinstance(value_a, int | float) and isinstance(value_b, int | float):
            assert row["values"] == [value_a, value_b], path
            assert row["delta"] == value_b - value_a, path
            checked += 1
        else:
            assert row["delta"] is None, path
    assert checked >= 30
    assert table["latency.ttft_s.p99"]["delta"] == pytest.approx(0.4375 - a["latency"]["ttft_s"]["p99"])
    assert table["requests.total"]["delta"] == b["requests"]["total"] - a["requests"]["total"] != 0


def test_compare_rows_delta_is_none_when_a_side_is_unknown():
    rows = {row.path: row for row in compare_rows([MODES["blocked"](), closed_loop()])}
    assert rows["latency.e2e_s.p50"].values[0] is None
    assert rows["latency.e2e_s.p50"].delta is None
    assert rows["requests.total"].delta == 4
    assert all(row.delta is None for row in compare_rows([closed_loop()]))


def test_html_report_compare_overlays_both_runs_and_marks_differing_options():
    text = render_report([closed_loop(), open_loop()], names=["before", "after"])
    data = _chart_data(_Page(text))
    assert [run["label"] for run in data["runs"]] == ["before", "after"]
    assert 'class="differs"><td>options.num_requests</td>' in text
    assert "&Delta; = after &minus; before" in text


def test_latency_cdf_points_of_a_file_without_latency_cdf_are_the_document_quantiles_in_ms():
    document = closed_loop()
    del document["latency_cdf"]  # written by an llmload before the histograms' distributions
    document["latency"]["e2e_s"] |= {"p50": 0.25, "p90": 0.5, "p99": 0.75, "max": 1.5, "count": 7}
    points = latency_cdf_points(document)
    assert points["e2e_s"] == [[250.0, 0.5], [500.0, 0.9], [750.0, 0.99], [1500.0, 1.0]]
    assert set(points) == {"ttft_s", "itl_s", "tpot_s", "e2e_s"}
    assert latency_cdf_points(MODES["failed"]())["ttft_s"] == []


def test_render_report_refuses_three_documents_and_wrong_name_count():
    with pytest.raises(ReportError, match="one run or compares two"):
        render_report([closed_loop()] * 3)
    with pytest.raises(ReportError, match="1 names for 2"):
        render_report([closed_loop()] * 2, names=["x"])


def test_write_html_report_rebuilds_the_same_page_from_the_file(tmp_path):
    document = with_timeseries_and_server(closed_loop())
    results = tmp_path / "results.json"
    results.write_text(json.dumps(document))
    size = write_html_report(tmp_path / "sub" / "report.html", [load_results(results)])
    written = (tmp_path / "sub" / "report.html").read_text(encoding="utf-8")
    assert size == len(written.encode())
    assert written == render_report([document])
    assert list((tmp_path / "sub").iterdir()) == [tmp_path / "sub" / "report.html"]  # no temporary file left


def test_report_cli_writes_a_report_and_a_comparison(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(closed_loop()))
    b.write_text(json.dumps(open_loop()))
    assert cli_main(["report", str(a), "-o", str(tmp_path / "one.html")]) == 0
    assert cli_main(["report", str(a), str(b), "-o", str(tmp_path / "two.html"), "--name", "x", "--name", "y"]) == 0
    out = capsys.readouterr().out
    assert "report written to" in out
    assert "comparison written to" in out
    assert (tmp_path / "one.html").read_text() == render_report([closed_loop()])
    assert "&Delta; = y &minus; x" in (tmp_path / "two.html").read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        (json.dumps({"a": 1}), "is not an llmload results document"),
    ],
)
def test_report_cli_refuses_a_file_that_is_not_a_results_document(tmp_path, capsys, content, message):
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    assert cli_main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert str(path) in err
    assert not (tmp_path / "r.html").exists()


def test_report_cli_refuses_three_files_and_a_name_per_file_mismatch(tmp_path, capsys):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(closed_loop()))
    assert cli_main(["report", str(a), str(a), str(a), "-o", str(tmp_path / "r.html")]) == 2
    assert "pass one, or two to compare" in capsys.readouterr().err
    assert cli_main(["report", str(a), "--name", "x", "--name", "y", "-o", str(tmp_path / "r.html")]) == 2
    assert "pass --name once per file" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(path: Path) -> str:
    """The page's DOM after its scripts ran, from headless Chromium."""
    out = subprocess.run(
        [
            CHROMIUM or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("compare", [False, True])
def test_html_report_charts_render_in_headless_chromium(tmp_path, compare):
    documents = [with_timeseries_and_server(closed_loop())] + ([open_loop()] if compare else [])
    path = tmp_path / "report.html"
    write_html_report(path, documents)
    page = _Page(dump_dom(path))
    body = next(attrs for tag, attrs in page.tags if tag == "body")
    canvases = page.with_attr("data-chart")
    assert body.get("data-chart-errors") == ""
    assert body.get("data-charts-rendered") == str(len(canvases)) == "15"
    for canvas in canvases:
        assert canvas.get("data-rendered") == "1", canvas["id"]
        assert int(canvas.get("data-painted-pixels") or 0) > 2000, canvas["id"]  # axes, labels and lines drawn


def _drifting_series() -> tuple[IntervalSeries, float]:
    """20 intervals of 10 s: the first two with TTFT 50 ms, the last two with 500 ms; 120 requests each."""
    series = IntervalSeries.empty()
    for index in range(20):
        ttft_s = 0.5 if index >= 18 else 0.05
        for _ in range(120):
            series.add(index, ok_record((ttft_s, ttft_s + 0.01, ttft_s + 0.02), end_s=ttft_s + 0.03))
    return series, 200.0


def test_html_report_shows_the_drift_table_with_flagged_metrics():
    series, end_s = _drifting_series()
    document = closed_loop()
    document["drift"] = drift_section(series, 10.0, end_s)
    assert "ttft_p99_s" in document["drift"]["flagged"]
    text = render_report([document])
    drift = text[text.index('<section id="drift">') : text.index('<section id="failures">')]
    row = drift[drift.index('data-metric="ttft_p99_s"') :].split("</tr>")[0]
    assert "DRIFT" in row
    assert "+900%" in row  # 50 ms -> 500 ms, within the histogram's 1 %
    assert "+25%" in row  # the tolerance
    assert 'class="flagged"' in drift
    error_row = drift[drift.index('data-metric="error_ratio"') :].split("</tr>")[0]
    assert "DRIFT" not in error_row


def test_html_report_says_when_drift_was_not_judged_or_is_absent():
    series, _ = _drifting_series()
    short = closed_loop()
    short["drift"] = drift_section(series, 10.0, 50.0)  # 5 intervals: too short to judge
    assert short["drift"]["judged"] is False
    text = render_report([short])
    assert f"Not judged: {markupsafe.escape(short['drift']['note'])}" in text
    absent = closed_loop()
    absent["drift"] = None
    assert "No drift section in this results file" in render_report([absent])


def test_html_report_shows_sessions_by_turn_and_the_trace_schedule_lag():
    page = _Page(render_report([MODES["sessions"]()]))
    assert "sessions" in page.ids()
    assert "sessions-table-0" in page.ids()
    text = render_report([MODES["sessions"]()])
    assert "3 completed, 0 failed" in text
    assert "header X-S" in text
    assert "sessions" not in _Page(render_report([MODES["closed"]()])).ids()
    assert "schedule lag max" in render_report([MODES["trace"]()])


def _ttft_split_cell(text: str) -> str:
    """The text of the report's "TTFT client − server" row (both cells), whitespace collapsed."""
    row = re.search(r'<tr class="ttft-split">(.*?)</tr>', text, re.S)
    assert row is not None, "no TTFT client − server row"
    return html.unescape(" ".join(re.sub(r"<[^>]+>", " ", row.group(1)).split()))


@pytest.mark.parametrize(
    ("split", "ttft", "shown"),
    [
        (
            {
                "mean": None,
                "p50": None,
                "client_count": 7,
                "server_count": 10,
                "not_comparable": "the server timed "
                "10 first tokens, the client 7 (more on the server: requests cancelled at the stop ...)",
            },
            "hist",
            "n/a, not comparable: the server timed 10 first tokens, the client 7 (more on the server: requests "
            "cancelled at the stop ...)",
        ),
        (None, None, "n/a: the server exposes no TTFT histogram"),
        (None, "hist", "n/a: the server timed no first token in the run"),
        (
            {"mean": 0.004, "p50": None, "p50_resolution_s": 0.1, "not_comparable": None},
            "hist",
            "+4.00 / n/a (finer than the server's 100.00 ms p50 range)",
        ),
    ],
)
def test_html_report_says_why_ttft_client_minus_server_is_na(split, ttft, shown):
    """Issue 24: the report showed "n/a / n/a" for TTFT client − server (or no row at all) without saying
    why; now the reason stands next to it, as in the console summary."""
    document = with_timeseries_and_server(closed_loop())
    server = document["server"]
    server["cross_check"]["ttft_client_minus_server_s"] = split
    if ttft is None:
        server["latency"]["ttft_s"] = None
    cell = _ttft_split_cell(render_report([document]))
    assert shown in cell
    assert "n/a / n/a" not in cell


def test_html_report_ttft_client_minus_server_figures_with_their_gloss():
    cell = _ttft_split_cell(render_report([with_timeseries_and_server(closed_loop())]))
    assert cell == "TTFT client − server mean / p50 (ms) +0.80 / -0.02 (network + HTTP + client time)"
