"""The web UI in a real browser (issue 10): Debian's chromium, headless, through chromium-driver and Selenium.

One end-to-end check over ``llmload sim`` with ``--processes 2``: an invalid
llmload value typed in the form is refused with llmload's message under the
form; the corrected form starts a run; the LLM tab's table fills; the run
ends by itself (``--num-requests``) and the LLM run tab shows the verdict;
the Download Data tab links the results JSON, which is the run's. Skips with
the reason when chromium, chromium-driver or Selenium is missing (``.ci/run``
installs them). Screenshots go to ``docs/`` when ``LLMLOAD_SCREENSHOTS=1`` (``make screenshots``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.browser import by_text as _by_text
from tests.integration.browser import chromium
from tests.integration.browser import screenshot as _screenshot
from tests.integration.browser import set_field as _set_field
from tests.integration.browser import tab_cells as _tab_cells
from tests.integration.browser import wait as _wait
from tests.integration.procs import final_results_written
from tests.integration.webui import WebUI, web_ui

pytestmark = pytest.mark.integration


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def test_browser_invalid_value_refused_with_processes_2_then_run_fills_the_llm_tab(
    browser: Any, tmp_path: Path
) -> None:
    results = tmp_path / "r.json"
    with web_ui("--num-requests", "30", "--results-json", str(results), "-u", "4", "-r", "4", workers=2) as ui:
        _run_in_browser(browser, ui, results)


def _run_in_browser(driver: Any, ui: WebUI, results: Path) -> None:
    driver.get(ui.base + "/")
    _by_text(driver, "//*[normalize-space()='Custom parameters']").click()
    _wait(driver, lambda d: d.find_element("name", "maxTokens").is_displayed())  # the form names fields in camelCase
    _set_field(driver, "maxTokens", "abc")
    _by_text(driver, "//button[@type='submit']").click()
    alert = _by_text(driver, "//*[contains(@class,'MuiAlert-message')][contains(., '--max-tokens')]")
    assert "'abc'" in alert.text
    _screenshot(driver, "webui-refused.png")
    assert ui.stats()["state"] == "ready"
    assert not results.exists()

    _set_field(driver, "maxTokens", "8")
    _by_text(driver, "//button[@type='submit']").click()
    _by_text(driver, "//button[@role='tab'][normalize-space()='LLM']").click()
    _wait(driver, lambda d: "llmload-sim" in _tab_cells(d))
    ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the run to end")
    document = json.loads(results.read_text())
    series = json.loads(ui.get("/llmload/timeseries.json"))  # the master's series, merged from both workers
    assert series["ended"] is True
    assert sum(row["succeeded"] for row in series["rows"]) == document["requests"]["succeeded"]
    succeeded = str(document["requests"]["succeeded"])
    _wait(driver, lambda d: succeeded in _tab_cells(d))

    _by_text(driver, "//button[@role='tab'][normalize-space()='LLM run']").click()
    _wait(driver, lambda d: "Verdict" in _tab_cells(d))
    if document["verdict"] not in _tab_cells(driver):  # the page's last poll came before the results
        assert "pending" in " ".join(_tab_cells(driver))
        driver.get(ui.base + "/?tab=llmload-run")
    _wait(driver, lambda d: document["verdict"] in _tab_cells(d))
    _screenshot(driver, "webui-llm-run-tab.png")

    _by_text(driver, "//button[@role='tab'][normalize-space()='Download Data']").click()
    link = _by_text(driver, "//a[contains(., 'llmload results JSON')]")
    assert json.loads(ui.get("/" + link.get_attribute("href").split("/", 3)[3])) == document
    assert document["requests"]["succeeded"] == 30


def test_browser_llm_tab_shows_one_row_per_endpoint_of_a_mixed_locustfile(browser: Any, tmp_path: Path) -> None:
    """Issue 22: chat, responses and embeddings each get a row (inputs/s for embeddings) and a total row."""
    from selenium.webdriver.common.by import By

    results = tmp_path / "r.json"
    args = ("-f", "locustfiles/mixed.py", "--num-requests", "40", "--results-json", str(results), "--max-tokens", "8")
    with web_ui(*args) as ui:
        ui.swarm(user_count="5", spawn_rate="5")
        ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the run to end")
        document = json.loads(results.read_text())
        browser.get(ui.base + "/?tab=llmload")
        _wait(browser, lambda d: "Total" in _tab_cells(d) and "embeddings" in _tab_cells(d))
        headers = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table th")]
        rows = {
            cells[0]: cells
            for row in browser.find_elements(By.CSS_SELECTOR, "table tbody tr")
            if (cells := [cell.text for cell in row.find_elements(By.CSS_SELECTOR, "td")])
        }
    assert {"chat", "responses", "embeddings", "Total"} <= set(rows)
    column = {title: i for i, title in enumerate(headers) if title}
    entries = {e["endpoint"]: e for e in document["by_endpoint"]}
    for endpoint, entry in entries.items():
        assert rows[endpoint][column["Succeeded"]] == str(entry["requests"]["succeeded"])
    assert rows["Total"][column["Succeeded"]] == str(document["requests"]["succeeded"]) == "40"
    assert rows["embeddings"][column["Output tok/s"]] == "n/a"
    assert rows["embeddings"][column["Inputs/s"]] != "n/a"
    assert rows["chat"][column["Inputs/s"]] == "n/a"
