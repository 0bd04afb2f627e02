"""Find, in one provider account, what carries better-compute's marks and no record owns.

The records are the clusters reconciler's and the substrate's rows of the account's tenant:

* a cluster is owned by a cluster row of the account that names it (its provider id, or before
  that is recorded, its deterministic name: the intent is written before the create);
* a node pool by a node pool row of the row that owns its cluster;
* bcd's objects and the claim by a substrate row of the pool id their mark names;
* bc-substrate by an adopting cluster row that owns its cluster.

A row that says it is deleted owns nothing. What is already deleting at the provider is not listed:
it is on its way. Clusters are looked into (for bcd, the claim and bc-substrate) when they are ready
and not orphans themselves; one that cannot be reached is reported as such, never guessed at.

Two deployments of better-compute (each on its own database) may share an account: every cluster and
node pool carries the mark of the deployment that made it (`ClusterState.deployment`,
`NodePoolState.deployment`). What carries another deployment's mark is never an orphan, and nothing
in such a cluster is looked into: it is counted (`AccountSweep.others`), no more. What carries the
substrate-pool mark and no deployment mark (made before the mark existed) is an orphan as before,
listed as unmarked.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx2
from sqlalchemy import select

from better_compute.core.errors import ComputeError
from better_compute.kubernetes.cluster_access.kube_api import cluster_client
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import ClusterState, ClusterStatus, NodePoolStatus, ProviderKubernetes
from better_compute.kubernetes.sweep.in_cluster import read_in_cluster
from better_compute.kubernetes.sweep.orphans import Orphan, Unreachable
from better_compute.kubernetes.tables import ClusterRow, NodePoolRow, SubstrateRow
from better_compute.vps.provider import ProviderAccount

__all__ = ["AccountSweep", "find_orphans"]

_GOING = (ClusterStatus.DELETING, ClusterStatus.DELETED)


@dataclass(frozen=True, slots=True)
class AccountSweep:
    account: str
    orphans: tuple[Orphan, ...]
    unreachable: tuple[Unreachable, ...]
    others: int = 0
    """Clusters and node pools of other deployments in the account, left alone."""


@dataclass(frozen=True, slots=True)
class _Records:
    clusters: tuple[ClusterRow, ...]
    node_pools: dict[str, set[str]]
    """cluster row id -> the names of its node pools."""
    pools: frozenset[str]
    """The pool ids of the tenant's live substrates."""

    def owner(self, state: ClusterState) -> ClusterRow | None:
        for row in self.clusters:
            if row.provider_cluster_id == state.cluster_id:
                return row
            if row.provider_cluster_id is None and row.mode == "create" and row.name == state.name:
                return row
        return None


async def _records(k: KubernetesContext, tenant_id: str, account: str) -> _Records:
    async with k.db.session() as session:
        clusters = tuple(
            await session.scalars(
                select(ClusterRow).where(
                    ClusterRow.tenant_id == tenant_id, ClusterRow.account == account, ClusterRow.status != "deleted"
                )
            )
        )
        node_pools: dict[str, set[str]] = {row.id: set() for row in clusters}
        if clusters:
            found = await session.execute(
                select(NodePoolRow.cluster_id, NodePoolRow.name).where(
                    NodePoolRow.cluster_id.in_(node_pools), NodePoolRow.status != "deleted"
                )
            )
            for cluster_id, name in found:
                node_pools[cluster_id].add(name)
        pools = frozenset(
            await session.scalars(
                select(SubstrateRow.pool_id).where(SubstrateRow.tenant_id == tenant_id, SubstrateRow.state != "deleted")
            )
        )
    return _Records(clusters, node_pools, pools)


async def _node_pool_orphans(
    account: ProviderAccount, driver: ProviderKubernetes, state: ClusterState, owned: set[str], ours: str
) -> tuple[list[Orphan], int]:
    """The node pools of ours no record owns, and how many of other deployments' were left alone."""
    orphans, others = [], 0
    for name in state.node_pools:
        if name in owned:
            continue
        pool = await driver.get_node_pool(account, state.cluster_id, name)
        mark = pool.labels.get(SUBSTRATE_POOL_LABEL) if pool is not None else None
        if pool is None or not mark or pool.status in (NodePoolStatus.DELETING, NodePoolStatus.DELETED):
            continue  # the owner's own node pool, or one already going
        if pool.deployment not in (None, ours):
            others += 1
            continue
        holds = (f"{pool.node_count} nodes",)
        unmarked = pool.deployment is None
        orphans.append(Orphan("nodePool", account.name, state.cluster_id, name, mark, holds, pool.deployment, unmarked))
    return orphans, others


async def _in_cluster_orphans(
    account: ProviderAccount, driver: ProviderKubernetes, state: ClusterState, records: _Records, ours: str
) -> tuple[list[Orphan], int]:
    """What of ours runs in the cluster and no record owns, and how many things of another deployment's
    were left alone: a claim with another deployment's mark makes all of it theirs (one cluster, one pool)."""
    async with cluster_client(driver, account, state.cluster_id) as client:
        found = await read_in_cluster(client)
    mark = found.claim_deployment
    if mark not in (None, ours):
        return [], len(found.bcd) + bool(found.identity) + 1
    unmarked = found.claim is not None and mark is None
    owner = records.owner(state)
    orphans = [
        Orphan("bcd", account.name, state.cluster_id, pool_id, pool_id, objects, mark, unmarked)
        for pool_id, objects in sorted(found.bcd.items())
        if pool_id not in records.pools
    ]
    if found.identity and (owner is None or owner.mode != "adopt"):
        orphans.append(
            Orphan("identity", account.name, state.cluster_id, "bc-substrate", None, found.identity, mark, unmarked)
        )
    if found.claim is not None and found.claim not in records.pools:
        claim = found.claim or None
        holds = ("ConfigMap kube-system/better-compute-substrate",)
        orphans.append(Orphan("claim", account.name, state.cluster_id, found.claim, claim, holds, mark, unmarked))
    return orphans, 0


async def find_orphans(k: KubernetesContext, tenant_id: str, account_name: str) -> AccountSweep:
    """The orphans of one account, read now from the provider and the clusters it reaches."""
    account, driver = await k.account(tenant_id, account_name)
    records = await _records(k, tenant_id, account_name)
    ours = await k.deployment()
    orphans: list[Orphan] = []
    unreachable: list[Unreachable] = []
    others = 0
    for state in await driver.list_clusters(account):
        if state.status in _GOING:
            continue
        if state.deployment not in (None, ours):
            others += 1  # another deployment's cluster: nothing in it is ours to judge
            continue
        owner = records.owner(state)
        if owner is None and state.substrate_pool:
            pools = state.node_pools
            unmarked = state.deployment is None
            orphans.append(
                Orphan(
                    "cluster",
                    account_name,
                    state.cluster_id,
                    state.name,
                    state.substrate_pool,
                    pools,
                    state.deployment,
                    unmarked,
                )
            )
            continue
        owned = records.node_pools.get(owner.id, set()) if owner is not None else set()
        found, left = await _node_pool_orphans(account, driver, state, owned, ours)
        orphans += found
        others += left
        if state.status is not ClusterStatus.READY or state.outputs is None:
            continue
        try:
            found, left = await _in_cluster_orphans(account, driver, state, records, ours)
            orphans += found
            others += left
        except (ComputeError, httpx2.HTTPError) as exc:
            unreachable.append(Unreachable(account_name, state.cluster_id, str(exc) or type(exc).__name__))
    return AccountSweep(account_name, tuple(orphans), tuple(unreachable), others)
