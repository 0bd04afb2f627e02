"""GET /v1/pools and /v1/pools/{name}: the tenant's pools with their node counts."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.ops import pools
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.get("")
async def list_pools(compute: ComputeDep, tenant_id: CallerTenant, archived: bool = False) -> list[View]:
    """The tenant's pools (archived ones with ?archived=true)."""
    return await pools.list_pools(compute, tenant_id, include_archived=archived)


@router.get("/{name}")
async def get_pool(name: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """One pool by name, with its policy."""
    return await pools.get_pool(compute, tenant_id, name)
