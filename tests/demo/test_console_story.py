"""The console in headless Chromium, following the demo's story against the demo's world as it runs.

The world is the demo's own (`demo.world.open_world` on examples/fleet.json: GKE, EKS and DOKS
emulators, the real bcd in every Node, the control plane served over TLS) and the story is the
demo's own steps 1 to 6, run in order; a browser signed in to the console the control plane serves
watches them. A wrong key is refused; the fleet page, opened before anything exists, sees the three
pools appear and become ready, and later the adopted fourth one; the GKE pool's GPU grid shows the
story's booking and its Spot booking while the story waits for bcd to advertise them; the Spot
reclaim shows the Spot reservation preempted; another tenant's pool is never shown; sign-out ends it.

The story never rushes past the page: a subclass's hooks hold it (the loop stays free to serve the
browser) until the page has shown each pool provisioning and each watched booking, so what the test
asserts does not depend on how fast this machine runs the browser. Every update is live: the page is marked when it loads and still carries the mark, and it fetched no
more fragments than the change events it was handed (nothing polls, nothing reloads). The waits are
on the page's state, with generous bounds for a loaded machine. With BC_CONSOLE_SCREENSHOTS=DIR each
page is saved there at 1280 x 800 (docs/console/ holds the ones docs/console.md shows).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from console_browser import NEEDS_CHROMIUM, counts, instrument, mark, navigate, not_reloaded, open_browser, shot, wait

from better_compute.demo.display import Display, SubstrateRow
from better_compute.demo.story import SPOT_POOL, STEPS, Story
from better_compute.demo.summary import Summary
from better_compute.demo.world import DemoWorld, default_fleet_path, open_world

pytestmark = NEEDS_CHROMIUM
PAGE_S = 60.0
"""How long a page may take to show what the story has already done, on a loaded 2-core machine."""
OTHER_POOL = "globex-secret-pool"
WATCH_FLEET = """
var other = arguments[0], bc = window.__bc;
bc.history = []; bc.states = {}; bc.leaked = false;
function scan() {
  document.querySelectorAll("tr[data-pool]").forEach(function (row) {
    var cell = row.querySelector(".state"), state = cell ? cell.textContent.trim() : "";
    if (bc.states[row.dataset.pool] !== state) {
      bc.states[row.dataset.pool] = state;
      bc.history.push([row.dataset.pool, state]);
    }
  });
  if (document.body.innerHTML.indexOf(other) >= 0) { bc.leaked = true; }
}
scan();
new MutationObserver(scan).observe(document.getElementById("live"), { childList: true, subtree: true });
"""


class WatchedStory(Story):
    """The demo's story, pausing until the browser has shown what it waits for: each booking on the watched
    pool, and (while `on_rows` is set) each pool's substrate first seen provisioning."""

    watched: str = SPOT_POOL
    on_booked: Callable[[str, float], Any] | None = None
    on_rows: Callable[[list[SubstrateRow]], Any] | None = None

    async def substrate_rows(self) -> list[SubstrateRow]:
        rows = await super().substrate_rows()
        if self.on_rows is not None:
            await self.on_rows(rows)
        return rows

    async def advertised_when_booked(self, reservation_id: str) -> dict[str, Any]:
        booked_at = time.monotonic()
        reservation = await self.world.compute.reservations.get(self.tenant, reservation_id)
        pool = await self.world.compute.pools.get(self.tenant, reservation.pool_id)
        if pool.name == self.watched and self.on_booked is not None:
            await self.on_booked(reservation_id, booked_at)
        return await super().advertised_when_booked(reservation_id)


def _rows_ready(driver: Any, count: int) -> bool:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, "tr[data-pool]")
    return len(rows) == count and all(r.find_elements(By.CSS_SELECTOR, ".state-ready") for r in rows)


def _seen(driver: Any, pools: set[str], state: str) -> bool:
    """Whether the page has shown each of `pools` in `state` since it was watched."""
    history: list[list[str]] = driver.execute_script("return window.__bc.history;")
    return pools <= {name for name, shown in history if shown == state}


def _stayed_live(driver: Any) -> None:
    """The page was not reloaded, and fetched only what change events asked for."""
    assert not_reloaded(driver), "the page was loaded again"
    changes, fetches = counts(driver)
    assert 1 <= fetches <= changes, (changes, fetches)


def _became_ready(driver: Any, pools: list[str]) -> None:
    """Each pool was seen on the page in another state before ready (it became ready live)."""
    history: list[list[str]] = driver.execute_script("return window.__bc.history;")
    for pool in pools:
        states = [state for name, state in history if name == pool]
        assert states and states[0] != "ready" and states[-1] == "ready", (pool, states)
    assert not driver.execute_script("return window.__bc.leaked;"), "another tenant's pool was shown"


