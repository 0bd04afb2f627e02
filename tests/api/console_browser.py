"""Headless Chromium for the console's browser tests: Debian's chromium and chromium-driver through Selenium.

`open_browser()` starts it at 1280 x 800 (trusting one TLS key by its SPKI pin when given: the demo's
control plane serves https under a private CA); `instrument()` makes every page it then loads count
what the live script does, so a test can tell a live update from a reload or a poll:

- `window.__bc.changes`: `change` events the page's own EventSource handed its listener;
- `window.__bc.fetches`: every fetch the page made (the live fragments);
- `window.__bc.hold = true`: fetches are answered, then held until `window.__bc.release()`.

A page loaded again starts a fresh `window.__bc` (and loses `mark()`'s marker), so `not_reloaded()`
after `mark()` says the page stayed. Nothing here is fetched from the network.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INSTALLED = Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()
NEEDS_CHROMIUM = [
    pytest.mark.chromium,
    pytest.mark.skipif(
        not INSTALLED and os.environ.get("CI") != "true",
        reason="chromium and chromium-driver are not installed (apt-get install chromium chromium-driver; CI has them)",
    ),
]
WAIT_S = 10.0
"""The longest a page step may take on a loaded machine (a generous bound, not a measurement)."""

_INSTRUMENT = """
(function () {
  var bc = window.__bc = { changes: 0, fetches: [], hold: false, held: [] };
  bc.release = function () { var held = bc.held; bc.held = []; held.forEach(function (go) { go(); }); };
  var add = EventSource.prototype.addEventListener;
  EventSource.prototype.addEventListener = function (type, listener, options) {
    var counted = listener;
    if (type === "change") { counted = function (event) { bc.changes += 1; return listener.call(this, event); }; }
    return add.call(this, type, counted, options);
  };
  var realFetch = window.fetch;
  window.fetch = function (url, init) {
    bc.fetches.push(String(url));
    var answer = realFetch.call(this, url, init);
    if (!bc.hold) { return answer; }
    return answer.then(function (response) {
      return response.text().then(function (body) {
        return new Promise(function (resolve) {
          bc.held.push(function () { resolve(new Response(body, { status: response.status })); });
        });
      });
    });
  };
}());
"""


@contextmanager
def open_browser(*, trust_pin: str | None = None) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800"):
        options.add_argument(flag)
    if trust_pin is not None:  # this one key only ("sha256/<base64>", as bcd pins it), not every certificate
        options.add_argument(f"--ignore-certificate-errors-spki-list={trust_pin.removeprefix('sha256/')}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    # The page's viewport itself at 1280 x 800 (a window of that size leaves less to the page).
    metrics = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        yield driver
    finally:
        driver.quit()


def instrument(driver: Any) -> None:
    """Count, on every page loaded from now on, its live events and fetches (see the module docstring)."""
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _INSTRUMENT})


def mark(driver: Any) -> None:
    """Mark the page loaded now; `not_reloaded` is true while the same page stays."""
    driver.execute_script("window.__bcMarked = true;")


def not_reloaded(driver: Any) -> bool:
    return bool(driver.execute_script("return window.__bcMarked === true;"))


def counts(driver: Any) -> tuple[int, int]:
    """(change events the page's listener took, fetches the page made) since it loaded."""
    changes, fetches = driver.execute_script("return [window.__bc.changes, window.__bc.fetches.length];")
    return int(changes), int(fetches)


def wait(driver: Any, until: Callable[[Any], Any], timeout: float = WAIT_S) -> Any:
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.02).until(until)


def navigate(driver: Any, element: Any) -> None:
    """Click `element` and wait until the page it leads to has replaced this one: until then, a wait for what
    the next page shows may be met by this page's own rows, which are still there."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    wait(driver, staleness_of(page))


def shot(driver: Any, name: str) -> None:
    """With BC_CONSOLE_SCREENSHOTS=DIR, save the page as it is now (1280 x 800) there."""
    target = os.environ.get("BC_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(target) / f"{name}.png"))
