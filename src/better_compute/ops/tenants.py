"""Tenants: list them, and find one by id or by name (what `--tenant` accepts)."""

from __future__ import annotations

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.iam import Tenant
from better_compute.ops.views import View
from better_compute.server import Compute

__all__ = ["create_tenant", "list_tenants", "tenant_id_of", "tenant_view"]


def tenant_view(tenant: Tenant) -> View:
    return {"id": tenant.id, "name": tenant.name}


async def create_tenant(compute: Compute, name: str) -> View:
    return tenant_view(await compute.iam.create_tenant(name))


async def list_tenants(compute: Compute, *, only: str | None = None) -> list[View]:
    """Every tenant (the operator's CLI), or only the one an API key belongs to."""
    tenants = await compute.iam.list_tenants()
    return [tenant_view(t) for t in tenants if only is None or t.id == only]


async def tenant_id_of(compute: Compute, ref: str) -> str:
    """The id of the tenant whose id or name is `ref`; NOT_FOUND naming --tenant otherwise."""
    for tenant in await compute.iam.list_tenants():
        if ref in (tenant.id, tenant.name):
            return tenant.id
    raise ComputeError(ErrorCode.NOT_FOUND, f"no tenant {ref!r} (see `better-compute tenants list`)", "/tenant")
