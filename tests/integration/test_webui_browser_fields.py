"""The web UI in a real browser (issue 24): every bad value at its field, the saturation warning in the LLM tab.

Debian's chromium, headless, through chromium-driver and Selenium, over ``llmload sim``; skips with the
reason when one is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.browser import by_text, chromium, screenshot, set_field, wait
from tests.integration.procs import final_results_written
from tests.integration.webui import web_ui

pytestmark = pytest.mark.integration

BAD = {"maxTokens": "abc", "readTimeout": "-1", "temperature": "hot"}
"""Three invalid values, by the form's (camelCase) field names."""


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _errors(driver: Any) -> dict[str, dict[str, str]]:
    """Each shown field error: its field, its text and the name of the input just before it."""
    found: dict[str, dict[str, str]] = driver.execute_script(
        """
        var out = {};
        document.querySelectorAll('.llmload-field-error').forEach(function (p) {
          var before = p.previousElementSibling;  // the field's help, then the field
          if (before && before.classList.contains('llmload-help')) { before = before.previousElementSibling; }
          var input = before ? before.querySelector('input[name], textarea[name]') : null;
          out[p.getAttribute('data-llmload-field')] = {text: p.textContent, input: input ? input.name : ''};
        });
        return out;
        """
    )
    return found


def test_issue24_browser_three_invalid_values_are_shown_each_at_its_field(browser: Any, tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    with web_ui("--num-requests", "6", "--results-json", str(results), "-u", "2", "-r", "2") as ui:
        browser.get(ui.base + "/")
        by_text(browser, "//*[normalize-space()='Custom parameters']").click()
        wait(browser, lambda d: d.find_element("name", "maxTokens").is_displayed())
        headings = [h.text for h in browser.find_elements("css selector", "h3.llmload-group")]
        assert len(headings) >= 4, headings  # the fields stand under their groups' headings
        for name, value in BAD.items():
            set_field(browser, name, value)
        by_text(browser, "//button[@type='submit']").click()
        wait(browser, lambda d: len(_errors(d)) == 3)
        errors = _errors(browser)
        browser.execute_script("document.querySelector('.llmload-field-error').scrollIntoView({block: 'center'})")
        screenshot(browser, "webui-field-errors.png")
        assert {dest: e["input"] for dest, e in errors.items()} == {
            "max_tokens": "maxTokens",
            "read_timeout": "readTimeout",
            "temperature": "temperature",
        }
        assert "--max-tokens" in errors["max_tokens"]["text"]
        assert "'abc'" in errors["max_tokens"]["text"]
        assert "--read-timeout" in errors["read_timeout"]["text"]
        assert "'hot'" in errors["temperature"]["text"]
        alert = by_text(browser, "//*[contains(@class,'MuiAlert-message')][contains(., '3 invalid options')]")
        assert "--temperature" in alert.text
        assert ui.stats()["state"] == "ready"

        set_field(browser, "maxTokens", "8")
        set_field(browser, "readTimeout", "30")
        set_field(browser, "temperature", "0")
        by_text(browser, "//button[@type='submit']").click()
        ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the corrected run to end")
        assert json.loads(results.read_text())["requests"]["succeeded"] == 6


def test_issue24_browser_saturated_run_shows_the_warning_in_the_llm_tab(browser: Any, tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    locustfile = "tests/integration/busy_loop_chat.py"
    with web_ui(
        "-f", locustfile, "--num-requests", "40", "--results-json", str(results), "-u", "4", "-r", "4",
        "--max-tokens", "32", sim_args=("--decode-step-ms", "2"),
    ) as ui:  # fmt: skip
        browser.get(ui.base + "/")
        by_text(browser, "//button[@type='submit']").click()
        by_text(browser, "//button[@role='tab'][normalize-space()='LLM']").click()
        try:
            box = wait(browser, _warning, 90)
        except Exception as exc:  # say what the page and the process showed, not only "timeout"
            screenshot(browser, "webui-saturated-timeout.png")
            series = json.loads(ui.get("/llmload/timeseries.json"))
            raise AssertionError(
                f"no warning within 90 s: {type(exc).__name__}; url {browser.current_url}; "
                f"state {ui.stats()['state']}; warnings {series['warnings']}; ended {series['ended']}; "
                f"rows {len(series['rows'])}; panel {bool(browser.find_elements('id', 'llmload-charts'))}; "
                f"page {browser.execute_script(_PAGE_STATE)}; console {browser.get_log('browser')[-20:]}"
            ) from exc
        screenshot(browser, "webui-saturated.png")
        assert "Client saturated" in box
        assert "read lag P99" in box
        ui.wait(lambda s: s["state"] == "stopped" and final_results_written(results), "the run to end", 90)
        document = json.loads(results.read_text())
        assert document["client"]["read_lag_saturated"] is True
        assert document["client"]["read_lag_s"]["p99"] > 0.002


_PAGE_STATE = """
return {chart: typeof Chart, table: !!document.querySelector('.MuiTableContainer-root'),
        scripts: Array.from(document.scripts).map(function (s) { return s.src; }),
        tabs: Array.from(document.querySelectorAll("button[role='tab']")).map(function (b) {
          return b.textContent + ':' + b.getAttribute('aria-selected'); }),
        text: document.body.innerText.slice(0, 600)};
"""


def _warning(driver: Any) -> str:
    text: str = driver.execute_script(
        "var b = document.getElementById('llmload-warnings');"
        "return b && b.style.display !== 'none' ? b.textContent : '';"
    )
    return text
