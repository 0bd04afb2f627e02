"""The web console at /ui: sign-in, the session cookie, tenant scoping, the pages, SSE and sign-out (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "ops"))
from ops_world import SECRET, Seeded, seed

from better_compute.api import create_app
from better_compute.api.console.session import COOKIE, SIGN_IN_COOKIE
from better_compute.api.console.views import join_warning
from better_compute.compute.changes import mark_pools_changed
from better_compute.compute.nodes import update_inventory
from better_compute.core.clock import SimClock
from better_compute.decisions import Decision, Kind, record
from better_compute.fleet import fleet_module
from better_compute.ops.events import DEFAULT_LIMIT
from better_compute.server import Compute, better_compute
from better_compute.store import Database
from better_compute.vps import vps


@dataclass
class Console:
    compute: Compute
    app: Any
    client: httpx.AsyncClient
    world: Seeded
    key: str
    clock: SimClock

    async def sign_in(self, key: str | None = None, base: str = "") -> httpx.Response:
        """Sign in as a browser does: fetch the form (its pre-session cookie and token), then post it."""
        form = await self.client.get(f"{base}/ui/sign-in")
        return await self.client.post(f"{base}/ui/sign-in", data={"api_key": key or self.key, "csrf": _csrf(form.text)})


def _csrf(page: str) -> str:
    return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]


@pytest.fixture
async def console(database: Database, database_url: str) -> AsyncIterator[Console]:
    clock = SimClock()
    compute = better_compute(database=database_url, secret=SECRET, modules=[vps(), fleet_module()], clock=clock)
    app = create_app(compute)
    async with app.router.lifespan_context(app):
        world = await seed(compute)
        _, key = await compute.iam.create_api_key(world.tenant_id)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            yield Console(compute, app, client, world, key, clock)


async def test_sign_in_sets_a_strict_httponly_cookie_without_the_key(console: Console) -> None:
    response = await console.sign_in()
    assert (response.status_code, response.headers["location"]) == (303, "/ui/")
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "path", "max-age"} <= attributes
    assert "samesite=strict" in cookie.lower()
    assert "secure" not in attributes  # plain http here; https below
    assert console.key not in cookie
    assert console.key not in response.headers.get("location", "")
    fleet = await console.client.get("/ui/")
    assert fleet.status_code == 200
    assert "gpu-fleet" in fleet.text


async def test_sign_in_over_https_marks_the_cookie_secure(console: Console) -> None:
    response = await console.sign_in(base="https://console")
    assert response.status_code == 303
    session = next(c for c in response.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}="))
    attributes = {part.strip().lower() for part in session.split(";")[1:]}
    assert "secure" in attributes


async def test_a_wrong_key_is_401_and_sets_nothing(console: Console) -> None:
    for key in ("bck_nope", "not even a key"):
        response = await console.sign_in(key)
        assert response.status_code == 401
        assert not any(c.startswith(f"{COOKIE}=") for c in response.headers.get_list("set-cookie"))
        assert "was not accepted" in response.text
        assert key not in response.text
    empty = await console.sign_in(" ")
    assert empty.status_code == 401
    assert not any(c.startswith(f"{COOKIE}=") for c in empty.headers.get_list("set-cookie"))
    assert COOKIE not in console.client.cookies
    page = await console.client.get("/ui/")
    assert (page.status_code, page.headers["location"]) == (303, "/ui/sign-in")


async def test_a_sign_in_posted_from_elsewhere_signs_no_one_in(console: Console) -> None:
    """Login CSRF: a foreign page's form post carries neither the pre-session cookie (SameSite=Strict)
    nor its token; a token from another browser's form does not match this browser's cookie."""
    bare = await console.client.post("/ui/sign-in", data={"api_key": console.key})
    assert bare.status_code == 403
    assert COOKIE not in console.client.cookies
    assert "sign in again" in bare.text
    form = await console.client.get("/ui/sign-in")
    assert SIGN_IN_COOKIE in console.client.cookies
    assert "samesite=strict" in form.headers["set-cookie"].lower()
    assert "httponly" in form.headers["set-cookie"].lower()
    token = _csrf(form.text)
    console.client.cookies.clear()  # another browser, or the attacker's page: no pre-session cookie
    foreign = await console.client.post("/ui/sign-in", data={"api_key": console.key, "csrf": token})
    assert foreign.status_code == 403
    console.client.cookies.set(SIGN_IN_COOKIE, "A" * 22, path="/ui")  # a cookie the token was not made for
    mismatched = await console.client.post("/ui/sign-in", data={"api_key": console.key, "csrf": token})
    assert mismatched.status_code == 403
    assert COOKIE not in console.client.cookies
    console.client.cookies.clear()
    signed_in = await console.sign_in()
    assert signed_in.status_code == 303
    assert SIGN_IN_COOKIE not in console.client.cookies  # spent with the sign-in
    assert (await console.client.get("/ui/")).status_code == 200


async def test_a_forged_or_revoked_session_is_refused(console: Console) -> None:
    console.client.cookies.set(COOKIE, "eyJ0IjoiYSJ9.AAAA", path="/ui")
    assert (await console.client.get("/ui/")).status_code == 303
    console.client.cookies.clear()
    await console.sign_in()
    assert (await console.client.get("/ui/")).status_code == 200
    (key,) = await console.compute.iam.list_api_keys(console.world.tenant_id)
    await console.compute.iam.revoke_api_key(console.world.tenant_id, key.id)
    assert (await console.client.get("/ui/")).status_code == 303


async def test_pages_show_only_the_callers_tenant(console: Console) -> None:
    other = await console.compute.iam.create_tenant("globex")
    site = await console.compute.sites.create(other.id, "k8s", "shared", "ams3")
    await console.compute.pools.create(
        other.id, "globex-secret-pool", site.id, "metal-host", "H100", {"kubernetes": {}}
    )
    _, other_key = await console.compute.iam.create_api_key(other.id)
    await console.sign_in()
    for path in ("/ui/", "/ui/reservations", "/ui/doctor", "/ui/pools/gpu-fleet"):
        page = await console.client.get(path)
        assert page.status_code == 200, path
        assert "globex-secret-pool" not in page.text, path
    assert (await console.client.get("/ui/pools/globex-secret-pool")).status_code == 404
    console.client.cookies.clear()
    await console.sign_in(other_key)
    theirs = await console.client.get("/ui/")
    assert "globex-secret-pool" in theirs.text
    assert "gpu-fleet" not in theirs.text
    assert (await console.client.get("/ui/pools/gpu-fleet")).status_code == 404


async def test_the_pool_page_draws_a_gpu_grid_with_bookings(console: Console) -> None:
    await console.compute.reservations.create(console.world.tenant_id, console.world.pool_id, 1)
    await console.sign_in()
    page = await console.client.get("/ui/pools/gpu-fleet")
    assert page.status_code == 200
    assert page.text.count('data-kind="booked"') == 1
    assert page.text.count('data-kind="free"') == 3  # two Nodes of two GPUs each
    fragment = await console.client.get("/ui/pools/gpu-fleet", params={"fragment": "1"})
    assert "<html" not in fragment.text
    assert fragment.text.count('data-kind="booked"') == 1
    reservations = await console.client.get("/ui/reservations")
    assert "node-a" in reservations.text or "node-b" in reservations.text


async def test_sign_out_needs_the_csrf_token_and_clears_the_session(console: Console) -> None:
    await console.sign_in()
    stale = await console.client.post("/ui/sign-out", data={"csrf": "guessed"})
    assert stale.status_code == 403
    assert (await console.client.get("/ui/")).status_code == 200
    page = (await console.client.get("/ui/")).text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    out = await console.client.post("/ui/sign-out", data={"csrf": csrf})
    assert (out.status_code, out.headers["location"]) == (303, "/ui/sign-in")
    assert COOKIE not in console.client.cookies
    assert (await console.client.get("/ui/")).status_code == 303


async def _first_event(app: Any, cookie: str, make_change: Any) -> bytes:
    """Drive /ui/events as a browser would (httpx's ASGI transport waits for a whole response, and a
    stream never ends): read until the first event after `make_change`, then disconnect."""
    sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    disconnect = asyncio.Event()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/ui/events",
        "raw_path": b"/ui/events",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"console"), (b"cookie", f"{COOKIE}={cookie}".encode())],
        "client": ("127.0.0.1", 1),
        "server": ("console", 80),
        "state": {},
    }
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        await sent.put(message)

    task = asyncio.create_task(app(scope, receive, send))
    try:
        async with asyncio.timeout(10):
            start = await sent.get()
            assert start["status"] == 200
            assert dict(start["headers"])[b"content-type"].startswith(b"text/event-stream")
            assert (await sent.get())["body"] == b"retry: 2000\n\n"  # subscribed: the change below is seen
            await make_change()
            return bytes((await sent.get())["body"])
    finally:
        disconnect.set()
        async with asyncio.timeout(10):
            await task


async def test_events_stream_a_change_when_a_reservation_is_made(console: Console) -> None:
    await console.sign_in()
    cookie = console.client.cookies[COOKIE]
    made: list[str] = []

    async def book() -> None:
        reservation = await console.compute.reservations.create(console.world.tenant_id, console.world.pool_id, 1)
        made.append(str(reservation.node_id))

    body = await _first_event(console.app, cookie, book)
    assert body.startswith(b"event: change\ndata: ")
    assert made[0].encode() in body


async def test_events_stream_a_pools_change_of_the_tenant_and_never_another_tenants(console: Console) -> None:
    """A module's pool report (a substrate's state, say) is streamed by pool id, cut to the signed-in tenant."""
    other = await console.compute.iam.create_tenant("globex")
    site = await console.compute.sites.create(other.id, "k8s", "shared", "ams3")
    theirs = await console.compute.pools.create(other.id, "globex-pool", site.id, "metal-host", "H100", {})
    await console.sign_in()

    async def reported() -> None:
        for pool_id in (theirs.id, console.world.pool_id):
            async with console.compute.feed.transaction() as session:
                mark_pools_changed(session, [pool_id])

    body = await _first_event(console.app, console.client.cookies[COOKIE], reported)
    assert body == f'event: change\ndata: {{"nodes": [], "pools": ["{console.world.pool_id}"]}}\n\n'.encode()


async def test_events_need_a_session(console: Console) -> None:
    response = await console.client.get("/ui/events")
    assert response.status_code == 401


async def test_a_sign_in_form_body_is_not_read_as_json_but_is_held_to_its_limit(console: Console) -> None:
    big = await console.client.post("/ui/sign-in", data={"api_key": "x" * 20_000})
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "INVALID_INPUT"


async def test_a_gpu_reported_unhealthy_shows_degraded_on_the_grid_and_the_fleet(console: Console) -> None:
    reservation = await console.compute.reservations.create(console.world.tenant_id, console.world.pool_id, 2)
    name = "node-a" if reservation.node_id == console.world.node_ids[0] else "node-b"
    gpus: list[dict[str, Any]] = [
        {"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 80GB HBM3"} for i in range(2)
    ]
    gpus[0]["health"] = {"healthy": False, "reason": "xid", "xid": 79}
    async with console.compute.reservations.transaction() as session:
        inventory = {"os": {"hostname": name, "kubernetesNodeName": name}, "gpus": gpus}
        await update_inventory(session, str(reservation.node_id), inventory, console.clock.now())
    await console.sign_in()
    pool = (await console.client.get("/ui/pools/gpu-fleet")).text
    kinds = [k for k in ("degraded", "booked", "free") for _ in range(pool.count(f'data-kind="{k}"'))]
    assert kinds == ["degraded", "booked", "free", "free"]
    fleet = (await console.client.get("/ui/")).text
    assert "<td data-gpus-degraded>1</td>" in fleet
    assert "<td data-gpus-booked>2</td>" in fleet
    assert "XID 79" in (await console.client.get("/ui/reservations")).text


def test_the_join_warning_shows_from_15_minutes_of_waiting() -> None:
    since = datetime(2026, 1, 1, tzinfo=UTC)
    waiting = {"waitingToJoin": {"count": 2, "since": since.isoformat()}}
    assert not join_warning(waiting, since + timedelta(minutes=14, seconds=59))
    assert join_warning(waiting, since + timedelta(minutes=15))
    assert not join_warning({"waitingToJoin": {"count": 0, "since": None}}, since + timedelta(hours=1))
    assert not join_warning(None, since)


async def _decide(console: Console, *decisions: Decision) -> None:
    """Record decisions as the code that makes them does (decisions.record in its own transaction)."""
    async with console.compute.db.transaction() as session:
        await record(session, console.clock.now(), *decisions)


async def test_the_decision_log_page_shows_what_get_v1_events_answers_for_the_tenant(console: Console) -> None:
    tenant, pool, node = console.world.tenant_id, console.world.pool_id, console.world.node_ids[0]
    await _decide(
        console,
        Decision(Kind.BOOKED, tenant, "the freest node", pool_id=pool, node_id=node, reservation_id="res_1"),
        Decision(Kind.RELEASED, tenant, "the tenant gave the GPUs back", pool_id=pool, reservation_id="res_1"),
    )
    other = await console.compute.iam.create_tenant("globex")
    await _decide(console, Decision(Kind.RETIRED, other.id, "globex-secret-retirement"))
    await console.sign_in()
    page = await console.client.get("/ui/decisions")
    assert page.status_code == 200
    api = await console.client.get("/v1/events", headers={"Authorization": f"Bearer {console.key}"})
    assert [e["kind"] for e in api.json()["events"]][-2:] == ["reservation.booked", "reservation.released"]
    assert _event_ids(page.text) == [e["id"] for e in api.json()["events"]]
    assert "globex-secret-retirement" not in page.text
    assert "the freest node" in page.text
    assert '<a href="/ui/pools/gpu-fleet">gpu-fleet</a>' in page.text
    released = await console.client.get("/ui/decisions", params={"kind": "reservation.released", "pool": "gpu-fleet"})
    assert len(_event_ids(released.text)) == 1
    assert 'data-kind="reservation.released"' in released.text
    assert "<option selected>reservation.released</option>" in released.text  # the form keeps its filters
    assert 'aria-current="page">Decision log' in released.text
    fragment = await console.client.get("/ui/decisions", params={"kind": "reservation.released", "fragment": "1"})
    assert "<html" not in fragment.text
    assert "<form" not in fragment.text  # a live refresh never replaces the filters being typed in
    assert len(_event_ids(fragment.text)) == 1


def _event_ids(page: str) -> list[str]:
    return [line.split('"', 1)[0] for line in page.split('data-event="')[1:]]


async def test_the_decision_log_pages_on_with_the_apis_cursor(console: Console) -> None:
    tenant = console.world.tenant_id
    await _decide(console, *(Decision(Kind.CORDONED, tenant, f"cordon {i}") for i in range(DEFAULT_LIMIT + 1)))
    await console.sign_in()
    first = await console.client.get("/ui/decisions", params={"kind": "node.cordoned"})
    assert len(_event_ids(first.text)) == DEFAULT_LIMIT
    after = first.text.split('" rel="next"', 1)[0].rsplit('<a href="/ui/decisions?', 1)[1].replace("&amp;", "&")
    assert "kind=node.cordoned" in after
    second = await console.client.get(f"/ui/decisions?{after}")
    assert _event_ids(second.text) != [] and 'rel="next"' not in second.text
    api = await console.client.get(
        "/v1/events",
        params={"kind": "node.cordoned", "limit": 1000},
        headers={"Authorization": f"Bearer {console.key}"},
    )
    assert _event_ids(first.text) + _event_ids(second.text) == [e["id"] for e in api.json()["events"]]


async def test_the_decision_log_refuses_bad_filters_naming_the_field(console: Console) -> None:
    await console.sign_in()
    for params, field in (({"since": "last tuesday"}, "since"), ({"kind": "node.exploded"}, "kind")):
        page = await console.client.get("/ui/decisions", params=params)
        assert page.status_code == 400, params
        assert f"<code>/{field}</code>" in page.text
        assert 'aria-invalid="true"' in page.text
        assert 'role="alert"' in page.text
        assert "Traceback" not in page.text
    foreign = await console.client.get("/ui/decisions", params={"cursor": "not-a-cursor"})
    assert foreign.status_code == 400
    assert "<code>/cursor</code>" in foreign.text
