"""GET /v1/pools and /v1/pools/{name}: the tenant's pools with their node counts; POST .../archive."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.answers import JsonArray
from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.ops import pools
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.get("", response_model=list[View])
async def list_pools(compute: ComputeDep, tenant_id: CallerTenant, archived: bool = False) -> JsonArray:
    """The tenant's pools (archived ones with ?archived=true)."""
    return JsonArray(await pools.list_pools_json(compute, tenant_id, include_archived=archived))


@router.get("/{name}")
async def get_pool(name: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """One pool by name, with its policy."""
    return await pools.get_pool(compute, tenant_id, name)


@router.post("/{name}/archive")
async def archive_pool(name: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """Archive a pool: its nodes drain and its substrate is torn down, as a pruned apply does.

    New bookings stop and the nodes are cordoned; bookings that exist are never force-released.
    Archiving a pool that is archiving is harmless."""
    return await pools.archive_pool(compute, tenant_id, name)
