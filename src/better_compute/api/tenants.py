"""GET /v1/tenants: the tenant the API key belongs to (an API key never sees other tenants)."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.ops import tenants
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/tenants", tags=["tenants"])


@router.get("")
async def list_tenants(compute: ComputeDep, tenant_id: CallerTenant) -> list[View]:
    """The caller's tenant, as a list of one."""
    return await tenants.list_tenants(compute, only=tenant_id)
