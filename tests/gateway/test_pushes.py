"""Assignment pushes run in a short task per connection, only while one is wanted (gateway/hub.py).

Every connection gets its newest assignment, in order; one whose socket does not drain holds
up only its own pushes; a connected node that is not being pushed to holds no task.
"""

from __future__ import annotations

import asyncio
import json
from typing import cast

import pytest
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from better_compute.compute.models import Assignment
from better_compute.gateway.hub import Hub, NodeConnection
from better_compute.gateway.service import Gateway
from better_compute.gateway.sessions import SessionEnd

from .conftest import World
from .helpers import eventually

NODES = 40


class FakeSocket:
    """The gateway's side of a node's WebSocket: records each text frame; `stuck` never drains."""

    def __init__(self, *, stuck: bool = False) -> None:
        self.client_state = WebSocketState.CONNECTED
        self.sent: list[str] = []
        self.closed: list[int] = []
        self.stuck = stuck
        self._drained = asyncio.Event()

    async def send_text(self, data: str) -> None:
        if self.stuck:
            await self._drained.wait()  # a peer that stopped reading: the write buffer never drains
        self.sent.append(data)

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed.append(code)
        self.client_state = WebSocketState.DISCONNECTED

    def versions(self) -> list[int]:
        return [int(json.loads(frame)["assignment"]["systemLabels"]["v"]) for frame in self.sent]


class Versions:
    """Each node's assignment, labelled with a version the test raises."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}

    async def assignment(self, node_id: str) -> Assignment:
        await asyncio.sleep(0)  # a database read: other pushes go on meanwhile
        return Assignment(node_id=node_id, reservations=(), system_labels={"v": str(self.now[node_id])}, cordoned=False)


def attached(hub: Hub, world: World, node_id: str, socket: FakeSocket) -> NodeConnection:
    connection = NodeConnection(
        cast(WebSocket, socket), node_id=node_id, session_id=f"nss_{node_id}", now=world.clock.now()
    )
    hub.attach(connection)
    return connection


def push_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("gateway:push:")]


@pytest.fixture
def hub(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> Hub:
    async def session_goes_on(_connection: NodeConnection) -> SessionEnd | None:
        return None

    monkeypatch.setattr(gateway.hub, "check", session_goes_on)
    return gateway.hub


async def test_every_connection_gets_its_newest_assignment_in_order_and_idle_ones_hold_no_task(
    world: World, hub: Hub
) -> None:
    versions = Versions()
    sockets = {f"node_{i}": FakeSocket() for i in range(NODES)}
    connections = {node_id: attached(hub, world, node_id, socket) for node_id, socket in sockets.items()}
    for node_id, connection in connections.items():
        versions.now[node_id] = 0
        hub.start_pushing(connection, versions.assignment)
    for version in range(1, 6):  # changes land while the pushes before them are still in flight
        for node_id in versions.now:
            versions.now[node_id] = version
        hub.push_local(list(sockets))
        await asyncio.sleep(0)
    await eventually(lambda: not push_tasks())
    for node_id, socket in sockets.items():
        sent = socket.versions()
        assert sent == sorted(sent), f"{node_id} got an older assignment after a newer one: {sent}"
        assert sent[-1] == 5, f"{node_id} did not get its newest assignment: {sent}"
        assert connections[node_id].pushes == len(sent)
        assert connections[node_id].pusher is None
    before = {node_id: len(socket.sent) for node_id, socket in sockets.items()}
    hub.push_local(["node_0"])  # one node's change: one task, for it alone, gone once it is pushed
    assert len(push_tasks()) == 1
    await eventually(lambda: not push_tasks())
    assert sockets["node_0"].versions()[before["node_0"] :] == [5]
    assert all(len(socket.sent) == before[node_id] for node_id, socket in sockets.items() if node_id != "node_0")


async def test_a_socket_that_does_not_drain_holds_up_only_its_own_pushes(world: World, hub: Hub) -> None:
    versions = Versions()
    stuck = FakeSocket(stuck=True)
    sockets = {"node_stuck": stuck} | {f"node_{i}": FakeSocket() for i in range(NODES)}
    connections = {node_id: attached(hub, world, node_id, socket) for node_id, socket in sockets.items()}
    for node_id, connection in connections.items():
        versions.now[node_id] = 1
        hub.start_pushing(connection, versions.assignment)
    await eventually(lambda: all(s.versions() == [1] for n, s in sockets.items() if n != "node_stuck"))
    for node_id in versions.now:
        versions.now[node_id] = 2
    hub.push_local(list(sockets))
    await eventually(lambda: all(s.versions() == [1, 2] for n, s in sockets.items() if n != "node_stuck"))
    stuck_pusher = connections["node_stuck"].pusher
    assert stuck_pusher is not None and not stuck_pusher.done()
    assert push_tasks() == [stuck_pusher], "one task for the stuck socket, however many pushes it is owed"
    assert stuck.sent == []
    await hub.stop_pushing(connections["node_stuck"])
    assert stuck_pusher.cancelled()
    assert connections["node_stuck"].pusher is None
    hub.want_push(connections["node_stuck"])
    assert push_tasks() == [], "a connection that stopped pushing starts no pusher"


async def test_nothing_is_pushed_before_the_welcome_and_the_wanted_push_follows_it(world: World, hub: Hub) -> None:
    versions = Versions()
    socket = FakeSocket()
    connection = attached(hub, world, "node_a", socket)
    versions.now["node_a"] = 7
    hub.push_local(["node_a"])  # a change between the session opening and the welcome
    await asyncio.sleep(0)
    assert socket.sent == [] and push_tasks() == []
    hub.start_pushing(connection, versions.assignment)
    await eventually(lambda: socket.versions() == [7])
    await eventually(lambda: not push_tasks())


async def test_an_ended_session_is_closed_and_pushed_no_more(
    world: World, gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = gateway.hub

    async def replaced(_connection: NodeConnection) -> SessionEnd | None:
        return SessionEnd("replaced", "a newer session")

    monkeypatch.setattr(hub, "check", replaced)
    versions = Versions()
    socket = FakeSocket()
    connection = attached(hub, world, "node_a", socket)
    versions.now["node_a"] = 1
    hub.start_pushing(connection, versions.assignment)
    await eventually(lambda: socket.closed == [4409])
    await eventually(lambda: not push_tasks())
    hub.want_push(connection)
    assert socket.sent == [] and push_tasks() == []


class LostSocket(FakeSocket):
    """A socket whose peer is gone though it still shows connected: Starlette's send raises."""

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        raise WebSocketDisconnect(code=1006)


async def test_closing_connections_whose_sockets_are_lost_closes_the_others_and_raises_nothing(
    world: World, hub: Hub
) -> None:
    lost = attached(hub, world, "node_lost", LostSocket())
    other = FakeSocket()
    attached(hub, world, "node_other", other)
    await lost.close(1001, "gateway shutting down")
    await hub.close()  # as the gateway shuts down with a node gone at the last moment
    assert other.closed == [1001]
