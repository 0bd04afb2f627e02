"""After a reconnect storm the hub hands malloc's freed pages back to the OS (gateway/memory.py)."""

from __future__ import annotations

from typing import cast

from starlette.websockets import WebSocket

from better_compute.gateway.hub import NodeConnection
from better_compute.gateway.memory import RELEASE_AFTER_SESSIONS, release_free_memory
from better_compute.gateway.service import Gateway

from .conftest import World


async def test_a_tick_after_a_storm_of_sessions_releases_freed_memory_once(world: World, gateway: Gateway) -> None:
    released: list[int] = []
    gateway.hub.release_memory = lambda: released.append(len(gateway.hub.connections))
    hub = gateway.hub

    def storm(sessions: int) -> None:
        for i in range(sessions):  # opened and gone again: what is left of them is freed memory
            connection = NodeConnection(
                cast(WebSocket, None), node_id=f"node_{i}", session_id=f"nss_{i}", now=world.clock.now()
            )
            hub.attach(connection)
            hub.detach(connection)

    storm(RELEASE_AFTER_SESSIONS - 1)
    await hub.tick()
    assert released == [], "a few sessions now and then are no storm"
    storm(1)
    await hub.tick()
    assert released == [0]
    await hub.tick()
    assert released == [0], "nothing opened since: nothing to release"


async def test_the_tail_of_a_storm_is_released_once_at_the_first_tick_without_new_sessions(
    world: World, gateway: Gateway
) -> None:
    released: list[int] = []
    hub = gateway.hub
    opened = 0

    def release() -> None:
        released.append(opened)

    hub.release_memory = release

    def storm(sessions: int) -> None:
        nonlocal opened
        for _ in range(sessions):
            connection = NodeConnection(
                cast(WebSocket, None), node_id=f"node_{opened}", session_id=f"nss_{opened}", now=world.clock.now()
            )
            hub.attach(connection)
            hub.detach(connection)
            opened += 1

    storm(RELEASE_AFTER_SESSIONS)
    await hub.tick()
    assert released == [RELEASE_AFTER_SESSIONS]
    storm(10)  # the storm's stragglers: hellos told to come back, later joins
    await hub.tick()
    assert released == [RELEASE_AFTER_SESSIONS], "the tail still comes in"
    await hub.tick()
    assert released == [RELEASE_AFTER_SESSIONS, RELEASE_AFTER_SESSIONS + 10], "the tail is over: its freed memory goes"
    storm(3)
    await hub.tick()
    await hub.tick()
    assert len(released) == 2, "a few sessions after the storm's tail are no storm"


def test_release_free_memory_calls_glibc() -> None:
    assert release_free_memory()
