"""HTTP: the substrate's state read and the tenant's clusters (mounted with the kubernetes module).

GET  /v1/pools/{pool}/kubernetes-substrate              the state read (pool id, or name: an archived pool's too)
GET  /v1/kubernetes/clusters                             the tenant's clusters
GET  /v1/kubernetes/clusters/{cluster_id}                one cluster
POST /v1/kubernetes/clusters/{cluster_id}/credentials    a kubeconfig for a created cluster
POST /v1/kubernetes/clusters/{cluster_id}/upgrade        upgrade a created cluster ({"version": "1.32"})
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import PlainTextResponse

from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.ops import clusters

__all__ = ["router"]

router = APIRouter(tags=["kubernetes"])


@router.get("/v1/pools/{pool}/kubernetes-substrate")
async def get_substrate(pool: str, compute: ComputeDep, tenant_id: CallerTenant) -> dict[str, Any]:
    """The pool's substrate, by id or name (an archived one's till the name is reused): state, cluster, Nodes, steps."""
    return await clusters.get_substrate(compute, tenant_id, pool)


@router.get("/v1/kubernetes/clusters")
async def list_clusters(compute: ComputeDep, tenant_id: CallerTenant) -> dict[str, Any]:
    return {"clusters": await clusters.list_clusters(compute, tenant_id)}


@router.get("/v1/kubernetes/clusters/{cluster_id}")
async def get_cluster(cluster_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> dict[str, Any]:
    return await clusters.get_cluster(compute, tenant_id, cluster_id)


@router.post("/v1/kubernetes/clusters/{cluster_id}/credentials")
async def credentials(cluster_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> PlainTextResponse:
    """A kubeconfig with a 600 s admin credential (created clusters only)."""
    text = await clusters.cluster_credentials(compute, tenant_id, cluster_id)
    return PlainTextResponse(text, media_type="application/yaml", headers={"Cache-Control": "no-store"})


class UpgradeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str = Field(description="A version the provider offers the cluster, such as 1.32.")


@router.post("/v1/kubernetes/clusters/{cluster_id}/upgrade", status_code=202)
async def upgrade(cluster_id: str, body: UpgradeBody, compute: ComputeDep, tenant_id: CallerTenant) -> dict[str, Any]:
    """Upgrade a created cluster, draining its nodes one at a time.

    The control plane is upgraded in place, then each node pool; a node waits cordoned until its bookings
    end (nothing is force-released). The substrate's state read shows the drain. The same version again
    is a no-op."""
    return await clusters.upgrade_cluster(compute, tenant_id, cluster_id, body.version)
