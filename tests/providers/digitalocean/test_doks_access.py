"""Minted credentials reach the cluster through lightkube; revoke_credentials removes only better-compute's identity."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from doks_world import World
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, Node, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.client import kube_client
from better_compute.kubernetes.provider import ClusterCredentials, NodePoolSpec
from better_compute.providers.digitalocean.access import revoke_access

MANAGED = {"app.kubernetes.io/managed-by": "better-compute"}


async def _adopted(world: World) -> str:
    return await world.doks.seed_cluster(
        name="users-own", node_pools=({"name": "own", "size": "s-4vcpu-8gb", "count": 1},)
    )


async def _grant(credentials: ClusterCredentials, *, labels: dict[str, str], others: tuple[str, ...] = ()) -> None:
    client = kube_client(credentials)
    try:
        await client.create(Namespace(metadata=ObjectMeta(name="bc-access", labels=labels)))
        for name in ("bc-substrate", *others):
            await client.create(ServiceAccount(metadata=ObjectMeta(name=name, namespace="bc-access")))
        await client.create(
            ClusterRoleBinding(
                metadata=ObjectMeta(name="bc-substrate"),
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
    await _grant(await world.driver.credentials(world.account(), cid), labels=MANAGED)
    await world.driver.revoke_credentials(world.account(), cid)
    kube = world.doks.clusters[cid].kube
    assert kube.get_object("ClusterRoleBinding", "bc-substrate") is None
    assert kube.get_object("ServiceAccount", "bc-substrate", "bc-access") is None
    assert kube.get_object("Namespace", "bc-access") is None
    await world.driver.revoke_credentials(world.account(), cid)  # again: nothing left, still fine


async def test_revoke_keeps_a_namespace_with_another_subject_or_not_made_by_better_compute(world: World) -> None:
    cid = await _adopted(world)
    kube = world.doks.clusters[cid].kube
    await _grant(await world.driver.credentials(world.account(), cid), labels=MANAGED, others=("someone",))
    await world.driver.revoke_credentials(world.account(), cid)
    assert kube.get_object("ServiceAccount", "bc-substrate", "bc-access") is None
    assert kube.get_object("ServiceAccount", "someone", "bc-access") is not None
    assert kube.get_object("Namespace", "bc-access") is not None

    other = await world.doks.seed_cluster(name="theirs-too")
    await _grant(await world.driver.credentials(world.account(), other), labels={"owner": "user"})
    await world.driver.revoke_credentials(world.account(), other)
    kube = world.doks.clusters[other].kube
    assert kube.get_object("ClusterRoleBinding", "bc-substrate") is None
    assert kube.get_object("Namespace", "bc-access") is not None


async def test_a_cluster_api_that_cannot_be_reached_is_unavailable() -> None:
    credentials = ClusterCredentials("https://127.0.0.1:9", None, "token-of-a-gone-cluster", datetime.now(UTC))
    with pytest.raises(ComputeError) as caught:
        await revoke_access(credentials)
    assert caught.value.code == ErrorCode.UNAVAILABLE