async def test_the_console_follows_the_demo_story(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    world: DemoWorld = await open_world(default_fleet_path().read_text())
    try:
        _, key = await world.compute.iam.create_api_key(world.tenant_id)
        other = await world.compute.iam.create_tenant("globex")
        site = await world.compute.sites.create(other.id, "k8s", "shared", "ams3")
        await world.compute.pools.create(other.id, OTHER_POOL, site.id, "metal-host", "H100", {"kubernetes": {}})
        base = world.cloud.control_plane.url
        story = WatchedStory(world, Display(None), Summary())
        steps = {number: step for number, _, _, step in STEPS}
        with open_browser(trust_pin=world.cloud.control_plane.pin) as browser:
            instrument(browser)
            await asyncio.to_thread(_sign_in, browser, base, key)

            def watch_fleet() -> None:
                wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[data-live-status]").text == "Live")
                mark(browser)
                browser.execute_script(WATCH_FLEET, OTHER_POOL)

            await asyncio.to_thread(watch_fleet)
            assert "no pools yet" in browser.page_source
            provisioning: set[str] = set()

            async def on_rows(rows: list[SubstrateRow]) -> None:
                """The story waits until the page has shown each pool provisioning (so it cannot rush past)."""
                new = {row[0] for row in rows if row[2] == "provisioning"} - provisioning
                if new:
                    await asyncio.to_thread(wait, browser, lambda d: _seen(d, new, "provisioning"), PAGE_S)
                    provisioning.update(new)

            story.on_rows = on_rows

            # Steps 1 and 2: the fleet applied, clusters made, bcd joined: three pools appear and become ready.
            await steps["1"](story)
            await steps["2"](story)
            first = ["gke-h100", "eks-h100", "doks-h100"]

            def three_ready() -> None:
                wait(browser, lambda d: _rows_ready(d, 3), PAGE_S)
                _became_ready(browser, first)
                _stayed_live(browser)

            await asyncio.to_thread(three_ready)
            story.on_rows = None  # the fleet page is left until step 6

            # Step 3: the story's 8-GPU booking on the GKE pool shows on its GPU grid, live.
            def open_pool() -> None:
                browser.find_element(By.LINK_TEXT, SPOT_POOL).click()
                wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[data-live-status]").text == "Live")
                mark(browser)
                assert not browser.find_elements(By.CSS_SELECTOR, "li[data-kind='booked']")
                drawn = [g.get_attribute("data-state") for g in browser.find_elements(By.CSS_SELECTOR, "g[data-state]")]
                assert drawn == ["provisioning", "ready"], drawn  # the lifecycle, from the decision log

            await asyncio.to_thread(open_pool)
            shown: dict[str, float] = {}

            async def on_booked(reservation_id: str, booked_at: float) -> None:
                kind = (
                    "spot" if (await world.compute.reservations.get(world.tenant_id, reservation_id)).spot else "booked"
                )

                def cells() -> None:
                    wait(
                        browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, f"li[data-kind='{kind}']")) == 8, PAGE_S
                    )
                    shown[kind] = time.monotonic() - booked_at
                    _stayed_live(browser)
                    if kind == "booked":
                        shot(browser, "pool")

                await asyncio.to_thread(cells)

            story.on_booked = on_booked
            await steps["3"](story)
            await steps["4"](story)

            # Step 5: a Spot booking on the GKE pool, then Google reclaims its VM: preempted, its cells gone.
            await steps["5"](story)
            (preempted,) = story.summary.preemptions

            def reclaimed() -> None:
                wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "li[data-kind='spot']"), PAGE_S)
                _stayed_live(browser)
                browser.find_element(By.LINK_TEXT, "Reservations").click()
                row = f"tr[data-reservation='{preempted['reservation']}']"
                text = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, row)).text
                assert "preempted" in text and "yes" in text, text  # Spot, preempted
                shot(browser, "reservations")
                browser.find_element(By.LINK_TEXT, "Fleet").click()
                watch_fleet()

            await asyncio.to_thread(reclaimed)
            story.on_rows = on_rows

            # Step 6: a cluster someone else runs is adopted as a fourth pool, which appears and becomes ready.
            await steps["6"](story)

            def four_ready() -> None:
                wait(browser, lambda d: _rows_ready(d, 4), PAGE_S)
                _became_ready(browser, ["gke-adopted"])
                _stayed_live(browser)
                shot(browser, "fleet")

            await asyncio.to_thread(four_ready)
            await asyncio.to_thread(_other_pages_and_sign_out, browser, base)
    finally:
        await world.close()
    print(f"the booking showed on the GPU grid {shown['booked'] * 1000:.0f} ms after it was made")
    print(f"the Spot booking showed on the GPU grid {shown['spot'] * 1000:.0f} ms after it was made")


def _sign_in(browser: Any, base: str, key: str) -> None:
    """A wrong key is refused with no session; the right one opens the fleet page."""
    from selenium.webdriver.common.by import By

    browser.get(f"{base}/ui/")
    field = wait(browser, lambda d: d.find_element(By.ID, "api_key"))
    field.send_keys("bck_not-a-key")
    field.submit()
    refusal = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]")).text
    assert "was not accepted" in refusal
    assert browser.get_cookie("bc_console") is None
    shot(browser, "sign-in")
    field = browser.find_element(By.ID, "api_key")
    field.send_keys(key)
    field.submit()
    wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "h1").text == "Fleet")
    cookie = browser.get_cookie("bc_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    assert key not in browser.current_url


def _other_pages_and_sign_out(browser: Any, base: str) -> None:
    """The doctor and the decision log (the story's own decisions), another tenant's pool refused, sign-out."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.find_element(By.LINK_TEXT, "Doctor").click()
    wait(browser, lambda d: "doctor found" in d.page_source)
    shot(browser, "doctor")
    browser.find_element(By.LINK_TEXT, "Decision log").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-kind='substrate.state-changed']"))
    shot(browser, "decisions")
    Select(browser.find_element(By.NAME, "kind")).select_by_visible_text("reservation.preempted")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, ".filters button"))  # a GET form: a new page
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-kind='reservation.preempted']"))
    assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-kind='reservation.booked']")
    browser.get(f"{base}/ui/pools/{OTHER_POOL}")
    wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "h1").text == "Not found")
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-gpus]")
    browser.get(f"{base}/ui/")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-pool]"))
    assert OTHER_POOL not in browser.page_source
    browser.find_element(By.CSS_SELECTOR, ".sign-out button").click()
    wait(browser, lambda d: d.find_element(By.ID, "api_key"))
    assert browser.get_cookie("bc_console") is None
    browser.get(f"{base}/ui/")
    wait(browser, lambda d: d.find_element(By.ID, "api_key"))
