"""A random concurrent workload of bookings, releases, system ends and cordons keeps every invariant.

After each round: no device is held by two reservations, each device's holder is an
active reservation that lists it, every active reservation holds exactly its GPUs on
its own node, no on-demand reservation sits on a spot node, and quota usage equals the
GPUs of the active reservations.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable

from sqlalchemy import select

from better_compute.compute import Reservation
from better_compute.compute.tables import DeviceRow, NodeRow, ReservationRow
from better_compute.core.errors import ComputeError

from .conftest import World

ROUNDS = 6
OPERATIONS = 30


async def _check_invariants(world: World) -> None:
    async with world.db.session() as session:
        active = list(await session.scalars(select(ReservationRow).where(ReservationRow.state == "active")))
        devices = {d.id: d for d in await session.scalars(select(DeviceRow))}
        spot_nodes = set(await session.scalars(select(NodeRow.id).where(NodeRow.spot.is_(True))))
    listed = Counter(d for r in active for d in r.device_ids)
    assert not listed or max(listed.values()) == 1
    by_id = {r.id: r for r in active}
    for device in devices.values():
        if device.reservation_id is not None:
            holder = by_id[device.reservation_id]  # a holder is always an active reservation
            assert device.id in holder.device_ids
    for r in active:
        assert len(r.device_ids) == r.gpu_count
        assert all(devices[d].node_id == r.node_id and devices[d].reservation_id == r.id for d in r.device_ids)
        assert r.spot or r.node_id not in spot_nodes
    usage = {u.gpu_model: u.used for u in await world.compute.quotas.usage(world.tenant.id)}
    assert usage.get("H100", 0) == sum(r.gpu_count for r in active)


async def test_a_random_concurrent_workload_keeps_every_invariant(world: World) -> None:
    rng = random.Random(20261129)
    nodes = [await world.node(f"node-{i}", rng.choice([2, 4, 8]), spot=i % 3 == 0) for i in range(6)]
    await world.compute.quotas.set(world.tenant.id, "H100", 30)
    r = world.compute.reservations
    made: list[str] = []

    async def attempt(operation: Awaitable[object]) -> None:
        try:
            result = await operation
        except ComputeError as exc:
            assert exc.code in {"UNAVAILABLE", "CONFLICT", "INVALID_STATE"}, exc
            return
        if isinstance(result, Reservation) and result.state == "active":
            made.append(result.id)

    for _ in range(ROUNDS):
        operations: list[Awaitable[object]] = []
        for _ in range(OPERATIONS):
            roll = rng.random()
            if roll < 0.55 or not made:
                operations.append(
                    r.create(world.tenant.id, world.pool_id, rng.choice([1, 1, 2, 3]), spot=rng.random() < 0.3)
                )
            elif roll < 0.75:
                operations.append(r.release(world.tenant.id, rng.choice(made)))
            elif roll < 0.9:
                operations.append(
                    r.end(rng.choice(made), rng.choice(["released", "preempted", "ended"]), reason="test")
                )
            else:
                node = rng.choice(nodes)
                move = world.compute.nodes.cordon if rng.random() < 0.5 else world.compute.nodes.uncordon
                operations.append(move(world.tenant.id, node.id))
        await asyncio.gather(*(attempt(op) for op in operations))
        await _check_invariants(world)
    assert made  # the workload did book
