"""Revoking better-compute's identity on an adopted cluster, once for every provider
(spec "Adopt a cluster you already run"): `bc-substrate` and its cluster-admin binding
go when they carry our label (an owner's own objects of those names stay); `bc-access`
goes only when better-compute made it and no subject is left in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.kube_api import credentials_client, kube_client
from better_compute.kubernetes.cluster_access.substrate_identity import revoke_substrate_identity
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeApiServer, KubeCluster

MANAGED = {"app.kubernetes.io/managed-by": "better-compute"}


@pytest.fixture
async def cluster(clock: SimClock) -> AsyncIterator[KubeCluster]:
    async with KubeApiServer(clock) as server:
        yield server.add_cluster("adopted")


async def revoke(creds: ClusterCredentials) -> None:
    """What teardown does: revoke on a client with the provider's admin credential."""
    async with credentials_client(creds) as client:
        await revoke_substrate_identity(client)


def credentials(cluster: KubeCluster, clock: SimClock, ttl: float = 600) -> ClusterCredentials:
    token = cluster.issue_token("bc-admin", ttl_seconds=ttl)
    return ClusterCredentials(cluster.endpoint, cluster.ca_data, token, clock.now() + timedelta(seconds=ttl))


async def grant(
    creds: ClusterCredentials,
    *,
    labels: dict[str, str],
    others: tuple[str, ...] = (),
    namespace: bool = True,
    identity: dict[str, str] = MANAGED,
) -> None:
    """What the substrate leaves on an adopted cluster (the namespace labelled `labels`, the
    identity `identity`: ours unless said), plus what the tenant may have put there."""
    client = kube_client(creds)
    try:
        if namespace:
            await client.create(Namespace(metadata=ObjectMeta(name="bc-access", labels=labels)))
            await client.create(
                ServiceAccount(metadata=ObjectMeta(name="bc-substrate", namespace="bc-access", labels=identity))
            )
            for name in others:
                await client.create(ServiceAccount(metadata=ObjectMeta(name=name, namespace="bc-access")))
        await client.create(
            ClusterRoleBinding(
                metadata=ObjectMeta(name="bc-substrate", labels=identity),
                roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
                subjects=[Subject(kind="ServiceAccount", name="bc-substrate", namespace="bc-access")],
            )
        )
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("labels", "others", "namespace_stays"),
    [(MANAGED, (), False), ({}, (), True), ({"owner": "tenant"}, (), True), (MANAGED, ("someone-else",), True)],
    ids=["ours-and-empty", "not-ours", "labelled-by-someone-else", "another-subject-left"],
)
async def test_revoke_removes_the_identity_and_the_namespace_only_when_ours_and_empty(
    cluster: KubeCluster, clock: SimClock, labels: dict[str, str], others: tuple[str, ...], namespace_stays: bool
) -> None:
    creds = credentials(cluster, clock)
    await grant(creds, labels=labels, others=others)
    assert cluster.get_object("ServiceAccount", "default", "bc-access") is not None, "default does not count"

    await revoke(creds)

    assert cluster.get_object("ClusterRoleBinding", "bc-substrate") is None
    assert cluster.get_object("ServiceAccount", "bc-substrate", "bc-access") is None
    assert (cluster.get_object("Namespace", "bc-access") is not None) == namespace_stays
    for other in others:
        assert cluster.get_object("ServiceAccount", other, "bc-access") is not None

    await revoke(creds)  # again: what is already gone is fine
    assert (cluster.get_object("Namespace", "bc-access") is not None) == namespace_stays


async def test_an_owners_own_bc_substrate_and_its_binding_without_our_label_stay(
    cluster: KubeCluster, clock: SimClock
) -> None:
    creds = credentials(cluster, clock)
    await grant(creds, labels={}, identity={"owner": "tenant"})
    await revoke(creds)
    assert cluster.get_object("ServiceAccount", "bc-substrate", "bc-access") is not None
    assert cluster.get_object("ClusterRoleBinding", "bc-substrate") is not None
    assert cluster.get_object("Namespace", "bc-access") is not None


async def test_revoke_with_nothing_to_remove_is_fine_and_creates_nothing(cluster: KubeCluster, clock: SimClock) -> None:
    await revoke(credentials(cluster, clock))
    assert cluster.get_object("Namespace", "bc-access") is None
    assert cluster.get_object("ClusterRoleBinding", "bc-substrate") is None


async def test_a_binding_left_without_its_namespace_still_goes(cluster: KubeCluster, clock: SimClock) -> None:
    creds = credentials(cluster, clock)
    await grant(creds, labels=MANAGED, namespace=False)
    await revoke(creds)
    assert cluster.get_object("ClusterRoleBinding", "bc-substrate") is None


async def test_the_tenants_own_bindings_and_namespaces_stay(cluster: KubeCluster, clock: SimClock) -> None:
    creds = credentials(cluster, clock)
    await grant(creds, labels=MANAGED)
    client = kube_client(creds)
    try:
        await client.create(Namespace(metadata=ObjectMeta(name="team", labels=MANAGED)))
        await client.create(
            ClusterRoleBinding(
                metadata=ObjectMeta(name="team-admin"),
                roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
                subjects=[Subject(kind="Group", name="team", apiGroup="rbac.authorization.k8s.io")],
            )
        )
    finally:
        await client.close()
    await revoke(creds)
    assert cluster.get_object("ClusterRoleBinding", "team-admin") is not None
    assert cluster.get_object("Namespace", "team") is not None
    assert cluster.get_object("Namespace", "bc-access") is None


async def test_a_refused_credential_is_permission_denied_and_removes_nothing(
    cluster: KubeCluster, clock: SimClock
) -> None:
    creds = credentials(cluster, clock, ttl=60)
    await grant(creds, labels=MANAGED)
    clock.advance(60)
    with pytest.raises(ComputeError) as caught:
        await revoke(creds)
    assert caught.value.code is ErrorCode.PERMISSION_DENIED
    assert "bc-substrate" in caught.value.message
    assert cluster.get_object("ClusterRoleBinding", "bc-substrate") is not None


async def test_a_cluster_api_that_cannot_be_reached_is_unavailable(clock: SimClock) -> None:
    gone = ClusterCredentials("https://127.0.0.1:9", None, "token-of-a-gone-cluster", clock.now())
    with pytest.raises(ComputeError) as caught:
        await revoke(gone)
    assert caught.value.code is ErrorCode.UNAVAILABLE
