"""The whole product against the simulated world: a FleetConfig document in, the emulators' records out.

`world` is a Compute with vps, kubernetes (its substrate agent pointing at the Cloud's
control plane) and fleet, on the test's database and the Cloud's SimClock, served at
the Cloud's control plane URL, so bcd in every Node's pod joins over real TLS.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from better_compute.server import Compute
from better_compute.store import Database
from better_compute.testing import Cloud, KubeCluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = "e2e-server-secret-0123456789abcdef0123"


@dataclass
class World:
    cloud: Cloud
    compute: Compute
    tenant_id: str
    doks_token_ref: str

    def document(self, provider: str) -> dict[str, Any]:
        text = (EXAMPLES / f"fleet-{provider}.json").read_text().replace("secret://<tenant>/<id>", self.doks_token_ref)
        document: dict[str, Any] = json.loads(text)
        return document

    async def step(self, seconds: float = 5.0) -> None:
        """Move simulated time on by `seconds`, running what falls due, and let what that readied run."""
        clock = self.cloud.clock
        await self.compute.run_until_idle(until=clock.now() + timedelta(seconds=seconds))
        await self.cloud.settle()
        await drain()

    async def until(
        self, check: Callable[[], Awaitable[bool]], *, minutes: float = 60, what: str = "", every: float = 5.0
    ) -> None:
        """Step (`every` simulated seconds) until `check()` holds; fail after `minutes` of simulated time."""
        deadline = self.cloud.clock.now() + timedelta(minutes=minutes)
        while not await check():
            if self.cloud.clock.now() > deadline:
                views = [
                    await self.compute.kubernetes_substrates.get(tenant_id=self.tenant_id, pool_id=p.id)
                    for p in await self.compute.pools.list(self.tenant_id)
                    if p.policy.get("substrate")
                ]
                raise AssertionError(f"not reached within {minutes} simulated minutes: {what}; substrates: {views}")
            await self.step(every)

    def kube_cluster_of(self, node_name: str) -> KubeCluster:
        for cluster in self.cloud.kube.clusters.values():
            if node_name in cluster.kubelet.node_names:
                return cluster
        raise AssertionError(f"no emulated cluster has a Node {node_name}")


async def drain(limit: int = 1000) -> None:
    """Yield until the event loop has nothing else ready to run (at most `limit` times).

    A step used to sleep 5 ms of real time here for bcd's I/O. bcd and the gateway share this
    loop over loopback TLS, so what one side writes is readable by the other at the loop's next
    poll, and the step's own database reads leave the loop polling between their round trips: the
    stepping almost never had anything left to run by now, and 5 ms a step added up to seconds a
    story. What a callback readies runs before this returns; I/O still in flight (a query on
    aiosqlite's thread, a PostgreSQL round trip) goes on during the next step's own reads.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)  # CPython's queue of ready callbacks (asyncio.base_events)
    for _ in range(limit):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return


@pytest.fixture
async def world(database: Database) -> AsyncIterator[World]:
    cloud = Cloud()
    await cloud.start()
    compute = cloud.compute(database.url, SECRET)
    world = World(cloud, compute, "", "")
    try:
        tenant = await compute.iam.create_tenant("acme")
        world.tenant_id = tenant.id
        world.doks_token_ref = await compute.secrets.create(tenant.id, cloud.doks_token)
        cloud.serve(compute)
        yield world
    finally:
        # The world first (bcd's sessions end, the control plane stops serving), then the Compute,
        # so no request is left holding a database connection when its pool closes.
        await cloud.stop()
        await world.compute.close()  # a test may have swapped in a Compute of its own
