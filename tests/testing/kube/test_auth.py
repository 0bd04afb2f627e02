"""Bearer tokens with an expiry, provider authenticators, and the TokenRequest subresource."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import httpx2
import lightkube
import pytest
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.core_v1 import Node, ServiceAccount, ServiceAccountToken
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeCluster, TokenReview


async def test_expired_token_is_401(
    cluster: KubeCluster, clock: SimClock, credentials_for: Callable[..., ClusterCredentials]
) -> None:
    api = kube_client(credentials_for(cluster, ttl=600))
    try:
        assert [n async for n in api.list(Node)] == []
        clock.advance(599)
        assert [n async for n in api.list(Node)] == []
        clock.advance(1)
        with pytest.raises(lightkube.ApiError) as caught:
            await api.get(Node, "any")
    finally:
        await api.close()
    status = caught.value.status
    assert (status.code, status.reason, status.message) == (401, "Unauthorized", "Unauthorized")


async def test_unknown_or_missing_token_is_401(raw: httpx2.AsyncClient) -> None:
    for headers in ({"Authorization": "Bearer made-up"}, {"Authorization": ""}, {"Authorization": "Basic eDp5"}):
        response = await raw.get("api/v1/nodes", headers=headers)
        assert response.status_code == 401
        assert response.json()["reason"] == "Unauthorized"


async def test_version_is_public_and_discovery_is_not(raw: httpx2.AsyncClient) -> None:
    assert (await raw.get("version", headers={"Authorization": ""})).status_code == 200
    assert (await raw.get("api", headers={"Authorization": ""})).status_code == 401


async def test_a_registered_authenticator_vouches_for_provider_tokens(cluster: KubeCluster, clock: SimClock) -> None:
    issued = {"provider-token": TokenReview("eks-admin", ("system:masters",), clock.now() + timedelta(seconds=900))}
    cluster.add_authenticator(issued.get)
    credentials = ClusterCredentials(cluster.endpoint, cluster.ca_data, "provider-token", clock.now())
    api = kube_client(credentials)
    try:
        assert [n async for n in api.list(Node)] == []
        clock.advance(900)
        with pytest.raises(lightkube.ApiError) as caught:
            await api.get(Node, "n")
        assert caught.value.status.code == 401
    finally:
        await api.close()


async def test_token_request_mints_an_expiring_service_account_token(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    await client.create(ServiceAccount(metadata=ObjectMeta(name="bc-substrate", namespace="default")))
    await client.create(
        ClusterRole(
            metadata=ObjectMeta(name="node-reader"),
            rules=[PolicyRule(apiGroups=[""], resources=["nodes"], verbs=["list", "get"])],
        )
    )
    await client.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="bc-substrate"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="node-reader"),
            subjects=[Subject(kind="ServiceAccount", name="bc-substrate", namespace="default")],
        )
    )
    request = ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=1200))
    minted = await client.create(request, "bc-substrate", namespace="default")
    assert minted.status.expirationTimestamp == clock.now() + timedelta(seconds=1200)
    credentials = ClusterCredentials(cluster.endpoint, cluster.ca_data, minted.status.token, clock.now())
    api = kube_client(credentials)
    try:
        assert [n async for n in api.list(Node)] == []
        clock.advance(1200)
        with pytest.raises(lightkube.ApiError) as caught:
            await api.get(Node, "n")
        assert caught.value.status.code == 401
    finally:
        await api.close()


async def test_deleting_the_service_account_revokes_its_tokens(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    await client.create(ServiceAccount(metadata=ObjectMeta(name="sa", namespace="default")))
    minted = await client.create(
        ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])), "sa", namespace="default"
    )
    await client.delete(ServiceAccount, "sa", namespace="default")
    await client.create(ServiceAccount(metadata=ObjectMeta(name="sa", namespace="default")))
    api = kube_client(ClusterCredentials(cluster.endpoint, cluster.ca_data, minted.status.token, clock.now()))
    try:
        with pytest.raises(lightkube.ApiError) as caught:
            await api.get(Node, "n")
        assert caught.value.status.code == 401
    finally:
        await api.close()


async def test_token_request_refuses_less_than_ten_minutes(client: lightkube.AsyncClient) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(
            ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=60)),
            "default",
            namespace="default",
        )
    assert caught.value.status.code == 422


async def test_token_request_for_a_missing_account_is_404(client: lightkube.AsyncClient) -> None:
    with pytest.raises(lightkube.ApiError) as caught:
        await client.create(
            ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])),
            "nobody",
            namespace="default",
        )
    assert caught.value.status.code == 404
