"""GET /v1/nodes: the tenant's nodes (?pool=NAME for one pool's), connected, state and labels;
GET /v1/nodes/{node}: one, with each GPU and its health."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.answers import JsonArray
from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.ops import nodes
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


@router.get("", response_model=list[View])
async def list_nodes(
    compute: ComputeDep, tenant_id: CallerTenant, pool: str | None = None, retired: bool = False
) -> JsonArray:
    """The tenant's nodes, or one pool's; retired ones with ?retired=true."""
    return JsonArray(await nodes.list_nodes_json(compute, tenant_id, pool=pool, include_retired=retired))


@router.get("/{node}")
async def get_node(node: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """One node by id (or its name, among the live ones), with each GPU: booked or not, and its health."""
    return await nodes.get_node(compute, tenant_id, node)
