"""Node sessions over pinned TLS: pins, credentials, heartbeats, killed connections, bad messages."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from better_compute.bcd.agent import Agent, CredentialRefusedError
from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import NodeCredential
from better_compute.bcd.pins import PinMismatchError
from better_compute.bcd.state import NodeState
from better_compute.gateway.service import Gateway
from better_compute.gateway.tables import NodeSessionRow
from better_compute.testing.loopback import LoopbackServer
from better_compute.wire.protocol import Hello, InventoryUpdate

from .conftest import Tls, World, node_inventory
from .helpers import connected, eventually, joined_node

WRONG_PIN = "sha256/" + base64.b64encode(b"\x00" * 32).decode()


def agent_for(world: World, config: BcdConfig, credential: NodeCredential, name: str) -> Agent:
    inventory = node_inventory(name)
    return Agent(config, credential, inventory, NodeState([g.uuid for g in inventory.gpus]), clock=world.clock)


@contextlib.asynccontextmanager
async def raw_session(
    server: LoopbackServer, tls: Tls, credential: NodeCredential, name: str
) -> AsyncIterator[ClientConnection]:
    """A hand-driven node: hello sent and welcome read; the test sends the rest."""
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    url = server.url.replace("https://", "wss://") + "/v1/gateway/connect"
    async with connect(url, ssl=context) as ws:
        await ws.send(Hello(credential=credential.credential, inventory=node_inventory(name)).to_wire())
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome"
        yield ws


async def closed_with(ws: ClientConnection) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


async def test_a_pin_mismatch_refuses_the_connection_before_the_credential_is_sent(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    config, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a", pins=(WRONG_PIN,))
    agent = agent_for(world, config, credential, "node-a")
    with pytest.raises(PinMismatchError) as refused:
        await agent.session()
    message = str(refused.value)
    assert "certificate pin mismatch" in message and tls.pin in message and WRONG_PIN in message
    assert gateway.hub.connections == {}
    assert not await gateway.is_connected(credential.node_id)


async def test_the_right_pin_connects_and_the_node_becomes_ready_and_connected(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    config, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    agent = agent_for(world, config, credential, "node-a")
    task = asyncio.create_task(agent.session())
    await asyncio.wait_for(agent.connected.wait(), 10)
    assert await gateway.is_connected(credential.node_id)
    node = await world.compute.nodes.get(world.tenant_id, credential.node_id)
    assert (node.state, node.connected) == ("ready", True)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_killed_connection_marks_the_node_disconnected(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    config, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    agent = agent_for(world, config, credential, "node-a")
    task = asyncio.create_task(agent.session())
    await asyncio.wait_for(agent.connected.wait(), 10)
    assert await gateway.is_connected(credential.node_id)
    assert agent.websocket is not None
    agent.websocket.transport.abort()  # the TCP connection dies without a close frame
    await eventually(connected(gateway, credential.node_id, expected=False))
    node = await world.compute.nodes.get(world.tenant_id, credential.node_id)
    assert node.connected is False
    await asyncio.gather(task, return_exceptions=True)


async def test_missed_heartbeats_close_the_session_after_exactly_three_intervals(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with raw_session(server, tls, credential, "node-a") as ws:
        await eventually(lambda: credential.node_id in gateway.hub.connections)
        world.clock.advance(29.999)
        assert await gateway.hub.tick() == []
        assert await gateway.is_connected(credential.node_id)
        world.clock.advance(0.001)
        assert await gateway.hub.tick() == [credential.node_id]
        assert not await gateway.is_connected(credential.node_id)
        assert await closed_with(ws) == (4408, "missed heartbeats")


async def test_heartbeats_keep_the_session_and_reach_the_database(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with raw_session(server, tls, credential, "node-a") as ws:
        await eventually(lambda: credential.node_id in gateway.hub.connections)
        connection = gateway.hub.connections[credential.node_id]
        connected_at = world.clock.now()
        for seq in range(1, 7):  # 60 s: twice the timeout
            world.clock.advance(10)
            await ws.send(json.dumps({"type": "heartbeat", "seq": seq}))
            await eventually(lambda: connection.last_heartbeat == world.clock.now())
            assert await gateway.hub.tick() == []
            node = await world.compute.nodes.get(world.tenant_id, credential.node_id)
            # compute's last_seen_at follows once a minute; the session row every tick
            assert node.last_seen_at == (world.clock.now() if seq == 6 else connected_at)
        assert await gateway.is_connected(credential.node_id)
        async with world.db.session() as session:
            row = await session.get(NodeSessionRow, credential.node_id)
            assert row is not None and row.last_heartbeat_at == world.clock.now()


@pytest.mark.parametrize(
    ("frame", "code", "reason"),
    [
        ('{"type": "heartbeat", "seq": -1}', 1008, "malformed message"),
        ('{"type": "launch-missiles"}', 1008, "malformed message"),
        ("not json", 1008, "malformed message"),
        ('{"type": "heartbeat", "seq": 1, "pad": "' + "x" * 70_000 + '"}', 1009, "message over 65536 bytes"),
        (b"\x00\x01", 1008, "binary frames are not part of the protocol"),
        # A key the close reason repeats: escaped, and cut to a close frame's 123 bytes, never a dropped frame.
        ('{"type": "heartbeat", "seq": 1, "\\ud800": 1}', 1008, "malformed message: /\\ud800: the key holds"),
        ('{"type": "' + "\u00e9" * 200 + '"}', 1008, "malformed message: : Input tag 'ééé"),
    ],
)
async def test_a_bad_message_closes_that_session_only(
    world: World,
    gateway: Gateway,
    server: LoopbackServer,
    tls: Tls,
    tmp_path: Path,
    frame: str | bytes,
    code: int,
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, bad = await joined_node(world, gateway, server, tls, tmp_path, "node-bad")
    _, good = await joined_node(world, gateway, server, tls, tmp_path, "node-good")
    async with raw_session(server, tls, good, "node-good"), raw_session(server, tls, bad, "node-bad") as ws:
        await ws.send(frame)
        got_code, got_reason = await closed_with(ws)
        assert got_code == code and got_reason.startswith(reason), got_reason
        await eventually(connected(gateway, bad.node_id, expected=False))
        assert await gateway.is_connected(good.node_id)
    assert any(reason in r.getMessage() for r in caplog.records)


async def test_an_unknown_credential_is_refused_and_bcd_stops(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    config, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    forged = NodeCredential(credential.node_id, credential.pool_id, "bcn_forged-credential-value-000000")
    agent = agent_for(world, config, forged, "node-a")
    with pytest.raises(CredentialRefusedError, match="must join again"):
        await asyncio.wait_for(agent.run(), 10)
    assert not await gateway.is_connected(credential.node_id)


async def test_a_silent_client_gets_no_session(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls
) -> None:
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    url = server.url.replace("https://", "wss://") + "/v1/gateway/connect"
    async with connect(url, ssl=context) as ws:
        await asyncio.sleep(0.05)
        world.clock.advance(30)
        assert await closed_with(ws) == (1008, "no hello within 30 s")


async def test_bcd_reconnects_after_a_jittered_backoff_on_its_clock(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    config, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    agent = agent_for(world, config, credential, "node-a")
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.connected.wait(), 10)
        await eventually(lambda: credential.node_id in gateway.hub.connections)
        await gateway.hub.connections[credential.node_id].close(1012, "service restart")
        await eventually(lambda: not agent.connected.is_set() and world.clock.next_wakeup() is not None)
        wake = world.clock.next_wakeup()
        assert wake is not None
        delay = (wake - world.clock.now()).total_seconds()
        assert 0.5 <= delay <= 1.0  # first attempt after a good session: half to all of 1 s
        world.clock.advance(delay - 0.01)
        await asyncio.sleep(0.1)
        assert agent.sessions == 1 and not agent.connected.is_set()
        world.clock.advance(0.01)
        await eventually(lambda: agent.sessions == 2 and agent.connected.is_set())
        await eventually(connected(gateway, credential.node_id))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_newer_session_replaces_the_older_and_the_older_cannot_disconnect_the_node(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with raw_session(server, tls, credential, "node-a") as older:
        await eventually(lambda: credential.node_id in gateway.hub.connections)
        first = gateway.hub.connections[credential.node_id].session_id
        async with raw_session(server, tls, credential, "node-a"):
            assert await closed_with(older) == (4409, "replaced by a newer session of the same node")
            second = gateway.hub.connections[credential.node_id].session_id
            assert second != first
            await asyncio.sleep(0.2)  # the older handler has ended and tried to record its end
            assert await gateway.is_connected(credential.node_id)
            async with world.db.session() as session:
                row = await session.get(NodeSessionRow, credential.node_id)
                assert row is not None and row.session_id == second and row.connected


async def test_the_inventory_from_hello_and_from_updates_reaches_the_node(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")  # joined with 8 GPUs

    async def present() -> int:
        node = await world.compute.nodes.get(world.tenant_id, credential.node_id)
        return sum(1 for d in node.devices if d.present)

    context = ssl.create_default_context(cafile=str(tls.ca_file))
    url = server.url.replace("https://", "wss://") + "/v1/gateway/connect"
    async with connect(url, ssl=context) as ws:
        await ws.send(Hello(credential=credential.credential, inventory=node_inventory("node-a", gpus=6)).to_wire())
        assert json.loads(await ws.recv())["type"] == "welcome"
        assert await present() == 6  # two GPUs fell off the bus since the join
        await ws.send(InventoryUpdate(inventory=node_inventory("node-a", gpus=8)).to_wire())

        async def all_back() -> bool:
            return await present() == 8

        await eventually(all_back)
