"""Join tokens: exactly as many joins as allowed, even concurrently; revoked refused; same Node, same node."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.gateway.joining import authenticate_node, join_node
from better_compute.gateway.service import Gateway
from better_compute.wire.protocol import JoinRequest

from .conftest import World, node_inventory


async def test_a_token_is_redeemed_exactly_as_many_times_as_it_allows(world: World, gateway: Gateway) -> None:
    token, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=3)
    for i in range(3):
        await gateway.join(JoinRequest(token=value, inventory=node_inventory(f"node-{i}")))
    with pytest.raises(ComputeError) as refused:
        await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-3")))
    assert refused.value.code == ErrorCode.PERMISSION_DENIED
    assert "used up" in refused.value.message
    assert (await gateway.tokens.get(world.tenant_id, token.id)).uses == 3
    assert len(await world.compute.nodes.list(world.tenant_id)) == 3


async def test_concurrent_redemptions_never_exceed_the_uses(world: World, gateway: Gateway) -> None:
    token, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=3)

    async def attempt(i: int) -> object:
        # Straight to the database, around the gateway's SQLite write turn-taking: the UPDATE alone must hold.
        async with world.db.transaction() as session:
            return await join_node(session, now=world.clock.now(), token=value, inventory=node_inventory(f"node-{i}"))

    results = await asyncio.gather(*(attempt(i) for i in range(12)), return_exceptions=True)
    joined = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, ComputeError) and r.code == ErrorCode.PERMISSION_DENIED]
    assert (len(joined), len(refused)) == (3, 9), results
    assert (await gateway.tokens.get(world.tenant_id, token.id)).uses == 3
    assert len(await world.compute.nodes.list(world.tenant_id)) == 3


async def test_a_revoked_token_is_refused(world: World, gateway: Gateway) -> None:
    token, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=5)
    await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-a")))
    await gateway.tokens.revoke(world.tenant_id, token.id)
    with pytest.raises(ComputeError) as refused:
        await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-b")))
    assert refused.value.code == ErrorCode.PERMISSION_DENIED
    assert "revoked" in refused.value.message
    assert (await gateway.tokens.get(world.tenant_id, token.id)).uses == 1


async def test_an_unknown_token_is_refused(world: World, gateway: Gateway) -> None:
    with pytest.raises(ComputeError) as refused:
        await gateway.join(JoinRequest(token="bcj_not-a-real-token-at-all", inventory=node_inventory("node-a")))
    assert refused.value.code == ErrorCode.PERMISSION_DENIED


async def test_the_same_node_joining_twice_gets_the_same_pool_node_and_a_new_credential(
    world: World, gateway: Gateway
) -> None:
    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=2)
    first = await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-a")))
    second = await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-a")))
    assert first.node.id == second.node.id
    assert len(await world.compute.nodes.list(world.tenant_id)) == 1
    async with world.db.session() as session:
        assert (await authenticate_node(session, second.credential)).id == first.node.id
        with pytest.raises(ComputeError) as replaced:
            await authenticate_node(session, first.credential)
    assert replaced.value.code == ErrorCode.PERMISSION_DENIED


async def test_the_node_joins_under_its_kubernetes_node_name_with_its_inventory(world: World, gateway: Gateway) -> None:
    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    joined = await gateway.join(JoinRequest(token=value, inventory=node_inventory("gke-pool-abc", gpus=2)))
    node = await world.compute.nodes.get(world.tenant_id, joined.node.id)
    assert node.name == "gke-pool-abc"
    assert node.inventory["os"] == {
        "hostname": "gke-pool-abc.internal",
        "kubernetesNodeName": "gke-pool-abc",
        "kernel": "6.8.0",
        "distribution": "",
        "arch": "x86_64",
    }
    assert [d.uuid for d in node.devices] == [g.uuid for g in node_inventory("gke-pool-abc", gpus=2).gpus]


async def test_tokens_and_credentials_are_stored_only_as_hashes(world: World, gateway: Gateway) -> None:
    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    joined = await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-a")))
    async with world.db.session() as session:
        for table in ("gateway_join_tokens", "gateway_node_credentials"):
            rows = (await session.execute(text(f"SELECT * FROM {table}"))).all()
            dumped = repr(rows)
            assert rows and value not in dumped and joined.credential not in dumped


async def test_uses_can_be_set_to_what_is_left_to_join(world: World, gateway: Gateway) -> None:
    token, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-a")))
    topped = await gateway.tokens.set_uses_left(world.tenant_id, token.id, 1)
    assert (topped.uses, topped.uses_allowed, topped.uses_left) == (1, 2, 1)
    await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-b")))
    with pytest.raises(ComputeError):
        await gateway.join(JoinRequest(token=value, inventory=node_inventory("node-c")))
