"""A node joined and connected cannot be joined again under its name without proof of identity."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from better_compute.bcd.agent import Agent
from better_compute.bcd.join import JoinError, join
from better_compute.bcd.state import NodeState
from better_compute.gateway.joining import JoinHooks, Proof
from better_compute.gateway.service import Gateway
from better_compute.testing.loopback import LoopbackServer

from .conftest import Tls, World, node_config, node_inventory
from .helpers import connected, eventually, joined_node


async def test_a_second_join_under_a_connected_nodes_name_is_refused_until_it_disconnects(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    config, credential = await joined_node(world, gateway, server, tls, tmp_path / "victim", "node-a")
    agent = Agent(config, credential, node_inventory("node-a"), NodeState([]), clock=world.clock)
    session = asyncio.create_task(agent.session())
    await asyncio.wait_for(agent.connected.wait(), 10)

    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=2)
    intruder = node_config(server, tls, tmp_path / "intruder", "node-a")
    intruder.token_file.write_text(value)
    with pytest.raises(JoinError, match="PERMISSION_DENIED: node 'node-a' is joined and connected"):
        await join(intruder, node_inventory("node-a"), clock=world.clock)
    assert await gateway.is_connected(credential.node_id)

    session.cancel()
    await asyncio.gather(session, return_exceptions=True)
    await eventually(connected(gateway, credential.node_id, expected=False))
    again = await join(intruder, node_inventory("node-a"), clock=world.clock)
    assert again.node_id == credential.node_id and again.credential != credential.credential


async def _vouched(*, pool_id: str, node_name: str, identity_token: str | None) -> Proof | None:
    """An identity check that verifies every join, as the substrate's TokenReview does a genuine node's."""
    return Proof()


@pytest.mark.parametrize("proven", [True, False])
async def test_a_proven_node_joining_again_takes_no_further_use_of_its_token(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path, proven: bool
) -> None:
    """The join's answer lost on the way (its credential never stored): the node joins again. With
    its identity proven that is the same node, so the one-use token still lets it in; without proof,
    or for another node, the token is used up."""
    if proven:
        gateway.register_hooks(JoinHooks(identity=_vouched))
    token, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    config = node_config(server, tls, tmp_path, "node-a")
    config.token_file.write_text(value)
    first = await join(config, node_inventory("node-a"), clock=world.clock)
    (config.state_dir / "node-credential.json").unlink()
    if not proven:
        with pytest.raises(JoinError, match=r"the join token is used up \(1 of 1 joins\)"):
            await join(config, node_inventory("node-a"), clock=world.clock)
        return
    again = await join(config, node_inventory("node-a"), clock=world.clock)
    assert again.node_id == first.node_id and again.credential != first.credential
    assert (await gateway.tokens.get(world.tenant_id, token.id)).uses == 1
    other = node_config(server, tls, tmp_path, "node-b")
    other.token_file.write_text(value)
    with pytest.raises(JoinError, match=r"the join token is used up \(1 of 1 joins\)"):
        await join(other, node_inventory("node-b"), clock=world.clock)
    await gateway.tokens.revoke(world.tenant_id, token.id)
    (config.state_dir / "node-credential.json").unlink()
    with pytest.raises(JoinError, match="the join token was revoked"):
        await join(config, node_inventory("node-a"), clock=world.clock)
