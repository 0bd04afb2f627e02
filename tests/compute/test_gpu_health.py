"""Per-GPU quarantine: an unhealthy GPU takes no new booking at once, and the reservation holding it
reads degraded (kept, or ended and refunded where its pool says so), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.compute import Node
from better_compute.compute.models import DegradedGpu
from better_compute.compute.reservations import report_inventory
from better_compute.core.errors import ComputeError

from .conftest import World


def sick(node: Node, index: int, reason: str = "xid", xid: int | None = 79) -> dict[str, Any]:
    """The node's inventory with GPU `index` unhealthy, as bcd reports it."""
    gpus = [dict(g) for g in node.inventory["gpus"]]
    health: dict[str, Any] = {"healthy": False, "reason": reason}
    if xid is not None:
        health["xid"] = xid
    gpus[index]["health"] = health
    return {**node.inventory, "gpus": gpus}


async def report(world: World, node: Node, inventory: dict[str, Any]) -> Node:
    async with world.compute.nodes.transaction() as session:
        return await report_inventory(session, node.id, inventory, world.clock.now())


async def test_an_unhealthy_gpu_takes_no_booking_and_its_reservation_reads_degraded(world: World) -> None:
    node = await world.node("n1", 4)
    booked = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert booked.health == "healthy" and booked.degraded_gpus == ()
    held = {d.index for d in (await world.compute.nodes.get(world.tenant.id, node.id)).devices if d.reservation_id}
    assert held == {0, 1}

    changed: list[list[str]] = []

    async def listener(node_ids: list[str]) -> None:
        changed.append(node_ids)

    world.compute.reservations.subscribe(listener)
    after = await report(world, node, sick(node, 1))
    assert changed == [[node.id]], "the change feed hears of it"
    assert [(d.index, d.healthy, d.health_reason, d.health_xid) for d in after.devices] == [
        (0, True, None, None),
        (1, False, "xid", 79),
        (2, True, None, None),
        (3, True, None, None),
    ]
    assert [d.present for d in after.devices] == [True, False, True, True]

    got = await world.compute.reservations.get(world.tenant.id, booked.id)
    assert got.state == "active" and got.health == "degraded"
    assert got.degraded_gpus == (DegradedGpu(uuid="GPU-n1-1", index=1, reason="xid", xid=79),)
    assert set(got.device_ids) == set(booked.device_ids), "the tenant keeps the rest"
    (listed,) = await world.compute.reservations.list(world.tenant.id)
    assert listed.health == "degraded"

    # the two healthy free GPUs are bookable; a third is not: the sick one is off the market
    other = await world.compute.reservations.create(world.tenant.id, world.pool_id, 2)
    assert other.health == "healthy"
    with pytest.raises(ComputeError) as err:
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert err.value.code == "UNAVAILABLE"

    # released, the sick GPU is still out; healthy again, it is bookable
    await world.compute.reservations.release(world.tenant.id, booked.id)
    assert (await world.compute.reservations.get(world.tenant.id, booked.id)).health == "healthy"
    one = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    with pytest.raises(ComputeError):
        await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    await report(world, node, node.inventory)
    last = await world.compute.reservations.create(world.tenant.id, world.pool_id, 1)
    assert {one.node_id, last.node_id} == {node.id}


async def test_a_pool_that_ends_degraded_reservations_refunds_their_quota_once(world: World) -> None:
    pool = await world.compute.pools.create(
        world.tenant.id, "ends", world.site_id, "metal-host", "H100", {"health": {"degraded": "end"}}
    )
    await world.compute.quotas.set(world.tenant.id, "H100", 4)
    node = await world.node("n1", 4, pool_id=pool.id)
    doomed = await world.compute.reservations.create(world.tenant.id, pool.id, 2)
    kept = await world.compute.reservations.create(world.tenant.id, pool.id, 2)
    assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 4

    await report(world, node, sick(node, 0, "double-bit-ecc", None))
    await report(world, node, sick(node, 0, "double-bit-ecc", None))  # again: nothing ends twice
    assert (await world.compute.reservations.get(world.tenant.id, doomed.id)).state == "ended"
    assert (await world.compute.reservations.get(world.tenant.id, kept.id)).state == "active"
    assert (await world.compute.quotas.usage(world.tenant.id, "H100"))[0].used == 2


async def test_a_bad_health_or_degraded_policy_is_refused_naming_the_field(world: World) -> None:
    node = await world.node("n1", 1)
    bad = [
        ({"healthy": "no"}, "/inventory/gpus/0/health"),
        ({"healthy": False}, "/inventory/gpus/0/health/reason"),
        ({"healthy": False, "reason": "xid", "xid": -1}, "/inventory/gpus/0/health/xid"),
        ({"healthy": False, "reason": "xid", "resetNeeded": "yes"}, "/inventory/gpus/0/health/resetNeeded"),
        ({"healthy": False, "reason": "xid", "recheckingUntil": "soon"}, "/inventory/gpus/0/health/recheckingUntil"),
        (
            {"healthy": False, "reason": "xid", "recheckingUntil": "2026-12-02T10:00:00"},
            "/inventory/gpus/0/health/recheckingUntil",
        ),
    ]
    for health, path in bad:
        gpus = [{**node.inventory["gpus"][0], "health": health}]
        with pytest.raises(ComputeError) as err:
            await report(world, node, {**node.inventory, "gpus": gpus})
        assert (err.value.code, err.value.path) == ("INVALID_INPUT", path)
    with pytest.raises(ComputeError) as err:
        await world.compute.pools.create(
            world.tenant.id, "other", world.site_id, "metal-host", "H100", {"health": {"degraded": "drop"}}
        )
    assert (err.value.code, err.value.path) == ("INVALID_INPUT", "/policy/health/degraded")
    assert await world.compute.nodes.get(world.tenant.id, node.id) == node
