"""A substrate's state changes reach the web console live, and its lifecycle is drawn from the decision log.

A FleetConfig document applied for DOKS; the console of the control plane the Cloud serves (real
uvicorn over TLS, real httpx) is signed in to, and its /ui/events stream is read while the substrate
goes provisioning -> ready and, after a prune, deleting -> deleted. Each state change is a
`substrate.state-changed` event in GET /v1/events, the stream names the pool's id when its state
changes (never another tenant's), and the pool page's timeline draws the recorded states.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from e2e_world import World

from better_compute.core.errors import ComputeError

EMPTY = {"version": 1, "sites": [], "providerAccounts": [], "pools": []}


async def _ready(world: World) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except ComputeError:
        return False
    return view.state == "ready" and bool(view.nodes_listed) and view.nodes_listed == view.nodes_joined


@asynccontextmanager
async def _console(world: World, key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-like client signed in to the console the control plane serves."""
    trust = ssl.create_default_context(cadata=world.cloud.control_plane.ca_pem)
    async with httpx.AsyncClient(base_url=world.cloud.control_plane.url, verify=trust, timeout=30) as client:
        form = (await client.get("/ui/sign-in")).text
        csrf = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        signed_in = await client.post("/ui/sign-in", data={"api_key": key, "csrf": csrf})
        assert signed_in.status_code == 303, signed_in.text
        yield client


async def _read_events(client: httpx.AsyncClient, into: list[dict[str, Any]], opened: asyncio.Event) -> None:
    async with client.stream("GET", "/ui/events") as stream:
        assert stream.status_code == 200
        async for line in stream.aiter_lines():
            opened.set()
            if line.startswith("data: "):
                into.append(json.loads(line.removeprefix("data: ")))


async def test_substrate_state_changes_reach_the_console_live_and_draw_its_lifecycle(world: World) -> None:
    _, key = await world.compute.iam.create_api_key(world.tenant_id)
    globex = await world.compute.iam.create_tenant("globex")
    _, globex_key = await world.compute.iam.create_api_key(globex.id)
    async with _console(world, key) as console, _console(world, globex_key) as other:
        seen: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        opened, other_opened = asyncio.Event(), asyncio.Event()
        readers = [
            asyncio.create_task(_read_events(console, seen, opened)),
            asyncio.create_task(_read_events(other, theirs, other_opened)),
        ]
        try:
            await asyncio.wait_for(asyncio.gather(opened.wait(), other_opened.wait()), 30)  # subscribed
            await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
            await world.until(lambda: _ready(world), minutes=60, what="the DOKS substrate ready, its Nodes joined")
            pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")

            await asyncio.wait_for(_named(seen, pool.id), 30)
            fleet = (await console.get("/ui/", params={"fragment": "1"})).text  # what the page's script fetches
            assert "state-ready" in fleet, fleet
            api = await console.get(
                "/v1/events",
                params={"pool": "gpu-fleet", "kind": "substrate.state-changed"},
                headers={"Authorization": f"Bearer {key}"},
            )
            changes = [(e["details"]["from"], e["details"]["to"]) for e in api.json()["events"]]
            assert changes == [(None, "provisioning"), ("provisioning", "ready")], changes
            page = (await console.get("/ui/pools/gpu-fleet")).text
            drawn = [part.split('"', 1)[0] for part in page.split('data-state="')[1:]]
            assert drawn == ["provisioning", "ready"]
            assert "The substrate was provisioning, then ready (now ready)." in page

            seen.clear()
            await world.compute.fleet.apply(EMPTY, tenant_id=world.tenant_id, prune=True)

            async def archived() -> bool:
                return await world.compute.pools.list(world.tenant_id) == []

            await world.until(archived, minutes=120, what="the pool archived, its cluster torn down")
            await asyncio.wait_for(_named(seen, pool.id), 30)
            api = await console.get(
                "/v1/events", params={"kind": "substrate.state-changed"}, headers={"Authorization": f"Bearer {key}"}
            )
            states = [e["details"]["to"] for e in api.json()["events"]]
            assert states == ["provisioning", "ready", "deleting", "deleted"], states
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    assert theirs == [], "another tenant's stream never tells of this tenant's changes"


async def _named(seen: list[dict[str, Any]], pool_id: str) -> None:
    """Until the stream has named the pool (real time: the event arrives as soon as the change commits)."""
    while not any(pool_id in e["pools"] for e in seen):
        await asyncio.sleep(0.01)
