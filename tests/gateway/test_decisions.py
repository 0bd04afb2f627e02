"""The decision log's join call sites: a node whose name joins from another machine is replaced and
retired (its bookings ended saying why), in the join's transaction, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from better_compute.bcd.inventory import simulated_gpus
from better_compute.decisions import Event, Filters, read
from better_compute.gateway.joining import join_node
from better_compute.gateway.service import Gateway
from better_compute.wire.protocol import Inventory

from .conftest import World, node_inventory


async def events(world: World, **filters: Any) -> list[Event]:
    async with world.db.session() as session:
        return list((await read(session, tenant_id=world.tenant_id, filters=Filters(**filters), limit=1000)).events)


async def join(world: World, gateway: Gateway, value: str, inventory: Inventory) -> str:
    async with world.compute.nodes.transaction() as session:
        return (await join_node(session, now=world.clock.now(), token=value, inventory=inventory)).node.id


async def test_a_name_joining_from_another_machine_replaces_and_retires_the_old_node(
    world: World, gateway: Gateway
) -> None:
    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=2)
    first = await join(world, gateway, value, node_inventory("n1", 2))
    await world.compute.nodes.cordon(world.tenant_id, first)
    await world.compute.nodes.uncordon(world.tenant_id, first)
    booked = await world.compute.reservations.create(world.tenant_id, world.pool_id, 1)
    elsewhere = node_inventory("n1", 2).model_copy(update={"gpus": simulated_gpus("2xH100", "another-machine")})
    second = await join(world, gateway, value, elsewhere)
    assert second != first
    why = "node n1 joined again from another machine"
    assert [(e.kind, e.reason) for e in await events(world, node=first) if e.kind != "node.uncordoned"][-3:] == [
        ("reservation.released", f"its node n1 went: {why}"),
        ("node.replaced", why),
        ("node.retired", f"{why}: it is replaced"),
    ]
    assert (await events(world, reservation_id=booked.id))[-1].kind == "reservation.released"
