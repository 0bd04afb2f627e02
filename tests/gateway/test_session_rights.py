"""Sessions end when they lose the right to exist, on whichever replica holds the socket.

Two gateways (replicas) share one database. On PostgreSQL each has its own change feed,
so only NOTIFY carries a change from one to the other; on SQLite (one process) they share
the process's feed. Where a test says "without notifications", neither replica listens or
ticks on its own, and B has a feed of its own: only the ticks the test makes can find out.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from better_compute.bcd.inventory import simulated_gpus
from better_compute.compute import ComputeServices, compute_services
from better_compute.compute.nodes import record_heartbeat, register_node, retire
from better_compute.core.clock import Clock
from better_compute.gateway.joining import JoinHooks, Proof
from better_compute.gateway.service import Gateway
from better_compute.gateway.sessions import CREDENTIAL_REPLACED, REPLACED, open_session
from better_compute.gateway.tables import NodeSessionRow
from better_compute.gateway.websocket import LeanWebSocketProtocol
from better_compute.store.clock import SharedClock
from better_compute.testing.loopback import LoopbackServer
from better_compute.wire.protocol import InventoryUpdate

from .conftest import Tls, World, node_inventory
from .helpers import SkewedClock, connected, eventually, joined_node
from .test_sessions import closed_with, raw_session


@dataclass
class Replica:
    gateway: Gateway
    server: LoopbackServer
    compute: ComputeServices


@contextlib.asynccontextmanager
async def replica_b(
    world: World, tls: Tls, *, notified: bool = True, clock: Clock | None = None
) -> AsyncIterator[Replica]:
    """Another replica on the same database, serving on its own port."""
    shared = notified and not world.db.is_postgres  # SQLite: one process, one change feed
    compute = world.compute if shared else compute_services(world.db, world.clock)
    gateway = Gateway(
        world.db,
        clock or world.clock,
        compute.reservations,
        replica="replica-b",
        db_clock=SharedClock(world.clock),  # the database's clock is the world's
    )
    app = FastAPI()
    for router in gateway.routers():
        app.include_router(router)
    if notified:
        await gateway.start()  # LISTEN, and the tick on its own clock
    try:
        async with LoopbackServer(
            app, certfile=str(tls.cert_file), keyfile=str(tls.cert_file), name="b", ws=LeanWebSocketProtocol
        ) as server:
            yield Replica(gateway, server, compute)
            for connection in list(gateway.hub.connections.values()):
                await connection.close(1001, "test over")
    finally:
        await gateway.close()


async def _attached(gateway: Gateway, node_id: str) -> None:
    """The node's socket is on this replica and its first push went out (its check then saw a live session)."""
    await eventually(lambda: node_id in gateway.hub.connections and gateway.hub.connections[node_id].pushes >= 1)


async def _session_row(world: World, node_id: str) -> NodeSessionRow:
    async with world.db.session() as session:
        row = await session.get(NodeSessionRow, node_id)
    assert row is not None
    return row


async def _retire(compute: ComputeServices, world: World, node_id: str) -> None:
    async with compute.feed.transaction() as session:
        await retire(session, node_id, world.clock.now(), reason="test")


# -- item 4: retired, credential replaced, newer session elsewhere ------------------------------


