"""`compute.kubernetes_clusters`: a tenant's clusters, and a kubeconfig for a created one.

    clusters = await compute.kubernetes_clusters.list(tenant_id=...)
    kubeconfig = await compute.kubernetes_clusters.credentials(tenant_id=..., cluster_id=...)
    await compute.kubernetes_clusters.upgrade(tenant_id=..., cluster_id=..., version="1.32")

The kubeconfig holds a 600 s admin credential minted for the operator who asked; it is
returned to them once and never stored or logged. An adopted cluster is refused
(INVALID_STATE): a kubeconfig's identity would outlive the substrate on a cluster
better-compute no longer manages. Reach your own cluster with the provider's credentials.
"""

from __future__ import annotations

import yaml
from sqlalchemy import select

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.clusters.records import ClusterRecord, cluster_of, cluster_row, node_pool_rows
from better_compute.kubernetes.clusters.upgrades import start_upgrade
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.tables import ClusterRow

__all__ = ["KubernetesClusters"]


class KubernetesClusters:
    def __init__(self, k: KubernetesContext) -> None:
        self.k = k

    async def list(self, *, tenant_id: str, include_deleted: bool = False) -> list[ClusterRecord]:
        query = select(ClusterRow).where(ClusterRow.tenant_id == tenant_id).order_by(ClusterRow.created_at)
        if not include_deleted:
            query = query.where(ClusterRow.status != "deleted")
        async with self.k.db.session() as session:
            rows = list(await session.scalars(query))
            return [cluster_of(r, await node_pool_rows(session, r.id)) for r in rows]

    async def get(self, *, tenant_id: str, cluster_id: str) -> ClusterRecord:
        async with self.k.db.session() as session:
            row = await cluster_row(session, cluster_id, tenant_id=tenant_id)
            return cluster_of(row, await node_pool_rows(session, row.id))

    async def upgrade(self, *, tenant_id: str, cluster_id: str, version: str) -> ClusterRecord:
        """Upgrade a created cluster to `version`: the control plane in place, then each node pool, its
        nodes drained one at a time (nothing force-released). Returns at once; the state read
        (`kubernetes_substrates.get`) shows the drain. Asking again for the same version is a no-op."""
        await start_upgrade(self.k, tenant_id=tenant_id, cluster_id=cluster_id, version=version, now=self.k.clock.now())
        return await self.get(tenant_id=tenant_id, cluster_id=cluster_id)

    async def credentials(self, *, tenant_id: str, cluster_id: str) -> str:
        """A kubeconfig (YAML) with a 600 s admin credential for a created, ready cluster."""
        record = await self.get(tenant_id=tenant_id, cluster_id=cluster_id)
        if record.mode == "adopt":
            raise ComputeError(
                ErrorCode.INVALID_STATE,
                "better-compute gives no credentials for an adopted cluster; use the provider's own",
                "/clusterId",
            )
        if record.status not in ("ready", "updating") or record.provider_cluster_id is None:
            raise ComputeError(ErrorCode.INVALID_STATE, f"cluster {record.name} is {record.status}", "/clusterId")
        account, driver = await self.k.account(tenant_id, record.account)
        credentials = await driver.credentials(account, record.provider_cluster_id)
        cluster = {"server": credentials.endpoint}
        if credentials.ca_data:
            cluster["certificate-authority-data"] = credentials.ca_data
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": record.name, "cluster": cluster}],
            "users": [{"name": f"{record.name}-admin", "user": {"token": credentials.token}}],
            "contexts": [{"name": record.name, "context": {"cluster": record.name, "user": f"{record.name}-admin"}}],
            "current-context": record.name,
        }
        return str(yaml.safe_dump(config, sort_keys=False))
