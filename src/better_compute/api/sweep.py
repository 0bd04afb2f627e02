"""HTTP: the orphan sweep of the calling tenant's provider accounts (mounted with the kubernetes module).

GET  /v1/sweep[?account=NAME]   what carries better-compute's marks and no record owns
POST /v1/sweep/delete           {"ids": [...], "account": null}: remove those the sweep finds now, one by one
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.ops import sweep as ops_sweep

__all__ = ["router"]

router = APIRouter(prefix="/v1/sweep", tags=["kubernetes"])

MAX_IDS = 1000


class DeleteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        min_length=1, max_length=MAX_IDS, description="The orphans' ids, as the sweep listed them."
    )
    account: str | None = Field(default=None, description="Sweep only this provider account.")


@router.get("")
async def sweep(
    compute: ComputeDep,
    tenant_id: CallerTenant,
    account: Annotated[str | None, Query(description="Only this provider account (its name).")] = None,
) -> dict[str, Any]:
    """What carries better-compute's marks at the tenant's provider accounts and no record owns; changes nothing.

    Clusters, node pools, and in each cluster it reaches bcd's objects, the claim and bc-substrate, as after
    a database restored from an older backup. The findings are kept for doctor (`kubernetes.orphans-found`)."""
    return await ops_sweep.sweep(compute, tenant_id, account)


@router.post("/delete")
async def delete(body: DeleteBody, compute: ComputeDep, tenant_id: CallerTenant) -> dict[str, Any]:
    """Remove the named orphans that a sweep finds now, one by one; answers each outcome and the sweep after.

    Each is `deleted`, `pending` (a cluster whose node pools go first: ask again once they are gone),
    `absent` (the sweep does not find it now) or `failed` with why. What the sweep does not find is
    never touched, so a request repeated is harmless."""
    return await ops_sweep.delete_orphans(compute, tenant_id, body.ids, body.account)
