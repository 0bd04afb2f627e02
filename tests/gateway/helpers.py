"""Joining a node through the real HTTP endpoint, and waiting for things the event loop will do."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import NodeCredential
from better_compute.bcd.join import join
from better_compute.core.clock import Clock
from better_compute.gateway.service import Gateway
from better_compute.testing.loopback import LoopbackServer

from .conftest import Tls, World, node_config, node_inventory


async def joined_node(
    world: World,
    gateway: Gateway,
    server: LoopbackServer,
    tls: Tls,
    directory: Path,
    name: str,
    *,
    pins: tuple[str, ...] = (),
) -> tuple[BcdConfig, NodeCredential]:
    """A node that ran `bcd join` with a one-use token: its config and stored credential."""
    _, value = await gateway.tokens.create(world.tenant_id, world.pool_id, uses=1)
    config = node_config(server, tls, directory, name, pins=pins)
    config.token_file.write_text(value)
    credential = await join(config, node_inventory(name), clock=world.clock)
    return config, credential


def connected(gateway: Gateway, node_id: str, *, expected: bool = True) -> Callable[[], Awaitable[bool]]:
    """A check for `eventually`: the node's session is (or is no longer) connected."""

    async def check() -> bool:
        return await gateway.is_connected(node_id) == expected

    return check


async def eventually(check: Callable[[], Awaitable[bool]] | Callable[[], bool], *, seconds: float = 10.0) -> None:
    """Wait (in real time: this is I/O, not a spec duration) until `check()` holds."""
    async with asyncio.timeout(seconds):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await asyncio.sleep(0.01)


class SkewedClock:
    """One replica's view of the world's clock, `offset` seconds off."""

    def __init__(self, world: Clock, offset: float) -> None:
        self.world = world
        self.offset = timedelta(seconds=offset)

    def now(self) -> datetime:
        return self.world.now() + self.offset

    async def sleep(self, seconds: float) -> None:
        await self.world.sleep(seconds)
