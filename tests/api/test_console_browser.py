"""The console in a real browser: headless Chromium (Debian's chromium and chromium-driver) driven by Selenium
against `serve`'s app on a real port. Sign in (a wrong key first), the fleet shows only this tenant's pools, a
booking appears on the pool's GPU grid over /ui/events without a reload, and sign-out ends the session; a
change that lands while the page's fetch is on its way is fetched once more.

The story against the demo's world, and the screenshots docs/console.md shows, are
tests/demo/test_console_story.py. CI installs chromium (.ci/run) and fails here without it; elsewhere it is skipped.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

sys.path.insert(0, str(Path(__file__).parents[1] / "ops"))
sys.path.insert(0, str(Path(__file__).parent))
from console_browser import NEEDS_CHROMIUM, WAIT_S, counts, instrument, mark, navigate, not_reloaded, open_browser, wait
from ops_world import SECRET, Seeded, seed

from better_compute.api import create_app
from better_compute.core.clock import SimClock
from better_compute.fleet import fleet_module
from better_compute.server import Compute, better_compute
from better_compute.vps import vps

pytestmark = NEEDS_CHROMIUM


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
    with open_browser() as driver:
        instrument(driver)
        yield driver


async def test_sign_in_see_a_booking_live_and_sign_out(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    def sign_in(key: str) -> None:
        browser.get(f"{served.base}/ui/")
        field = wait(browser, lambda d: d.find_element(By.ID, "api_key"))
        field.send_keys(key)
        field.submit()

    def refused() -> str:
        sign_in("bck_not-a-key")
        text: str = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]")).text
        assert browser.get_cookie("bc_console") is None
        return text

    assert "was not accepted" in await asyncio.to_thread(refused)

    def fleet() -> str:
        sign_in(served.key)
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-pool='gpu-fleet']"))
        cookie = browser.get_cookie("bc_console")
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict"
        assert served.key not in browser.current_url
        assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script reads it
        return str(browser.page_source)

    page = await asyncio.to_thread(fleet)
    assert "globex-secret-pool" not in page

    def pool_live() -> None:
        navigate(browser, browser.find_element(By.LINK_TEXT, "gpu-fleet"))  # the fleet page says "Live" too
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[data-live-status]").text == "Live")
        mark(browser)
        assert not browser.find_elements(By.CSS_SELECTOR, "li[data-kind='booked']")

    await asyncio.to_thread(pool_live)
    booked_at = time.monotonic()
    await served.compute.reservations.create(served.world.tenant_id, served.world.pool_id, 1)

    def booking_shows() -> float:
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "li[data-kind='booked']"))
        seen = time.monotonic() - booked_at
        assert browser.find_element(By.CSS_SELECTOR, "[data-live-status]").text.startswith("Updated")
        assert not_reloaded(browser)
        changes, fetches = counts(browser)
        assert 1 <= fetches <= changes  # each fetch answered a change: nothing polls
        return seen

    seen = await asyncio.to_thread(booking_shows)
    print(f"the booking showed on the GPU grid {seen * 1000:.0f} ms after it was made")
    # The page took it from /ui/events ("Updated", no reload). How soon is a figure, not an assertion (the
    # house rule: no wall-clock limits in tests, where CI's load decides them): BENCHMARKS.md records it.
    assert seen < WAIT_S

    def other_pages() -> None:
        browser.find_element(By.LINK_TEXT, "Reservations").click()
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-reservation]"))
        browser.find_element(By.LINK_TEXT, "Doctor").click()
        wait(browser, lambda d: "doctor found" in d.page_source)

    await asyncio.to_thread(other_pages)

    def sign_out() -> None:
        browser.find_element(By.CSS_SELECTOR, ".sign-out button").click()
        wait(browser, lambda d: d.find_element(By.ID, "api_key"))
        assert browser.get_cookie("bc_console") is None
        browser.get(f"{served.base}/ui/")
        wait(browser, lambda d: d.find_element(By.ID, "api_key"))

    await asyncio.to_thread(sign_out)


async def test_a_change_during_the_pages_fetch_is_fetched_once_more(served: Served, browser: Any) -> None:
    """The page's fetch for one change is answered, then held; a second change arrives meanwhile. Once the
    held answer lands the page shows the second booking too (it took one booking only, and stayed so, before)."""
    from selenium.webdriver.common.by import By

    def open_pool() -> None:
        browser.get(f"{served.base}/ui/sign-in")
        field = wait(browser, lambda d: d.find_element(By.ID, "api_key"))
        field.send_keys(served.key)
        field.submit()
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-pool='gpu-fleet']"))
        browser.get(f"{served.base}/ui/pools/gpu-fleet")
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[data-live-status]").text == "Live")
        browser.execute_script("window.__bc.hold = true;")

    def booked_cells() -> int:
        return len(browser.find_elements(By.CSS_SELECTOR, "li[data-kind='booked']"))

    await asyncio.to_thread(open_pool)
    tenant, pool = served.world.tenant_id, served.world.pool_id
    await served.compute.reservations.create(tenant, pool, 1)
    await asyncio.to_thread(wait, browser, lambda d: d.execute_script("return window.__bc.held.length") == 1)
    await served.compute.reservations.create(tenant, pool, 1)  # after the held fetch was answered
    await asyncio.to_thread(wait, browser, lambda d: counts(d)[0] == 2)  # the page's listener took it
    browser.execute_script("window.__bc.hold = false; window.__bc.release();")
    await asyncio.to_thread(wait, browser, lambda d: booked_cells() == 2)
    assert counts(browser) == (2, 2)


async def test_the_decision_log_filters_are_reached_by_keyboard_with_a_visible_focus(
    served: Served, browser: Any
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def tab_to_the_filters() -> list[str]:
        browser.get(f"{served.base}/ui/sign-in")
        field = wait(browser, lambda d: d.find_element(By.ID, "api_key"))
        field.send_keys(served.key)
        field.submit()
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-pool='gpu-fleet']"))
        browser.find_element(By.LINK_TEXT, "Decision log").click()
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "h1").text == "Decision log")
        outlines = []
        for _ in range(20):  # from the top of the page: the skip link, the navigation, sign-out, the filters
            ActionChains(browser).send_keys(Keys.TAB).perform()
            focused = browser.switch_to.active_element
            if focused.get_attribute("name") in ("pool", "kind", "since"):
                outlines.append(browser.execute_script("return getComputedStyle(arguments[0]).outlineStyle;", focused))
            if focused.get_attribute("name") == "since":
                break
        return outlines

    assert await asyncio.to_thread(tab_to_the_filters) == ["solid", "solid", "solid"]
