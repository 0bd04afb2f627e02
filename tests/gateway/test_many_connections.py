"""Many bcd connections to one gateway stay connected with heartbeats (bench/gateway.py runs 1,000)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from better_compute.bcd.agent import Agent
from better_compute.bcd.credentials import NodeCredential
from better_compute.bcd.state import NodeState
from better_compute.gateway.joining import join_node
from better_compute.gateway.service import Gateway
from better_compute.testing.loopback import LoopbackServer

from .conftest import Tls, World, node_config, node_inventory
from .helpers import eventually

NODES = 100


async def test_100_bcd_connections_stay_connected_through_heartbeats(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=NODES)
    config = node_config(server, tls, tmp_path, "shared")
    agents = []
    async with world.db.transaction() as session:  # one transaction for the joins keeps the test quick
        for i in range(NODES):
            inventory = node_inventory(f"node-{i:04d}", gpus=1)
            joined = await join_node(session, now=world.clock.now(), token=value, inventory=inventory)
            credential = NodeCredential(joined.node.id, joined.node.pool_id, joined.credential)
            agents.append(Agent(config, credential, inventory, NodeState([]), clock=world.clock))
    tasks = [asyncio.create_task(agent.run()) for agent in agents]
    try:
        await eventually(lambda: len(gateway.hub.connections) == NODES, seconds=120)
        # every agent has its welcome and waits for its first beat, so one advance reaches them all
        await eventually(lambda: all(agent.heartbeating.is_set() for agent in agents), seconds=60)
        for _ in range(4):  # 40 s of heartbeats: past the 30 s a silent node would be allowed
            world.clock.advance(10)
            await eventually(
                lambda: all(c.last_heartbeat == world.clock.now() for c in gateway.hub.connections.values()), seconds=60
            )
            assert await gateway.hub.tick() == []
        assert [await gateway.is_connected(agent.credential.node_id) for agent in agents] == [True] * NODES
        assert {agent.sessions for agent in agents} == {1}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
