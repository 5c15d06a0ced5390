"""The LLM tab's live charts, the form's labels and EDIT in a real browser (issue 10, items 3, 4 (B3, B6), 6).

Headless Debian chromium against a real ``locust`` web UI over ``llmload sim``
(one process, 1 s time-series intervals, the Prometheus exporter on a free
port): the form shows llmload's labels with help and defaults; a run started
from the form fills the LLM tab's table and its charts (canvases drawn from
``/llmload/timeseries.json``, whose rows come with increasing ``t``, on a
wall-clock axis, the ``--abort-on`` limit drawn as a line; issue 24); the EDIT
dialog hides llmload's fields and changes the users; STOP ends the run, the LLM
run tab shows the verdict (the rate charts leave out the interval the STOP
cut short) and the HTML report downloads, references nothing
external and opens (its charts drawn) in the browser. ``LLMLOAD_SCREENSHOTS=1``
(``make screenshots``) saves the form, the tab and the report under ``docs/``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.browser import by_text, chromium, screenshot, set_field, tab_cells, wait
from tests.integration.procs import final_results_written, free_port
from tests.integration.webui import WebUI, web_ui

pytestmark = pytest.mark.integration

MIN_ROWS = 6
FAIL_RATE = "0.08"  # the simulator fails some replies, so the failures chart has bars
RUN_BOUND_S = "90s"  # the run stops by itself at the latest after this (the test presses STOP long before)
ABORT_ON = "ttft_p99>60s for 10m"  # never fires here; drawn as a line on the TTFT chart


def _series(ui: WebUI) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(ui.get("/llmload/timeseries.json"))
    return answer


def _chart_points(driver: Any) -> list[int]:
    """Points of each chart's first data set, as Chart.js holds them."""
    script = (
        "return [...document.querySelectorAll('#llmload-charts canvas')]"
        ".map(c => Chart.getChart(c).data.datasets[0].data.length);"
    )
    points: list[int] = driver.execute_script(script)
    return points


def test_browser_charts_fill_from_the_series_route_edit_hides_llmload_fields_and_the_report_opens(
    tmp_path: Path,
) -> None:
    results = tmp_path / "r.json"
    metrics_port = free_port()
    args = (
        "--timeseries-interval", "1", "-u", "4", "-r", "4", "-t", RUN_BOUND_S, "--results-json", str(results),
        "--prometheus-port", str(metrics_port), "--prometheus-host", "127.0.0.1", "--prometheus-grace", "0",
        "--abort-on", ABORT_ON,
    )  # fmt: skip
    with chromium(1500, 1300) as driver, web_ui(*args, sim_args=("--fail-rate", FAIL_RATE)) as ui:
        _form_labels(driver, ui)
        _charts_fill(driver, ui, metrics_port)
        _edit_hides_llmload_fields(driver, ui)
        _stop_and_report(driver, ui, results, tmp_path)


def _form_labels(driver: Any, ui: WebUI) -> None:
    driver.get(ui.base + "/")
    by_text(driver, "//*[normalize-space()='Custom parameters']").click()
    wait(driver, lambda d: d.find_element("name", "maxTokens").is_displayed())
    wait(driver, lambda d: d.find_elements("xpath", "//label[normalize-space()='SLO (goodput)']"))
    labels = [label.text for label in driver.find_elements("css selector", "label")]
    assert "Max tokens (reply length)" in labels
    assert not [text for text in labels if text.startswith(("Slo", "Ignore Eos", "Max Tokens"))]  # Locust's own
    helps = [p.text for p in driver.find_elements("css selector", "p.llmload-help")]
    assert "max_tokens per request (positive integer). Default: 128" in helps
    assert any(text.startswith("Service-level objectives in seconds") and "Default: none" in text for text in helps)
    screenshot(driver, "webui-form.png")
    set_field(driver, "maxTokens", "24")
    by_text(driver, "//button[@type='submit']").click()


