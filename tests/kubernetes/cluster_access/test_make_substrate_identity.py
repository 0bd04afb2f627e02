"""The substrate's own identity on an adopted cluster (issue 13's last item): `bc-substrate`
can do everything the substrate does there, and a token of the same namespace without a
binding is refused each of those calls. Making the identity is idempotent, and a namespace
the owner made is never labelled as better-compute's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from lightkube import codecs
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount, ServiceAccountToken

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.cluster_access.kube_api import FIELD_MANAGER, kube_call, kube_client
from better_compute.kubernetes.cluster_access.substrate_identity import (
    ACCESS_NAMESPACE,
    SUBSTRATE_SUBJECT,
    ensure_substrate_identity,
    identity_objects,
    substrate_credentials,
)
from better_compute.kubernetes.provider import ClusterCredentials, GpuNode
from better_compute.kubernetes.substrates.agent_step import apply_bcd, remove_bcd
from better_compute.kubernetes.substrates.manifests import join_secret
from better_compute.kubernetes.substrates.nodes_step import list_substrate_nodes
from better_compute.testing.kube import KubeApiServer, KubeCluster

AGENT = SubstrateAgent("ghcr.io/better-compute/bcd:dev", "wss://gw.example/", (), "https://cp.example")
POOL = "pool_identity000001"


@pytest.fixture
async def cluster(clock: SimClock) -> AsyncIterator[KubeCluster]:
    async with KubeApiServer(clock) as server:
        yield server.add_cluster("adopted")


def admin(cluster: KubeCluster, clock: SimClock) -> ClusterCredentials:
    token = cluster.issue_token("provider-admin", ttl_seconds=600)
    return ClusterCredentials(cluster.endpoint, cluster.ca_data, token, clock.now() + timedelta(seconds=600))


async def substrate_and_stranger(
    cluster: KubeCluster, clock: SimClock
) -> tuple[ClusterCredentials, ClusterCredentials]:
    creds = admin(cluster, clock)
    client = kube_client(creds)
    try:
        await ensure_substrate_identity(client)
        await ensure_substrate_identity(client)  # again: nothing to make, nothing changed
        substrate = await substrate_credentials(client, creds, clock.now())
        await client.create(ServiceAccount(metadata=ObjectMeta(name="stranger", namespace=ACCESS_NAMESPACE)))
        minted = await client.create(
            ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=600)),
            "stranger",
            namespace=ACCESS_NAMESPACE,
        )
        stranger = ClusterCredentials(creds.endpoint, creds.ca_data, minted.status.token, clock.now())
    finally:
        await client.close()
    return substrate, stranger


async def what_the_substrate_does(credentials: ClusterCredentials) -> None:
    """Each call the substrate makes on an adopted cluster, as this identity."""
    client = kube_client(credentials)
    try:
        await list_substrate_nodes(client, POOL)
        await apply_bcd(client, POOL, AGENT, GpuNode("/home/kubernetes/bin/nvidia", critical_pods_quota=True))
        secret = codecs.from_dict(join_secret(POOL, "jtk_a", "a-join-token"))
        await kube_call("writing the join Secret", client.apply(secret, field_manager=FIELD_MANAGER, force=True))
        assert await remove_bcd(client, POOL) >= 3
    finally:
        await client.close()


async def test_bc_substrate_can_do_what_the_substrate_needs_and_a_token_without_a_binding_cannot(
    cluster: KubeCluster, clock: SimClock
) -> None:
    substrate, stranger = await substrate_and_stranger(cluster, clock)
    await what_the_substrate_does(substrate)
    with pytest.raises(ComputeError) as caught:
        await what_the_substrate_does(stranger)
    assert caught.value.code is ErrorCode.PERMISSION_DENIED and "403" in caught.value.message
    for manifest in identity_objects():
        meta = manifest["metadata"]
        assert cluster.get_object(manifest["kind"], meta["name"], meta.get("namespace", "")) is not None


async def test_a_namespace_the_owner_made_is_used_but_never_labelled_as_ours(
    cluster: KubeCluster, clock: SimClock
) -> None:
    creds = admin(cluster, clock)
    client = kube_client(creds)
    try:
        await client.create(Namespace(metadata=ObjectMeta(name=ACCESS_NAMESPACE, labels={"owner": "platform"})))
        await ensure_substrate_identity(client)
    finally:
        await client.close()
    namespace = cluster.get_object("Namespace", ACCESS_NAMESPACE)
    assert namespace is not None and "app.kubernetes.io/managed-by" not in namespace["metadata"]["labels"]
    assert cluster.get_object("ServiceAccount", SUBSTRATE_SUBJECT, ACCESS_NAMESPACE) is not None