async def test_retiring_a_node_on_another_replica_closes_its_socket_at_once(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    await gateway.start()
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with replica_b(world, tls) as b, raw_session(server, tls, credential, "node-a") as ws:
        await _attached(gateway, credential.node_id)
        await _retire(b.compute, world, credential.node_id)
        assert await closed_with(ws) == (4401, "node retired")
        await eventually(connected(gateway, credential.node_id, expected=False))
        node = await world.compute.nodes.get(world.tenant_id, credential.node_id)
        assert node.state == "retired" and not node.connected


async def test_without_notifications_the_next_tick_closes_a_retired_nodes_session(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with replica_b(world, tls, notified=False) as b, raw_session(server, tls, credential, "node-a") as ws:
        await _attached(gateway, credential.node_id)
        connection = gateway.hub.connections[credential.node_id]
        world.clock.advance(60)  # compute's last_seen_at is due with the next beat
        await ws.send(json.dumps({"type": "heartbeat", "seq": 1}))
        await eventually(lambda: connection.last_heartbeat == world.clock.now())
        await _retire(b.compute, world, credential.node_id)
        assert credential.node_id in gateway.hub.connections, "no notification reached replica A"
        assert await gateway.hub.tick() == [credential.node_id]
        assert await closed_with(ws) == (4401, "node retired")
        node = await world.compute.nodes.get(world.tenant_id, credential.node_id)
        assert not node.connected, "the heartbeat flushed after the retire did not mark it connected"
        await eventually(connected(gateway, credential.node_id, expected=False))


async def test_a_heartbeat_never_marks_a_retired_node_connected(world: World) -> None:
    async with world.compute.feed.transaction() as session:
        node = await register_node(session, now=world.clock.now(), pool_id=world.pool_id, name="node-a")
        await open_session(session, node_id=node.id, session_id="nss_1", replica="a", now=world.clock.now())
    await _retire(world.compute, world, node.id)
    async with world.compute.feed.transaction() as session:
        await record_heartbeat(session, node.id, world.clock.now())
    assert not (await world.compute.nodes.get(world.tenant_id, node.id)).connected


async def _vouched(*, pool_id: str, node_name: str, identity_token: str | None) -> Proof | None:
    """An identity check that verifies every join, as the substrate's TokenReview does a genuine node's."""
    return Proof()


async def test_a_rejoin_served_by_another_replica_closes_the_old_credentials_socket(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    await gateway.start()
    _, old = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with replica_b(world, tls) as b, raw_session(server, tls, old, "node-a") as ws:
        await _attached(gateway, old.node_id)
        b.gateway.register_hooks(
            JoinHooks(identity=_vouched)
        )  # re-joining a connected node needs proof of identity (gateway.joining)
        _, new = await joined_node(world, b.gateway, b.server, tls, tmp_path / "again", "node-a")
        assert new.node_id == old.node_id
        assert await closed_with(ws) == (4401, CREDENTIAL_REPLACED)
        async with raw_session(b.server, tls, new, "node-a"):
            await eventually(lambda: new.node_id in b.gateway.hub.connections)
            assert await b.gateway.is_connected(new.node_id)
        await eventually(lambda: old.node_id not in gateway.hub.connections)


async def test_a_newer_session_on_another_replica_closes_the_older_socket(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    await gateway.start()
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with replica_b(world, tls) as b, raw_session(server, tls, credential, "node-a") as older:
        await _attached(gateway, credential.node_id)
        async with raw_session(b.server, tls, credential, "node-a"):
            assert await closed_with(older) == (4409, REPLACED)
            newer = b.gateway.hub.connections[credential.node_id].session_id
            await eventually(lambda: credential.node_id not in gateway.hub.connections)
            row = await _session_row(world, credential.node_id)
            assert row.session_id == newer and row.connected and row.replica == "replica-b"


async def test_a_replaced_session_cannot_rewrite_the_nodes_inventory(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    """Without notifications replica A still holds the older socket; its inventory write is refused."""
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with replica_b(world, tls, notified=False) as b, raw_session(server, tls, credential, "node-a") as older:
        await _attached(gateway, credential.node_id)
        async with raw_session(b.server, tls, credential, "node-a"):
            assert credential.node_id in gateway.hub.connections
            shrunk = node_inventory("node-a").model_copy(update={"gpus": simulated_gpus("2xH100", "node-a")})
            await older.send(InventoryUpdate(inventory=shrunk).to_wire())
            assert await closed_with(older) == (4409, REPLACED)
            node = await world.compute.nodes.get(world.tenant_id, credential.node_id)
            assert len([d for d in node.devices if d.present]) == 8
            assert await b.gateway.is_connected(credential.node_id)


# -- item 5: a live session swept by another replica; skew ---------------------------------------


async def test_a_session_swept_by_another_replica_is_closed_by_its_owner_so_bcd_reconnects(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    async with replica_b(world, tls, notified=False) as b, raw_session(server, tls, credential, "node-a") as ws:
        await _attached(gateway, credential.node_id)
        connection = gateway.hub.connections[credential.node_id]
        for seq in (1, 2, 3):  # beats arrive, but replica A's tick is stalled: nothing is flushed
            world.clock.advance(10)
            await ws.send(json.dumps({"type": "heartbeat", "seq": seq}))
            await eventually(lambda: connection.last_heartbeat == world.clock.now())
        world.clock.advance(5)
        assert await b.gateway.hub.tick() == [credential.node_id], "B saw no beat for 35 s: stale"
        assert not await gateway.is_connected(credential.node_id)
        assert await gateway.hub.tick() == [credential.node_id]  # A's tick comes back
        assert await closed_with(ws) == (4408, "missed heartbeats")
    async with raw_session(server, tls, credential, "node-a"):  # what bcd does next
        await eventually(connected(gateway, credential.node_id))


async def test_a_replica_whose_clock_runs_ahead_does_not_sweep_a_live_session(
    world: World, gateway: Gateway, server: LoopbackServer, tls: Tls, tmp_path: Path
) -> None:
    _, credential = await joined_node(world, gateway, server, tls, tmp_path, "node-a")
    ahead = SkewedClock(world.clock, offset=25)  # 15 s beyond the normal lag of one tick
    async with (
        replica_b(world, tls, notified=False, clock=ahead) as b,
        raw_session(server, tls, credential, "node-a") as ws,
    ):
        await _attached(gateway, credential.node_id)
        connection = gateway.hub.connections[credential.node_id]
        for seq in range(1, 7):
            world.clock.advance(10)
            await ws.send(json.dumps({"type": "heartbeat", "seq": seq}))
            await eventually(lambda: connection.last_heartbeat == world.clock.now())
            # B ticks just before A flushes this beat: the newest beat on record is 10 s old,
            # which B's clock, 25 s ahead, would call 35 s (stale); the database's says 10.
            assert await b.gateway.hub.tick() == []
            assert await gateway.hub.tick() == []
        assert await gateway.is_connected(credential.node_id)
