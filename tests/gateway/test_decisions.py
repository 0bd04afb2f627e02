"""The decision log's join call sites: a join token made, used up and revoked; a node whose name joins
from another machine replaced and retired (its bookings ended saying why), in the change's transaction,
on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.bcd.inventory import simulated_gpus
from better_compute.decisions import Event, Filters, acting_as, read
from better_compute.gateway.joining import join_node
from better_compute.gateway.service import Gateway
from better_compute.gateway.tokens import create_join_token
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


async def test_a_join_token_is_made_used_up_and_revoked_each_once_saying_who_and_why(
    world: World, gateway: Gateway
) -> None:
    with acting_as("key_ops"):
        token, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=2)
    await join(world, gateway, value, node_inventory("n1", 1))
    assert [e.kind for e in await events(world, pool_id=world.pool_id)] == ["join-token.made"], "one use is left"
    node = await join(world, gateway, value, node_inventory("n2", 1))
    with acting_as("key_ops"):
        await gateway.tokens.revoke(world.tenant_id, token.id)
        await gateway.tokens.revoke(world.tenant_id, token.id)
    made, used_up, revoked = await events(world, pool_id=world.pool_id, kind=None)
    assert (made.kind, made.reason, made.principal) == ("join-token.made", "made for 2 join(s) on request", "key_ops")
    assert made.details == {"tokenId": token.id, "uses": 0, "usesAllowed": 2}
    assert value not in str(made), "never its value"
    assert (used_up.kind, used_up.reason, used_up.node_id, used_up.node_name, used_up.principal) == (
        "join-token.used-up",
        "its last use joined node n2 (2 of 2 joins)",
        node,
        "n2",
        None,
    )
    assert (revoked.kind, revoked.reason, revoked.principal) == (
        "join-token.revoked",
        "the tenant revoked it",
        "key_ops",
    )


async def test_a_token_made_in_a_change_that_rolls_back_leaves_no_event(world: World) -> None:
    with pytest.raises(RuntimeError):
        async with world.db.transaction() as session:
            await create_join_token(
                session, now=world.clock.now(), tenant_id=world.tenant_id, pool_id=world.pool_id, uses=1, reason="x"
            )
            raise RuntimeError("the change failed after its decision was recorded")
    assert await events(world) == []
