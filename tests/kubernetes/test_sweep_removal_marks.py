"""A sweep's delete reads the deployment mark again at the provider just before it deletes (sweep/removal.py).

Between the sweep that found an orphan and its delete, the thing may have come to carry another
deployment's mark: the delete is refused, naming the mark, and nothing is deleted. One that still
carries ours, or none (an older better-compute's), is deleted as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import pytest

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import (
    DEPLOYMENT_LABEL,
    SUBSTRATE_POOL_LABEL,
    ClusterState,
    ClusterStatus,
    NodePoolState,
    NodePoolStatus,
    ProviderKubernetes,
)
from better_compute.kubernetes.sweep.orphans import Orphan
from better_compute.kubernetes.sweep.removal import remove_orphan
from better_compute.vps.provider import ProviderAccount

OURS, THEIRS = "0123456789abcdef", "fedcba9876543210"
ACCOUNT = ProviderAccount("managed-k8s", "gcp", "tenant", {})


@dataclass
class Provider:
    """What the removal reads and deletes, and the deletes it was asked for."""

    cluster_mark: str | None
    pool_mark: str | None
    deleted: list[str] = field(default_factory=list)

    async def get_cluster(self, account: ProviderAccount, cluster_id: str) -> ClusterState:
        return ClusterState(cluster_id, "bc-x", ClusterStatus.READY, node_pools=("pool",), deployment=self.cluster_mark)

    async def get_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> NodePoolState:
        labels = {SUBSTRATE_POOL_LABEL: "pool_x"}
        if self.pool_mark is not None:
            labels[DEPLOYMENT_LABEL] = self.pool_mark
        return NodePoolState(name, NodePoolStatus.READY, "e2", 1, labels)

    async def delete_node_pool(self, account: ProviderAccount, cluster_id: str, name: str) -> None:
        self.deleted.append(f"nodePool {name}")

    async def delete_cluster(self, account: ProviderAccount, cluster_id: str) -> None:
        self.deleted.append(f"cluster {cluster_id}")


CLUSTER = Orphan("cluster", "managed-k8s", "us-central1/bc-x", "bc-x", "pool_x", ("pool",), OURS)
NODE_POOL = Orphan("nodePool", "managed-k8s", "us-central1/bc-x", "pool", "pool_x", (), OURS)


@pytest.mark.parametrize(
    ("orphan", "cluster_mark", "pool_mark"),
    [(CLUSTER, THEIRS, OURS), (CLUSTER, OURS, THEIRS), (NODE_POOL, OURS, THEIRS)],
    ids=["cluster-now-theirs", "cluster-with-their-node-pool", "node-pool-now-theirs"],
)
async def test_what_now_carries_another_deployments_mark_is_not_deleted(
    orphan: Orphan, cluster_mark: str, pool_mark: str
) -> None:
    provider = Provider(cluster_mark, pool_mark)
    with pytest.raises(ComputeError) as refused:
        await remove_orphan(cast(ProviderKubernetes, provider), ACCOUNT, orphan, OURS)
    assert refused.value.code is ErrorCode.INVALID_STATE
    assert f"{DEPLOYMENT_LABEL}={THEIRS}" in str(refused.value) and orphan.id in str(refused.value)
    assert provider.deleted == []


@pytest.mark.parametrize("mark", [OURS, None], ids=["ours", "unmarked"])
async def test_what_carries_our_mark_or_none_is_deleted(mark: str | None) -> None:
    provider = Provider(mark, mark)
    assert await remove_orphan(cast(ProviderKubernetes, provider), ACCOUNT, NODE_POOL, OURS) is None
    waiting = await remove_orphan(cast(ProviderKubernetes, provider), ACCOUNT, CLUSTER, OURS)
    assert waiting is not None and "pool" in waiting  # its node pool goes first
    assert provider.deleted == ["nodePool pool", "nodePool pool"]
