"""Pools: listed and read by name, with how many nodes each has and how many are connected; archived."""

from __future__ import annotations

from better_compute.compute.models import NodeCounts, Pool
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.ops.views import View, iso
from better_compute.server import Compute

__all__ = ["archive_pool", "get_pool", "list_pools", "pool_named"]


def pool_view(pool: Pool, counts: NodeCounts) -> View:
    return {
        "id": pool.id,
        "name": pool.name,
        "state": pool.state,
        "class": pool.pool_class,
        "gpuModel": pool.gpu_model,
        "siteId": pool.site_id,
        "nodes": counts.nodes,
        "connectedNodes": counts.connected,
        "readyNodes": counts.ready,
        "policy": pool.policy,
        "createdAt": iso(pool.created_at),
        "updatedAt": iso(pool.updated_at),
    }


async def pool_named(compute: Compute, tenant_id: str, name: str) -> Pool:
    """The tenant's pool called `name` (NOT_FOUND at /pool otherwise)."""
    return await compute.pools.get_by_name(tenant_id, name)


async def list_pools(compute: Compute, tenant_id: str, *, include_archived: bool = False) -> list[View]:
    pools = await compute.pools.list(tenant_id, include_archived=include_archived)
    counts = await compute.nodes.counts(tenant_id)
    return [pool_view(pool, counts.get(pool.id, NodeCounts())) for pool in pools]


async def get_pool(compute: Compute, tenant_id: str, name: str) -> View:
    pool = await pool_named(compute, tenant_id, name)
    counts = await compute.nodes.counts(tenant_id, pool_id=pool.id)
    return pool_view(pool, counts.get(pool.id, NodeCounts()))


async def archive_pool(compute: Compute, tenant_id: str, name: str) -> View:
    """The same teardown a pruned apply starts, for one pool (the fleet module's rule)."""
    if "fleet" not in compute.modules:
        raise ComputeError(ErrorCode.INVALID_STATE, "this Compute has no fleet module: archiving is its rule", "/app")
    pool: Pool = await compute.fleet.archive_pool(name, tenant_id=tenant_id)
    counts = await compute.nodes.counts(tenant_id, pool_id=pool.id)
    return pool_view(pool, counts.get(pool.id, NodeCounts()))
