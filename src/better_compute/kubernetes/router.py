"""HTTP: the substrate's state read and the tenant's clusters.

GET  /v1/pools/{pool}/kubernetes-substrate              the state read (pool id, or name: an archived pool's too)
GET  /v1/kubernetes/clusters                             the tenant's clusters
GET  /v1/kubernetes/clusters/{cluster_id}                one cluster
POST /v1/kubernetes/clusters/{cluster_id}/credentials    a kubeconfig for a created cluster
POST /v1/kubernetes/clusters/{cluster_id}/upgrade        upgrade a created cluster ({"version": "1.32"})
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import PlainTextResponse

from better_compute.core.http import compute_of, current_principal
from better_compute.kubernetes.clusters.records import ClusterRecord

__all__ = ["cluster_dict", "router"]

router = APIRouter(tags=["kubernetes"])


def cluster_dict(record: ClusterRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "provider": record.provider,
        "account": record.account,
        "mode": record.mode,
        "location": record.location,
        "providerClusterId": record.provider_cluster_id,
        "substratePoolId": record.substrate_pool_id,
        "status": record.status,
        "message": record.message,
        "version": record.version,
        "upgradingTo": record.upgrading_to,
        "nodePools": [
            {
                "name": p.name,
                "flavor": p.flavor,
                "machineType": p.machine_type,
                "nodes": p.node_count,
                "spot": p.spot,
                "status": p.status,
                "message": p.message,
            }
            for p in record.node_pools
        ],
    }


@router.get("/v1/pools/{pool}/kubernetes-substrate")
async def get_substrate(pool: str, request: Request) -> dict[str, Any]:
    """The pool's substrate, by id or name (an archived pool's until the name is reused): state, cluster, Nodes."""
    principal = current_principal(request)
    view = await compute_of(request).kubernetes_substrates.get(tenant_id=principal.tenant_id, pool_id=pool)
    result: dict[str, Any] = view.to_dict()
    return result


@router.get("/v1/kubernetes/clusters")
async def list_clusters(request: Request) -> dict[str, Any]:
    principal = current_principal(request)
    records = await compute_of(request).kubernetes_clusters.list(tenant_id=principal.tenant_id)
    return {"clusters": [cluster_dict(r) for r in records]}


@router.get("/v1/kubernetes/clusters/{cluster_id}")
async def get_cluster(cluster_id: str, request: Request) -> dict[str, Any]:
    principal = current_principal(request)
    record = await compute_of(request).kubernetes_clusters.get(tenant_id=principal.tenant_id, cluster_id=cluster_id)
    return cluster_dict(record)


@router.post("/v1/kubernetes/clusters/{cluster_id}/credentials")
async def credentials(cluster_id: str, request: Request) -> PlainTextResponse:
    """A kubeconfig with a 600 s admin credential (created clusters only)."""
    principal = current_principal(request)
    text = await compute_of(request).kubernetes_clusters.credentials(
        tenant_id=principal.tenant_id, cluster_id=cluster_id
    )
    return PlainTextResponse(text, media_type="application/yaml", headers={"Cache-Control": "no-store"})


class UpgradeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str = Field(description="A version the provider offers the cluster, such as 1.32.")


@router.post("/v1/kubernetes/clusters/{cluster_id}/upgrade", status_code=202)
async def upgrade(cluster_id: str, body: UpgradeBody, request: Request) -> dict[str, Any]:
    """Upgrade a created cluster, draining its nodes one at a time.

    The control plane is upgraded in place, then each node pool; a node waits cordoned until its bookings
    end (nothing is force-released). The substrate's state read shows the drain. The same version again
    is a no-op."""
    principal = current_principal(request)
    record = await compute_of(request).kubernetes_clusters.upgrade(
        tenant_id=principal.tenant_id, cluster_id=cluster_id, version=body.version
    )
    return cluster_dict(record)
