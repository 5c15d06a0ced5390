"""Selenium helpers for the web UI's browser tests (Debian's chromium, headless, through chromium-driver)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.integration.test_sim import REPO_ROOT

__all__ = ["WAIT_S", "by_text", "chromium", "screenshot", "set_field", "tab_cells", "wait"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WAIT_S = 60


@contextmanager
def chromium(width: int = 1500, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium driven by Selenium; skips the test with the reason when one is missing."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console, for failure messages
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, condition: Any, timeout_s: float = WAIT_S) -> Any:
    """Poll ``condition(driver)`` until it is truthy (Selenium's ``WebDriverWait``); fail after ``timeout_s``."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s).until(condition)


def by_text(driver: Any, xpath: str) -> Any:
    """The clickable element at ``xpath``, once there."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    return wait(driver, ec.element_to_be_clickable((By.XPATH, xpath)))


def set_field(driver: Any, name: str, value: str) -> None:
    """Replace the text of the form field named ``name`` (the form names fields in camelCase)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = driver.find_element(By.NAME, name)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)
    field.send_keys(value)


def screenshot(driver: Any, name: str) -> None:
    """Save the page as ``docs/<name>`` when ``LLMLOAD_SCREENSHOTS=1`` (``make screenshots``)."""
    if os.environ.get("LLMLOAD_SCREENSHOTS") == "1":
        driver.save_screenshot(str(REPO_ROOT / "docs" / name))


def tab_cells(driver: Any) -> list[str]:
    """The text of every table cell on the page."""
    from selenium.webdriver.common.by import By

    return [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "table td")]
