"""A node's first gateway session wakes its substrate: `ready` with every Node joined follows in seconds.

The gateway is held so that the Nodes join (their join wakes the substrate, which then
finds none of them connected) while their sessions wait; once every session is open,
the substrate counts them joined within a few simulated seconds, in one run, rather than
at its next watch a minute later.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from e2e_world import World
from sqlalchemy import select

from better_compute.kubernetes.substrates.admission import JOIN_SETTLE, SESSION_SETTLE
from better_compute.kubernetes.substrates.reconciler import WATCH_SECONDS, SubstratesReconciler
from better_compute.kubernetes.tables import SubstrateRow

NODES = 3
COARSE = 30.0
"""How far (simulated seconds) a step may go while no droplet is due: the cluster takes 6 minutes, a node 3."""


async def recorded(world: World) -> SubstrateRow:
    """The substrate's row: what its last run counted (the view counts joined Nodes live)."""
    async with world.compute.db.session() as session:
        (row,) = (await session.scalars(select(SubstrateRow))).all()
    return row


async def to_the_first_droplets_boot(world: World, *, minutes: float = 60) -> None:
    """Step coarsely up to a second before the first droplet of the substrate's cluster comes up:
    nothing joins before, and the waits that follow step every second from there."""
    deadline = world.cloud.clock.now() + timedelta(minutes=minutes)
    while world.cloud.clock.now() < deadline:
        now = world.cloud.clock.now()
        booting = [  # a droplet comes up once it has booted and its cluster serves
            max(n.ready_at, c.ready_at)
            for c in world.cloud.doks.clusters.values()
            if c.ready_at is not None
            for p in c.pools
            for n in p.nodes
            if n.state == "provisioning"
        ]
        room = (min(booting) - now).total_seconds() - 1 if booting else COARSE
        if room <= 0:
            return
        await world.step(min(COARSE, room))
    raise AssertionError(f"no droplet came up within {minutes} simulated minutes")


async def test_first_sessions_wake_the_substrate(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    gateway = world.compute.gateway
    serve = gateway.serve
    sessions_may_open = asyncio.Event()

    async def held_serve(websocket: Any) -> None:
        await sessions_may_open.wait()
        await serve(websocket)

    monkeypatch.setattr(gateway, "serve", held_serve)
    runs: list[str] = []
    run = SubstratesReconciler.run

    async def counted(self: SubstratesReconciler, ctx: Any, key: str) -> Any:
        runs.append(key)
        return await run(self, ctx, key)

    monkeypatch.setattr(SubstratesReconciler, "run", counted)

    document = world.document("doks")
    document["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = NODES
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)

    async def all_joined_at_the_gateway() -> bool:
        return len(await world.compute.nodes.list(world.tenant_id)) == NODES and world.cloud.bcd.joining == 0

    await to_the_first_droplets_boot(world)
    assert await world.compute.nodes.list(world.tenant_id) == [], "nothing joined before its droplet was up"
    await world.until(all_joined_at_the_gateway, minutes=60, what="every Node redeemed the join token", every=1.0)
    await world.step(JOIN_SETTLE.total_seconds() + 1)  # the joins' wake-up runs, and finds nobody connected
    row = await recorded(world)
    assert row.state == "ready"
    assert (row.nodes_listed, row.nodes_joined) == (NODES, 0)

    sessions_may_open.set()
    hub = gateway.hub
    deadline = time.monotonic() + 60
    while len(hub.connections) < NODES:  # sessions take real time; hold the simulated clock meanwhile
        assert time.monotonic() < deadline, "the held sessions did not open"
        await asyncio.sleep(0.02)
        await world.compute.run_until_idle()
    opened_at = world.cloud.clock.now()
    before = len(runs)

    async def counted_joined() -> bool:
        row = await recorded(world)
        return row.state == "ready" and row.nodes_joined == NODES

    await world.until(counted_joined, minutes=5, what="the substrate counts every Node joined", every=1.0)
    waited = (world.cloud.clock.now() - opened_at).total_seconds()
    assert waited <= SESSION_SETTLE.total_seconds() + 2, f"counted {waited} s after the last session opened"
    assert waited < WATCH_SECONDS / 4
    assert len(runs) - before == 1, "the Nodes' first sessions share one substrate run"
    await world.step(30)
    assert len(runs) - before == 1, "and nothing else woke it meanwhile"
