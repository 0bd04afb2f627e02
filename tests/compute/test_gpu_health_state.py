"""Each GPU's health state as the control plane keeps it (unhealthy, rechecking until a time, reset-needed),
since when on its clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from better_compute.compute import Node
from better_compute.compute.reservations import report_inventory

from .conftest import World


def with_health(node: Node, index: int, health: dict[str, Any] | None) -> dict[str, Any]:
    gpus = [dict(g) for g in node.inventory["gpus"]]
    gpus[index]["health"] = health or {"healthy": True}
    return {**node.inventory, "gpus": gpus}


async def report(world: World, node: Node, inventory: dict[str, Any]) -> Node:
    async with world.compute.nodes.transaction() as session:
        return await report_inventory(session, node.id, inventory, world.clock.now())


async def test_a_gpu_keeps_its_state_since_the_change(world: World) -> None:
    node = await world.node("n1", 2)
    first = (await world.compute.nodes.get(world.tenant.id, node.id)).devices[0]
    assert (first.health_state, first.health_since, first.health_until) == ("healthy", world.clock.now(), None)

    world.clock.advance(60)
    held_at = world.clock.now()
    held = {"healthy": False, "reason": "xid", "xid": 79, "resetNeeded": True}
    gpu = (await report(world, node, with_health(node, 0, held))).devices[0]
    assert (gpu.health_state, gpu.health_reason, gpu.health_xid, gpu.health_since) == (
        "reset-needed",
        "xid",
        79,
        held_at,
    )
    world.clock.advance(60)
    gpu = (await report(world, node, with_health(node, 0, held))).devices[0]
    assert gpu.health_since == held_at, "the same state again keeps its since"

    until = datetime(2026, 12, 2, 10, 10, tzinfo=UTC)
    rechecking = {"healthy": False, "reason": "xid", "xid": 79, "recheckingUntil": "2026-12-02T11:10:00+01:00"}
    gpu = (await report(world, node, with_health(node, 0, rechecking))).devices[0]
    assert (gpu.health_state, gpu.health_since, gpu.health_until) == ("rechecking", world.clock.now(), until)
    assert not gpu.present, "a rechecking GPU is still off sale"

    world.clock.advance(600)
    gpu = (await report(world, node, with_health(node, 0, None))).devices[0]
    assert (gpu.health_state, gpu.health_since, gpu.health_until, gpu.present) == (
        "healthy",
        world.clock.now(),
        None,
        True,
    )