def _charts_fill(driver: Any, ui: WebUI, metrics_port: int) -> None:
    by_text(driver, "//button[@role='tab'][normalize-space()='LLM']").click()
    wait(driver, lambda d: "llmload-sim" in tab_cells(d))
    canvases = wait(driver, lambda d: d.find_elements("css selector", "#llmload-charts canvas"))
    # two of them the server's, shown once its metrics were read; the last two the schedule lag's and the
    # TTFT by turn's, shown only in an open-loop, trace or session run (this one is closed loop, one turn)
    assert len(canvases) == 12
    deadline = time.monotonic() + 60
    while len(rows := _series(ui)["rows"]) < MIN_ROWS:
        assert time.monotonic() < deadline, f"fewer than {MIN_ROWS} time-series rows within 60 s: {rows}"
        time.sleep(0.5)
    payload = _series(ui)
    assert payload["ended"] is False
    assert payload["in_progress_included"] is False
    times = [row["t"] for row in payload["rows"]]
    assert times == sorted(set(times))
    assert times[0] == 0.0
    assert all(row["output_tokens_per_s"] > 0 for row in payload["rows"][1:])  # interval 0 holds the ramp
    assert sum(row["failed"] for row in payload["rows"]) == sum(row["http_error"] for row in payload["rows"])
    # the sim's /metrics is read at every interval's end (--server-metrics auto): its charts are shown
    assert any(row["server_running_requests"] is not None for row in payload["rows"]), payload["rows"]
    assert any(row["server_generation_tokens_per_s"] for row in payload["rows"]), payload["rows"]
    wait(
        driver, lambda d: all(c.is_displayed() for c in d.find_elements("css selector", "#llmload-charts canvas")[:10])
    )
    assert not any(c.is_displayed() for c in driver.find_elements("css selector", "#llmload-charts canvas")[10:])
    later = json.loads(ui.get(f"/llmload/timeseries.json?since_t={times[-2]}"))["rows"]
    assert [row["t"] for row in later][:1] == times[-1:]
    wait(driver, lambda d: min(_chart_points(d)) >= MIN_ROWS - 1)
    status = driver.find_element("id", "llmload-charts-status").text
    assert re.match(r"\d+ interval\(s\)", status)
    ttft = driver.find_element("css selector", "canvas[data-llmload-chart='TTFT (ms)']")
    assert ttft.get_attribute("data-threshold-lines") == "1"  # the --abort-on limit, as a line
    line = driver.execute_script("return Chart.getChart(arguments[0]).data.datasets.at(-1);", ttft)
    assert line["label"].startswith(f"--abort-on {ABORT_ON}")
    assert {point["y"] for point in line["data"]} == {60_000}  # 60 s on the ms axis
    ticks = driver.execute_script("return Chart.getChart(arguments[0]).scales.x.ticks.map(t => t.label);", ttft)
    assert ticks
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", tick) for tick in ticks), ticks  # wall-clock axis
    assert _series(ui)["started_at_unix"] == pytest.approx(time.time(), abs=300)
    link = driver.find_element("id", "llmload-metrics-link").get_attribute("href")
    assert link == f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(link, timeout=10) as answer:
        assert b"llmload_" in answer.read()
    screenshot(driver, "webui-llm-tab.png")


def _edit_hides_llmload_fields(driver: Any, ui: WebUI) -> None:
    by_text(driver, "//button[normalize-space()='Edit']").click()
    wait(driver, lambda d: d.find_elements("xpath", "//*[normalize-space()='Edit running load test']"))
    note = wait(driver, lambda d: d.find_elements("css selector", ".MuiModal-root .llmload-edit-note"))
    assert "STOP and start a NEW run" in note[0].text
    hidden = driver.find_elements(
        "xpath", "//*[contains(@class,'MuiModal-root')]//*[normalize-space()='Custom parameters']"
    )
    assert hidden
    assert not any(element.is_displayed() for element in hidden)
    wait(driver, lambda d: not d.find_elements("css selector", ".MuiModal-root [name='maxTokens']"))  # nor posted
    set_field(driver, "userCount", "2")
    by_text(driver, "//button[@type='submit'][normalize-space()='Update']").click()
    ui.wait(lambda s: s["user_count"] == 2, "EDIT to change the users to 2", 30)
    assert not driver.find_elements("xpath", "//*[contains(@class,'MuiAlert-message')][contains(., 'llmload')]")


def _stop_and_report(driver: Any, ui: WebUI, results: Path, tmp_path: Path) -> None:
    by_text(driver, "//button[normalize-space()='Stop']").click()
    ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the run to stop", 60)
    document = json.loads(results.read_text())
    assert document["run"]["options"]["max_tokens"] == 24  # the form's value, kept through the EDIT
    final = _series(ui)
    assert final["ended"] is True
    totals = [row for row in document["timeseries"] if row["endpoint"] is None]
    assert [row["t"] for row in final["rows"]] == [row["t"] for row in totals]
    assert document["requests"]["failed"] > 0
    assert sum(row["http_error"] for row in final["rows"]) == document["requests"]["failed"]
    last = final["rows"][-1]
    assert last["partial"] is True  # STOP cut the last interval short
    assert not any(row["partial"] for row in final["rows"][:-1])
    assert last["rate_left_out"] is (last["interval_s"] < 0.5)  # under half an interval: no rate drawn
    driver.get(ui.base + "/?tab=llmload")
    wait(driver, lambda d: "the run ended" in d.find_element("id", "llmload-charts-status").text)
    rate = driver.find_element("css selector", "canvas[data-llmload-chart='Requests/s (succeeded)']")
    ttft = driver.find_element("css selector", "canvas[data-llmload-chart='TTFT (ms)']")
    count = "return Chart.getChart(arguments[0]).data.datasets[0].data.length;"
    left_out = 1 if last["rate_left_out"] else 0
    assert driver.execute_script(count, rate) == len(final["rows"]) - left_out
    assert driver.execute_script(count, ttft) == len(final["rows"])  # latencies show every interval
    title = driver.execute_script("return Chart.getChart(arguments[0]).options.plugins.title.text;", rate)
    assert ("cut at the stop: left out" in title) is bool(left_out)
    driver.get(ui.base + "/?tab=llmload-run")
    wait(driver, lambda d: document["verdict"] in tab_cells(d))

    page = ui.get("/llmload/report.html").decode()
    assert not re.search(r"<(script|link)[^>]+(src|href)=[\"']?https?://", page)
    report = tmp_path / "report.html"
    report.write_text(page)
    driver.get(report.as_uri())
    wait(driver, lambda d: len(d.find_elements("css selector", "canvas")) >= 4)
    height = min(int(driver.execute_script("return document.documentElement.scrollHeight")), 3200)
    driver.set_window_size(1500, height)  # the whole report in one picture (at most 3200 px)
    screenshot(driver, "html-report.png")
