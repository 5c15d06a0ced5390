"""The web UI in a real browser (issue 10): Debian's chromium, headless, through chromium-driver and Selenium.

One end-to-end check over ``llmload sim`` with ``--processes 2``: an invalid
llmload value typed in the form is refused with llmload's message under the
form; the corrected form starts a run; the LLM tab's table fills; the run
ends by itself (``--num-requests``) and the LLM run tab shows the verdict;
the Download Data tab links the results JSON, which is the run's. Skips with
the reason when chromium, chromium-driver or Selenium is missing (``.ci/run``
installs them). Screenshots go to ``docs/`` when ``LLMLOAD_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import final_results_written
from tests.integration.test_sim import REPO_ROOT
from tests.integration.webui import WebUI, web_ui

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WAIT_S = 60


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(condition)


def _by_text(driver: Any, xpath: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    return _wait(driver, ec.element_to_be_clickable((By.XPATH, xpath)))


def _set_field(driver: Any, name: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = driver.find_element(By.NAME, name)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)
    field.send_keys(value)


def _screenshot(driver: Any, name: str) -> None:
    if os.environ.get("LLMLOAD_SCREENSHOTS") == "1":
        driver.save_screenshot(str(REPO_ROOT / "docs" / name))


def _tab_cells(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "table td")]


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
    succeeded = str(document["requests"]["succeeded"])
    _wait(driver, lambda d: succeeded in _tab_cells(d))
    _screenshot(driver, "webui-llm-tab.png")

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
