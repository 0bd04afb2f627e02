"""Pools: listed and read by name, with how many nodes each has and how many are connected; archived."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.listing import Raw, pool_rows
from better_compute.compute.models import Pool
from better_compute.compute.pools import get_pool_by_name, no_pool_named
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.ops.list_answers import ListAnswers
from better_compute.ops.views import RowViews, View, iso
from better_compute.server import Compute

__all__ = ["archive_pool", "get_pool", "list_pools", "list_pools_json", "pool_id_named", "pool_named"]


def pool_view(row: Any, raw: Raw) -> View:
    """A row of compute.listing.pool_rows as the API answers it (unpacked by position: a Row's
    attributes cost a lookup each, and a list has a hundred rows of twelve)."""
    id_, name, state, pool_class, gpu_model, site_id, policy, created_at, updated_at, nodes, connected, ready = row
    return {
        "id": id_,
        "name": name,
        "state": state,
        "class": pool_class,
        "gpuModel": gpu_model,
        "siteId": site_id,
        "nodes": int(nodes),
        "connectedNodes": int(connected),
        "readyNodes": int(ready),
        "policy": raw.json(policy),
        "createdAt": iso(raw.moment(created_at)),
        "updatedAt": iso(raw.moment(updated_at)),
    }


POOLS = RowViews(pool_view)


async def pool_named(compute: Compute, tenant_id: str, name: str) -> Pool:
    """The tenant's pool called `name` (NOT_FOUND at /pool otherwise)."""
    return await compute.pools.get_by_name(tenant_id, name)


async def pool_id_named(session: AsyncSession, tenant_id: str, name: str, *, or_archived: bool = False) -> str:
    """pool_named inside the caller's read session: a list filtered by pool reads in one session (with
    `or_archived`, a pool of that name archived last when no live one has it)."""
    pool = await get_pool_by_name(session, tenant_id=tenant_id, name=name, or_archived=or_archived)
    if pool is None:
        raise no_pool_named(name)
    return pool.id


async def list_pools(compute: Compute, tenant_id: str, *, include_archived: bool = False) -> list[View]:
    """One statement: the pools with their node counts."""
    async with compute.db.read() as session:
        rows = await pool_rows(session, tenant_id=tenant_id, include_archived=include_archived)
    return POOLS.views(rows, Raw.of(session))


async def list_pools_json(compute: Compute, tenant_id: str, *, include_archived: bool = False) -> bytes:
    """list_pools as the API's JSON array, kept until the tenant's lists change (ops.list_answers)."""

    async def encode(session: AsyncSession) -> bytes:
        rows = await pool_rows(session, tenant_id=tenant_id, include_archived=include_archived)
        return POOLS.json(rows, Raw.of(session))

    return await ListAnswers.of(compute.db).answer(tenant_id, ("pools", include_archived), encode)


async def get_pool(compute: Compute, tenant_id: str, name: str) -> View:
    async with compute.db.read() as session:
        rows = await pool_rows(session, tenant_id=tenant_id, name=name)
    if not rows:
        raise no_pool_named(name)
    return pool_view(rows[0], Raw.of(session))


async def archive_pool(compute: Compute, tenant_id: str, name: str) -> View:
    """The same teardown a pruned apply starts, for one pool (the fleet module's rule)."""
    if "fleet" not in compute.modules:
        raise ComputeError(ErrorCode.INVALID_STATE, "this Compute has no fleet module: archiving is its rule", "/app")
    pool: Pool = await compute.fleet.archive_pool(name, tenant_id=tenant_id)
    async with compute.db.read() as session:
        (row,) = await pool_rows(session, tenant_id=tenant_id, include_archived=True, pool_id=pool.id)
    return pool_view(row, Raw.of(session))
