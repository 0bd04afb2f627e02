"""Two replicas on one PostgreSQL database: many bookers, and a soak with cordons, retires and reconnects.

Each replica is its own set of compute services over its own engine, as two `serve`
processes would be: group commit orders bookings within one, and only the database's
row locks and guarded updates order them across the two. The checks at the end are
queries over the whole database.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from sqlalchemy import text

from better_compute.compute import (
    ComputeServices,
    compute_services,
    end_reservations_on_node,
    mark_ready,
    register_node,
    retire,
    set_connected,
    update_inventory,
)
from better_compute.core.errors import ComputeError
from better_compute.store import Database

from .conftest import World

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)

SEED = 1614


def _inventory(name: str, gpus: int) -> dict[str, Any]:
    return {"gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 80GB HBM3"} for i in range(gpus)]}


async def _one(db: Database, sql: str) -> int:
    async with db.session() as session:
        return int(await session.scalar(text(sql)) or 0)


async def _invariants(db: Database) -> dict[str, int]:
    """Each count is 0 when its rule holds."""
    return {
        "active reservations on a node that is not ready": await _one(
            db,
            "SELECT count(*) FROM compute_reservations r JOIN compute_nodes n ON n.id = r.node_id"
            " WHERE r.state = 'active' AND n.state <> 'ready'",
        ),
        "devices named by two active reservations": await _one(
            db,
            "SELECT count(*) FROM (SELECT d FROM compute_reservations r, json_array_elements_text(r.device_ids) d"
            " WHERE r.state = 'active' GROUP BY d HAVING count(*) > 1) twice",
        ),
        "devices held by no active reservation of theirs": await _one(
            db,
            "SELECT count(*) FROM compute_devices v LEFT JOIN compute_reservations r ON r.id = v.reservation_id"
            " WHERE v.reservation_id IS NOT NULL AND (r.state IS DISTINCT FROM 'active' OR r.node_id <> v.node_id)",
        ),
        "active reservations short of their devices": await _one(
            db,
            "SELECT count(*) FROM compute_reservations r WHERE r.state = 'active' AND r.gpu_count <>"
            " (SELECT count(*) FROM compute_devices v WHERE v.reservation_id = r.id)",
        ),
        "quota rows whose use is not the sum of active bookings": await _one(
            db,
            "SELECT count(*) FROM compute_quotas q WHERE q.used <> (SELECT coalesce(sum(r.gpu_count), 0)"
            " FROM compute_reservations r WHERE r.tenant_id = q.tenant_id AND r.gpu_model = q.gpu_model"
            " AND r.state = 'active')",
        ),
        "retired nodes marked connected": await _one(
            db, "SELECT count(*) FROM compute_nodes n WHERE n.state = 'retired' AND n.connected"
        ),
        "sessions open for a retired node": await _one(
            db,
            "SELECT count(*) FROM gateway_node_sessions s JOIN compute_nodes n ON n.id = s.node_id"
            " WHERE n.state = 'retired' AND s.connected",
        ),
    }


async def _book_until_refused(replica: ComputeServices, tenant_id: str, pool_id: str) -> list[str]:
    """Book one GPU at a time until the quota says no; a busy answer is asked again."""
    made: list[str] = []
    while True:
        try:
            made.append((await replica.reservations.create(tenant_id, pool_id, 1)).id)
        except ComputeError as exc:
            if exc.reason == "quota-exceeded":
                return made
            assert exc.code == "UNAVAILABLE" and exc.reason != "no-capacity", exc


async def test_fifty_bookers_on_two_replicas_book_exactly_the_quota_and_no_device_twice(world: World) -> None:
    for n in range(10):
        await world.node(f"n{n}", 8)  # 80 GPUs
    await world.compute.quotas.set(world.tenant.id, "H100", 40)  # less than the first batches of both replicas ask
    other = Database(world.db.url)
    try:
        replicas = [world.compute, compute_services(other, world.clock)]
        booked = await asyncio.gather(
            *(_book_until_refused(replicas[i % 2], world.tenant.id, world.pool_id) for i in range(50))
        )
        ids = [rid for made in booked for rid in made]
        assert len(ids) == len(set(ids)) == 40  # the quota exactly: no booking past it, none lost short of it
        assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 40
        assert await _invariants(world.db) == dict.fromkeys(await _invariants(world.db), 0)
    finally:
        await other.dispose()


async def test_two_replicas_booking_separate_pools_charge_one_quota_exactly(world: World) -> None:
    """Each replica books a pool of its own: no device is wanted by both, so nothing but the guarded
    quota charge stops two batches placed on one read of the shared quota from passing it."""
    spare = await world.compute.pools.create(world.tenant.id, "spare", world.site_id, "metal-host", "H100", {})
    for n in range(6):  # 48 GPUs in each pool, one H100 quota of 40 over both: either may take all of it
        await world.node(f"n{n}", 8)
        await world.node(f"s{n}", 8, pool_id=spare.id)
    await world.compute.quotas.set(world.tenant.id, "H100", 40)
    other = Database(world.db.url)
    try:
        replicas = [world.compute, compute_services(other, world.clock)]
        pools = [world.pool_id, spare.id]
        booked = await asyncio.gather(
            *(_book_until_refused(replicas[i % 2], world.tenant.id, pools[i % 2]) for i in range(50))
        )
        ids = [rid for made in booked for rid in made]
        assert len(ids) == len(set(ids)) == 40
        assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 40
        assert await _invariants(world.db) == dict.fromkeys(await _invariants(world.db), 0)
    finally:
        await other.dispose()


async def test_soak_two_replicas_bookers_cordons_retires_and_reconnects(world: World) -> None:
    rng = random.Random(SEED)
    other = Database(world.db.url)
    replicas = [world.compute, compute_services(other, world.clock)]
    live = {(await world.node(f"n{n}", 4)).id: f"n{n}" for n in range(12)}
    await world.compute.quotas.set(world.tenant.id, "H100", 40)
    tenant, pool = world.tenant.id, world.pool_id
    made = 0
    retired = 0
    gone: list[str] = []  # retired nodes, whose late reconnects must not mark them connected

    async def booker(index: int) -> None:
        nonlocal made
        mine: list[str] = []
        local = random.Random(SEED * 1000 + index)
        replica = replicas[index % 2]
        for _ in range(4):
            try:
                mine.append((await replica.reservations.create(tenant, pool, local.choice((1, 1, 2)))).id)
                made += 1
            except ComputeError as exc:
                assert exc.code in ("UNAVAILABLE", "CONFLICT"), exc
            if mine and local.random() < 0.5:
                await replica.reservations.release(tenant, mine.pop(local.randrange(len(mine))))

    async def chaos(bookers: asyncio.Future[Any]) -> None:
        nonlocal retired
        while not bookers.done():
            replica = replicas[rng.randrange(2)]
            node_id = rng.choice(sorted(live))
            now = world.clock.now()
            action = rng.choice(("cordon", "retire", "reconnect"))
            if action == "cordon":
                await replica.nodes.cordon(tenant, node_id)
                for _ in range(rng.randrange(1, 30)):
                    await asyncio.sleep(0)
                await replica.nodes.uncordon(tenant, node_id)
            elif action == "retire":  # a teardown: cordon, end what it holds, retire; a new node takes its place
                await replica.nodes.cordon(tenant, node_id)
                async with replica.feed.transaction() as session:
                    await end_reservations_on_node(session, now=now, node_id=node_id, reason="a teardown")
                async with replica.feed.transaction() as session:
                    await retire(
                        session, node_id, now, reason="a teardown"
                    )  # a booking landing after the cordon would refuse this
                gone.append(node_id)
                name = f"{live.pop(node_id)}-{retired}"
                retired += 1
                async with replica.feed.transaction() as session:
                    node = await register_node(session, now=now, pool_id=pool, name=name, inventory=_inventory(name, 4))
                    await mark_ready(session, node.id, now)
                live[node.id] = name
            elif gone and rng.random() < 0.25:  # a late heartbeat of a node already retired
                async with replica.feed.transaction() as session:
                    await set_connected(session, rng.choice(gone), True, now)
            else:  # bcd drops its connection and comes back with its inventory
                async with replica.feed.transaction() as session:
                    await set_connected(session, node_id, False, now)
                async with replica.feed.transaction() as session:
                    await update_inventory(session, node_id, _inventory(live[node_id], 4), now)
                    await set_connected(session, node_id, True, now)

    try:
        bookers = asyncio.gather(*(booker(i) for i in range(32)))
        await asyncio.gather(bookers, chaos(bookers))
        assert made >= 32 and retired >= 1
        assert await _invariants(world.db) == dict.fromkeys(await _invariants(world.db), 0)
    finally:
        await other.dispose()
