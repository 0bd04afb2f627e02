"""The decision log's node and GPU call sites: cordoned, uncordoned and retired with their reason (and who
asked), a GPU bcd reports unhealthy, each once and in the change's transaction, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from better_compute.compute import cordon, retire
from better_compute.core.errors import ComputeError
from better_compute.decisions import acting_as

from .conftest import World
from .test_decisions import events
from .test_gpu_health import report, sick


async def test_a_tenants_cordon_and_uncordon_say_who_each_once(world: World) -> None:
    node = await world.node("n1", 2)
    with acting_as("key_ops"):
        await world.compute.nodes.cordon(world.tenant.id, node.id)
        await world.compute.nodes.cordon(world.tenant.id, node.id)
        await world.compute.nodes.uncordon(world.tenant.id, node.id)
    assert [(e.kind, e.reason, e.principal, e.node_id, e.node_name) for e in await events(world, node="n1")] == [
        ("node.cordoned", "the tenant cordoned it", "key_ops", node.id, "n1"),
        ("node.uncordoned", "the tenant uncordoned it", "key_ops", node.id, "n1"),
    ]


async def test_a_retirement_is_recorded_with_its_reason_and_not_when_it_fails_or_rolls_back(world: World) -> None:
    node = await world.node("n1", 2)
    booked = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    async with world.compute.nodes.transaction() as session:
        with pytest.raises(ComputeError):  # it still holds a booking
            await retire(session, node.id, world.clock.now(), reason="refused")
    await world.compute.reservations.release(world.tenant.id, booked.id)
    with pytest.raises(RuntimeError):
        async with world.compute.nodes.transaction() as session:
            await cordon(session, node.id, world.clock.now(), reason="rolled back")
            await retire(session, node.id, world.clock.now(), reason="rolled back")
            raise RuntimeError("the change failed after its decisions were recorded")
    async with world.compute.nodes.transaction() as session:
        await retire(session, node.id, world.clock.now(), reason="its machine is gone")
        await retire(session, node.id, world.clock.now(), reason="again")
    assert [(e.kind, e.reason) for e in await events(world, node=node.id) if e.kind.startswith("node.")] == [
        ("node.retired", "its machine is gone")
    ]


async def test_an_unhealthy_gpu_is_recorded_once_naming_its_fault_and_the_reservation_it_degrades(
    world: World,
) -> None:
    node = await world.node("n1", 4)
    booked = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    await report(world, node, sick(node, 1))
    await report(world, node, sick(node, 1))  # the same fault reported again is no new decision
    await report(world, node, sick(node, 3, reason="lost", xid=None))
    degraded = await events(world, kind="gpu.degraded")
    assert [(e.reason, e.reservation_id, e.gpu_ids, e.node_name) for e in degraded] == [
        (
            f"bcd reported GPU GPU-n1-1 (index 1) unhealthy: xid, XID 79; reservation {booked.id} now reads degraded",
            booked.id,
            ("GPU-n1-1",),
            "n1",
        ),
        ("bcd reported GPU GPU-n1-3 (index 3) unhealthy: lost", None, ("GPU-n1-3",), "n1"),
    ]
    assert degraded[0].details == {"reason": "xid", "xid": 79, "index": 1}
    assert [e.kind for e in await events(world, reservation_id=booked.id)] == ["reservation.booked", "gpu.degraded"]
