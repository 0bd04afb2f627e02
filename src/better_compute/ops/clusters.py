"""Pool substrates and managed clusters: the state read, the tenant's clusters, a kubeconfig, an upgrade.

The kubernetes module's services (`compute.kubernetes_substrates`, `compute.kubernetes_clusters`)
answer records; this is the one place they become the views `better-compute substrates|clusters`
and `/v1/kubernetes/...` print.
"""

from __future__ import annotations

from better_compute.kubernetes.clusters.records import ClusterRecord
from better_compute.ops.views import View
from better_compute.server import Compute

__all__ = ["cluster_credentials", "cluster_view", "get_cluster", "get_substrate", "list_clusters", "upgrade_cluster"]


def cluster_view(record: ClusterRecord) -> View:
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


async def get_substrate(compute: Compute, tenant_id: str, pool: str) -> View:
    """The pool's substrate (pool id, or name: an archived pool's too): state, cluster, Nodes."""
    view: View = (await compute.kubernetes_substrates.get(tenant_id=tenant_id, pool_id=pool)).to_dict()
    return view


async def list_clusters(compute: Compute, tenant_id: str) -> list[View]:
    return [cluster_view(record) for record in await compute.kubernetes_clusters.list(tenant_id=tenant_id)]


async def get_cluster(compute: Compute, tenant_id: str, cluster_id: str) -> View:
    return cluster_view(await compute.kubernetes_clusters.get(tenant_id=tenant_id, cluster_id=cluster_id))


async def cluster_credentials(compute: Compute, tenant_id: str, cluster_id: str) -> str:
    """A kubeconfig with a 600 s admin credential (created clusters only)."""
    return await compute.kubernetes_clusters.credentials(tenant_id=tenant_id, cluster_id=cluster_id)


async def upgrade_cluster(compute: Compute, tenant_id: str, cluster_id: str, version: str) -> View:
    record = await compute.kubernetes_clusters.upgrade(tenant_id=tenant_id, cluster_id=cluster_id, version=version)
    return cluster_view(record)
