"""A small compute world for the compute tests: a tenant, a site, a pool and ready nodes with GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from better_compute.compute import (
    SPOT_LABEL,
    ComputeServices,
    Node,
    compute_services,
    mark_ready,
    register_node,
    set_system_label,
)
from better_compute.core.clock import SimClock
from better_compute.iam import Iam, Tenant
from better_compute.store import Database


@dataclass
class World:
    db: Database
    clock: SimClock
    iam: Iam
    compute: ComputeServices
    tenant: Tenant
    site_id: str
    pool_id: str

    async def node(self, name: str, gpus: int, *, spot: bool = False, ready: bool = True, pool_id: str = "") -> Node:
        inventory = {
            "os": {"hostname": f"{name}.internal", "kubernetesNodeName": name},
            "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 80GB HBM3"} for i in range(gpus)],
        }
        async with self.compute.reservations.transaction() as session:
            now = self.clock.now()
            node = await register_node(
                session, now=now, pool_id=pool_id or self.pool_id, name=name, inventory=inventory
            )
            if spot:
                await set_system_label(session, node.id, SPOT_LABEL, "spot", now)
            if ready:
                node = await mark_ready(session, node.id, now)
        return node


async def make_world(db: Database, clock: SimClock, tenant_name: str = "acme") -> World:
    iam = Iam(db, clock)
    tenant = await iam.create_tenant(tenant_name)
    compute = compute_services(db, clock)
    site = await compute.sites.create(tenant.id, "k8s", "shared", "us-east-1")
    pool = await compute.pools.create(tenant.id, "gpu-fleet", site.id, "metal-host", "H100", {"kubernetes": {}})
    return World(db, clock, iam, compute, tenant, site.id, pool.id)


@pytest.fixture
async def world(database: Database, clock: SimClock) -> World:
    return await make_world(database, clock)
