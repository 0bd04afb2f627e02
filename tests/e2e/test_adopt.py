"""The spec's "Adopt a cluster you already run" on GKE, EKS and DOKS: adopt, book, tear down.

The cluster and its owner's node pools stay, and nothing of ours is left in it: no node pool,
no labelled object, no bc-substrate identity, no claim. The identity's token is refused once
revoked, and an adopted cluster gets no kubeconfig from better-compute.
"""

from __future__ import annotations

import lightkube
import pytest
from adopt_world import OWN_POOL, PER_ZONE, adopting, only_kube, provider_cluster, ready_and_joined, seed, view
from e2e_world import World
from lightkube.resources.core_v1 import Node

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.cluster_claim import CLAIM_NAME, CLAIM_NAMESPACE
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.cluster_access.substrate_identity import (
    ACCESS_GUARD,
    ACCESS_NAMESPACE,
    EDIT_ROLE,
    SUBSTRATE_SUBJECT,
)
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing import KubeCluster
from better_compute.testing.kube.tokens import mint_account_token

OURS = ("Namespace", "ConfigMap", "Secret", "DaemonSet")


def labelled(kube: KubeCluster, pool_id: str) -> list[str]:
    return [
        f"{kind} {o['metadata']['name']}"
        for kind in OURS
        for o in kube.objects(kind, labels={SUBSTRATE_POOL_LABEL: pool_id})
    ]


async def refused(kube: KubeCluster, token: str, clock_now: object) -> int:
    """The status the cluster answers `token` with when it lists Nodes (200 when allowed)."""
    client = kube_client(ClusterCredentials(kube.endpoint, kube.ca_data, token, clock_now))  # type: ignore[arg-type]
    try:
        [n async for n in client.list(Node)]
        return 200
    except lightkube.ApiError as exc:
        return int(exc.status.code or 0)
    finally:
        await client.close()


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_adopt_book_and_tear_down_leaves_the_cluster_and_nothing_of_ours(world: World, provider: str) -> None:
    adopt_id = await seed(world, provider)
    kube = only_kube(world)
    own_nodes = {n["metadata"]["name"] for n in kube.objects("Node")}
    await world.compute.fleet.apply(adopting(world, provider, adopt_id), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, PER_ZONE[provider]), minutes=60, what="adopted and joined")
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    current = await view(world)
    assert current.mode == "adopt" and current.cluster is not None
    assert current.cluster.provider_cluster_id == adopt_id

    # The substrate holds the claim and works as bc-substrate; the owner's node pool is untouched.
    claim = kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE)
    assert claim is not None and claim["metadata"]["labels"][SUBSTRATE_POOL_LABEL] == pool.id
    assert kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is not None
    binding = kube.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT)
    assert binding is not None and binding["roleRef"]["name"] == "cluster-admin"
    assert kube.get_object("DaemonSet", "bcd", "bc-system") is not None
    records = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    (record,) = records
    assert [p.name for p in record.node_pools] == [f"bc-{pool.id[-6:]}-h100"]
    before, own_before = await provider_cluster(world, adopt_id)
    assert before is not None and own_before is not None

    # An adopted cluster gets no kubeconfig from better-compute.
    with pytest.raises(ComputeError) as caught:
        await world.compute.kubernetes_clusters.credentials(tenant_id=world.tenant_id, cluster_id=record.id)
    assert caught.value.code is ErrorCode.INVALID_STATE

    # Book the adopted nodes' GPUs like any pool's.
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    node = await world.compute.nodes.get(world.tenant_id, reservation.node_id)
    assert node.kubernetes_node_name not in own_nodes
    await world.compute.reservations.release(world.tenant_id, reservation.id)

    # A token of bc-substrate, minted while it exists, to show that revoking it is real.
    token = mint_account_token(kube, ACCESS_NAMESPACE, SUBSTRATE_SUBJECT, 3600)["status"]["token"]
    assert await refused(kube, token, world.cloud.clock.now()) == 200

    await world.compute.fleet.archive_pool("gpu-fleet", tenant_id=world.tenant_id)

    async def archived() -> bool:
        return await world.compute.pools.list(world.tenant_id) == []

    await world.until(archived, minutes=120, what="the pool is archived")
    after, own_after = await provider_cluster(world, adopt_id)
    assert after is not None and after.status == before.status, "the cluster stays"
    assert own_after == own_before, "the owner's node pool stays as it was"
    assert OWN_POOL in after.node_pools
    assert not [p for p in after.node_pools if p.startswith("bc-")], "no node pool of ours is left"
    assert labelled(kube, pool.id) == []
    assert kube.get_object("ConfigMap", CLAIM_NAME, CLAIM_NAMESPACE) is None
    assert kube.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is None
    assert kube.get_object("ClusterRoleBinding", SUBSTRATE_SUBJECT) is None
    assert kube.get_object("Namespace", ACCESS_NAMESPACE) is None, "bc-access was ours and is empty"
    assert kube.get_object("ClusterRole", EDIT_ROLE) is not None, "grants nothing on its own: it stays"
    assert kube.get_object("ValidatingAdmissionPolicy", ACCESS_GUARD) is not None
    assert await refused(kube, token, world.cloud.clock.now()) == 401, "a revoked bc-substrate token is refused"
    assert await world.compute.nodes.list(world.tenant_id) == []
    assert await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id) == []
    if provider == "eks":
        eks_cluster = world.cloud.eks.cluster("theirs")
        assert eks_cluster is not None and eks_cluster.access_entries, "the tenant's access entry stays"
