"""The console in a real browser: headless Chromium (Debian's chromium and chromium-driver) driven by Selenium
against `serve`'s app on a real port. Sign in (a wrong key first), the fleet shows only this tenant's pools, a
booking appears on the pool's GPU grid over /ui/events without a reload, and sign-out ends the session.

With BC_CONSOLE_SCREENSHOTS=DIR it saves each page at 1280 x 800 there (docs/console/ holds the ones
docs/console.md shows). CI installs chromium (.ci/run) and fails here without it; elsewhere it is skipped.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

sys.path.insert(0, str(Path(__file__).parents[1] / "ops"))
from ops_world import SECRET, Seeded, seed

from better_compute.api import create_app
from better_compute.core.clock import SimClock
from better_compute.fleet import fleet_module
from better_compute.server import Compute, better_compute
from better_compute.vps import vps

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INSTALLED = Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()
pytestmark = [
    pytest.mark.chromium,
    pytest.mark.skipif(
        not INSTALLED and os.environ.get("CI") != "true",
        reason="chromium and chromium-driver are not installed (apt-get install chromium chromium-driver; CI has them)",
    ),
]
WAIT_S = 10.0  # the longest any step may take on a loaded machine; the booking's own time is measured below


@dataclass
class Served:
    compute: Compute
    world: Seeded
    key: str
    base: str


@pytest.fixture
async def served(sqlite_template: Path, tmp_path: Path) -> AsyncIterator[Served]:
    shutil.copy(sqlite_template, tmp_path / "console.db")  # one database is enough: the store's tests cover both
    url = f"sqlite:///{tmp_path / 'console.db'}"
    compute = better_compute(database=url, secret=SECRET, modules=[vps(), fleet_module()], clock=SimClock())
    app = create_app(compute)
    async with app.router.lifespan_context(app):
        world = await seed(compute)
        other = await compute.iam.create_tenant("globex")
        site = await compute.sites.create(other.id, "k8s", "shared", "ams3")
        await compute.pools.create(other.id, "globex-secret-pool", site.id, "metal-host", "H100", {"kubernetes": {}})
        _, key = await compute.iam.create_api_key(world.tenant_id)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)  # a browser that connects before uvicorn accepts waits in the backlog
        server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            yield Served(compute, world, key, f"http://127.0.0.1:{sock.getsockname()[1]}")
        finally:
            server.should_exit = True
            await serving
            sock.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_window_size(1280, 800)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: Any, name: str) -> None:
    target = os.environ.get("BC_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(target) / f"{name}.png"))


def _wait(driver: Any, until: Callable[[Any], Any]) -> Any:
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.02).until(until)


async def test_sign_in_see_a_booking_live_and_sign_out(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    def sign_in(key: str) -> None:
        browser.get(f"{served.base}/ui/")
        field = _wait(browser, lambda d: d.find_element(By.ID, "api_key"))
        field.send_keys(key)
        field.submit()

    def refused() -> str:
        sign_in("bck_not-a-key")
        text: str = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]")).text
        assert browser.get_cookie("bc_console") is None
        _shot(browser, "sign-in")
        return text

    assert "was not accepted" in await asyncio.to_thread(refused)

    def fleet() -> str:
        sign_in(served.key)
        _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-pool='gpu-fleet']"))
        cookie = browser.get_cookie("bc_console")
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict"
        assert served.key not in browser.current_url
        assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script reads it
        _shot(browser, "fleet")
        return str(browser.page_source)

    page = await asyncio.to_thread(fleet)
    assert "globex-secret-pool" not in page

    def pool_live() -> None:
        browser.find_element(By.LINK_TEXT, "gpu-fleet").click()
        _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[data-live-status]").text == "Live")
        assert not browser.find_elements(By.CSS_SELECTOR, "li[data-kind='booked']")

    await asyncio.to_thread(pool_live)
    booked_at = time.monotonic()
    await served.compute.reservations.create(served.world.tenant_id, served.world.pool_id, 1)

    def booking_shows() -> float:
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "li[data-kind='booked']"))
        seen = time.monotonic() - booked_at
        assert browser.find_element(By.CSS_SELECTOR, "[data-live-status]").text.startswith("Updated")
        _shot(browser, "pool")
        return seen

    seen = await asyncio.to_thread(booking_shows)
    print(f"the booking showed on the GPU grid {seen * 1000:.0f} ms after it was made")
    # The page took it from /ui/events ("Updated", no reload). How soon is a figure, not an assertion (the
    # house rule: no wall-clock limits in tests, where CI's load decides them): BENCHMARKS.md records it.
    assert seen < WAIT_S

    def other_pages() -> None:
        browser.find_element(By.LINK_TEXT, "Reservations").click()
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-reservation]"))
        _shot(browser, "reservations")
        browser.find_element(By.LINK_TEXT, "Doctor").click()
        _wait(browser, lambda d: "doctor found" in d.page_source)
        _shot(browser, "doctor")

    await asyncio.to_thread(other_pages)

    def sign_out() -> None:
        browser.find_element(By.CSS_SELECTOR, ".sign-out button").click()
        _wait(browser, lambda d: d.find_element(By.ID, "api_key"))
        assert browser.get_cookie("bc_console") is None
        browser.get(f"{served.base}/ui/")
        _wait(browser, lambda d: d.find_element(By.ID, "api_key"))

    await asyncio.to_thread(sign_out)
