"""Minted credentials reach the cluster through lightkube; the kubernetes side's revocation (tested once,
in tests/kubernetes/cluster_access/) runs on them end to end."""

from __future__ import annotations

from doks_world import World
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, Node, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.kubernetes.cluster_access.adopted_cluster import revoke_identity
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials, NodePoolSpec

MANAGED = {"app.kubernetes.io/managed-by": "better-compute"}


async def _adopted(world: World) -> str:
    return await world.doks.seed_cluster(
        name="users-own", node_pools=({"name": "own", "size": "s-4vcpu-8gb", "count": 1},)
    )


async def _grant(credentials: ClusterCredentials) -> None:
    client = kube_client(credentials)
    try:
        await client.create(Namespace(metadata=ObjectMeta(name="bc-access", labels=MANAGED)))
        await client.create(
            ServiceAccount(metadata=ObjectMeta(name="bc-substrate", namespace="bc-access", labels=MANAGED))
        )
        await client.create(
            ClusterRoleBinding(
                metadata=ObjectMeta(name="bc-substrate", labels=MANAGED),
                roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
                subjects=[Subject(kind="ServiceAccount", name="bc-substrate", namespace="bc-access")],
            )
        )
    finally:
        await client.close()


async def test_minted_credentials_list_the_node_pools_nodes(world: World) -> None:
    cid = await _adopted(world)
    await world.driver.ensure_node_pool(world.account(), cid, NodePoolSpec("bc-abc123-cpu", "s-2vcpu-4gb", 2))
    await world.advance(world.doks.timings.node_provisioning)
    credentials = await world.driver.credentials(world.account(), cid)
    client = kube_client(credentials)
    try:
        names = sorted([n.metadata.name async for n in client.list(Node) if n.metadata and n.metadata.name])
    finally:
        await client.close()
    ours = [n for n in names if n.startswith("bc-abc123-cpu-")]
    assert len(ours) == 2 and len(names) == 3
    assert all(len(n) == len("bc-abc123-cpu-") + 5 for n in ours)


async def test_revoke_removes_the_account_its_binding_and_the_namespace_it_made(world: World) -> None:
    cid = await _adopted(world)
    await _grant(await world.driver.credentials(world.account(), cid))
    await revoke_identity(world.driver, world.account(), cid)
    kube = world.doks.clusters[cid].kube
    assert kube.get_object("ClusterRoleBinding", "bc-substrate") is None
    assert kube.get_object("ServiceAccount", "bc-substrate", "bc-access") is None
    assert kube.get_object("Namespace", "bc-access") is None
    await revoke_identity(world.driver, world.account(), cid)  # again: nothing left, still fine
