"""Service-account tokens are signed JWTs bound to their account and pod; TokenReview verifies them."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import lightkube
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec, TokenReviewSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.core_v1 import Node, Pod, ServiceAccount, ServiceAccountToken
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeCluster, NodeRun, PodRun
from better_compute.testing.kube.satokens import ISSUER

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def _claims(token: str) -> dict[str, Any]:
    header, payload, _ = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "=="))["alg"] == "ES256"
    return dict(json.loads(base64.urlsafe_b64decode(payload + "==")))


@pytest.fixture
async def reviewer(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> AsyncIterator[lightkube.AsyncClient]:
    """A client for the ServiceAccount kube-system/verifier, bound to system:auth-delegator as a verifier is."""
    await client.create(ServiceAccount(metadata=ObjectMeta(name="verifier", namespace="kube-system")))
    await client.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="verifier"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="system:auth-delegator"),
            subjects=[Subject(kind="ServiceAccount", name="verifier", namespace="kube-system")],
        )
    )
    minted = await client.create(
        ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])),
        "verifier",
        namespace="kube-system",
    )
    api = kube_client(
        ClusterCredentials(cluster.endpoint, cluster.ca_data, minted.status.token, clock.now()), timeout=10
    )
    try:
        yield api
    finally:
        await api.close()


async def _review(api: lightkube.AsyncClient, token: str, audiences: list[str] | None = None) -> Any:
    answer = await api.create(TokenReview(spec=TokenReviewSpec(token=token, audiences=audiences)))
    return answer.status


async def _running_pod_token(client: lightkube.AsyncClient, cluster: KubeCluster) -> tuple[str, str]:
    """The projected token the kubelet mounted into a DaemonSet pod on node gpu-1, and the pod's name."""
    runs: list[PodRun] = []
    release = asyncio.Event()

    async def runtime(pod: PodRun, node: NodeRun) -> None:
        runs.append(pod)
        await release.wait()

    cluster.kubelet.pod_runtime = runtime
    await cluster.kubelet.add_node("gpu-1")
    await client.create(
        DaemonSet.from_dict(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "bcd", "namespace": "default"},
                "spec": {
                    "selector": {"matchLabels": {"app": "bcd"}},
                    "template": {
                        "metadata": {"labels": {"app": "bcd"}},
                        "spec": {"containers": [{"name": "bcd", "image": "bcd:1"}]},
                    },
                },
            }
        )
    )
    while not runs:
        await asyncio.sleep(0.01)
    release.set()
    return runs[0].container.files[TOKEN_PATH].decode(), runs[0].name


async def test_the_kubelet_mounts_a_pod_bound_jwt_that_token_review_verifies(
    client: lightkube.AsyncClient, cluster: KubeCluster, reviewer: lightkube.AsyncClient, clock: SimClock
) -> None:
    token, pod_name = await _running_pod_token(client, cluster)
    pod = await client.get(Pod, pod_name, namespace="default")
    node = await client.get(Node, "gpu-1")
    account = await client.get(ServiceAccount, "default", namespace="default")
    claims = _claims(token)
    assert (claims["iss"], claims["sub"], claims["aud"]) == (ISSUER, "system:serviceaccount:default:default", [ISSUER])
    assert claims["exp"] - claims["iat"] == 3607
    assert claims["kubernetes.io"]["pod"] == {"name": pod_name, "uid": pod.metadata.uid}
    assert claims["kubernetes.io"]["node"] == {"name": "gpu-1", "uid": node.metadata.uid}
    status = await _review(reviewer, token)
    assert status.authenticated is True
    assert status.audiences == [ISSUER]
    user = status.user
    assert (user.username, user.uid) == ("system:serviceaccount:default:default", account.metadata.uid)
    assert user.groups == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    assert user.extra["authentication.kubernetes.io/pod-name"] == [pod_name]
    assert user.extra["authentication.kubernetes.io/pod-uid"] == [pod.metadata.uid]
    assert user.extra["authentication.kubernetes.io/node-name"] == ["gpu-1"]
    assert user.extra["authentication.kubernetes.io/node-uid"] == [node.metadata.uid]
    assert user.extra["authentication.kubernetes.io/credential-id"] == [f"JTI={claims['jti']}"]
    await client.delete(Pod, pod_name, namespace="default")
    gone = await _review(reviewer, token)
    assert gone.authenticated is None and gone.user.username is None


async def test_audiences_and_expiry_on_the_clock(
    client: lightkube.AsyncClient, cluster: KubeCluster, reviewer: lightkube.AsyncClient, clock: SimClock
) -> None:
    await client.create(ServiceAccount(metadata=ObjectMeta(name="bcd", namespace="default")))
    pod = await client.create(
        Pod.from_dict(
            {
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"serviceAccountName": "bcd", "containers": [{"name": "c", "image": "i"}]},
            }
        )
    )
    minted = await client.create(
        ServiceAccountToken(
            metadata=ObjectMeta(),
            spec=TokenRequestSpec(
                audiences=["better-compute"],
                expirationSeconds=900,
                boundObjectRef=BoundObjectReference(kind="Pod", apiVersion="v1", name="p", uid=pod.metadata.uid),
            ),
        ),
        "bcd",
        namespace="default",
    )
    token = minted.status.token
    assert minted.spec.boundObjectRef.uid == pod.metadata.uid
    status = await _review(reviewer, token, ["better-compute", "other"])
    assert (status.authenticated, status.audiences) == (True, ["better-compute"])
    assert "authentication.kubernetes.io/node-name" not in status.user.extra  # the pod is not scheduled
    assert (await _review(reviewer, token)).authenticated is None  # not for the API server's audience
    api = kube_client(ClusterCredentials(cluster.endpoint, cluster.ca_data, token, clock.now()))
    try:
        with pytest.raises(lightkube.ApiError) as caught:
            await api.get(Node, "n")
        assert caught.value.status.code == 401
    finally:
        await api.close()
    clock.advance(899)
    assert (await _review(reviewer, token, ["better-compute"])).authenticated is True
    clock.advance(1)
    assert (await _review(reviewer, token, ["better-compute"])).authenticated is None


async def test_a_forged_or_foreign_token_is_not_authenticated(
    client: lightkube.AsyncClient, kube: Any, reviewer: lightkube.AsyncClient
) -> None:
    other = kube.add_cluster("other")
    foreign = other.ops.get(other.resource("v1", "ServiceAccount"), "default", "default")
    token, _ = other.sa_tokens.issue("default", foreign, 3600, [ISSUER])
    assert (await _review(reviewer, token)).authenticated is None
    header, payload, signature = (
        await client.create(
            ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])),
            "default",
            namespace="default",
        )
    ).status.token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["sub"] = "system:serviceaccount:kube-system:verifier"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert (await _review(reviewer, f"{header}.{forged}.{signature}")).authenticated is None


async def test_token_review_needs_a_binding(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    minted = await client.create(
        ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])), "default", namespace="default"
    )
    api = kube_client(ClusterCredentials(cluster.endpoint, cluster.ca_data, minted.status.token, clock.now()))
    try:
        with pytest.raises(lightkube.ApiError) as caught:
            await _review(api, minted.status.token)
    finally:
        await api.close()
    assert caught.value.status.message == (
        'tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:default:default" cannot '
        'create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope'
    )


async def test_admin_tokens_review_for_the_api_audience_only(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    token = cluster.issue_token("bc-admin", ttl_seconds=600)
    status = await _review(client, token)
    assert (status.authenticated, status.user.username) == (True, "bc-admin")
    assert status.user.groups == ["system:masters", "system:authenticated"]
    assert (await _review(client, token, ["better-compute"])).authenticated is None


@pytest.mark.parametrize("path", ["healthz", "livez", "readyz", "livez/ping", "readyz/etcd"])
async def test_health_endpoints_are_public(cluster: KubeCluster, path: str) -> None:
    ca = base64.b64decode(cluster.ca_data).decode()
    async with httpx2.AsyncClient(verify=ssl.create_default_context(cadata=ca)) as http:
        plain = await http.get(f"{cluster.endpoint}/{path}")
        verbose = await http.get(f"{cluster.endpoint}/{path}?verbose")
        missing = await http.get(f"{cluster.endpoint}/{path.split('/')[0]}/nothing")
    assert (plain.status_code, plain.text) == (200, "ok")
    if "/" not in path:
        assert verbose.text.startswith("[+]ping ok\n")
        assert verbose.text.endswith(f"{path} check passed\n")
    assert missing.status_code == 404


async def test_the_issuer_publishes_the_key_that_verifies_its_tokens(
    client: lightkube.AsyncClient, raw: httpx2.AsyncClient, cluster: KubeCluster
) -> None:
    configuration = (await raw.get(".well-known/openid-configuration")).json()
    assert configuration["issuer"] == ISSUER
    assert configuration["jwks_uri"] == f"{cluster.endpoint}/openid/v1/jwks"
    [key] = (await raw.get("openid/v1/jwks")).json()["keys"]
    minted = await client.create(
        ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])), "default", namespace="default"
    )
    header, payload, signature = minted.status.token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "=="))["kid"] == key["kid"]
    coordinate = [int.from_bytes(base64.urlsafe_b64decode(key[c] + "=="), "big") for c in ("x", "y")]
    public = ec.EllipticCurvePublicNumbers(*coordinate, ec.SECP256R1()).public_key()
    raw_signature = base64.urlsafe_b64decode(signature + "==")
    der = encode_dss_signature(int.from_bytes(raw_signature[:32], "big"), int.from_bytes(raw_signature[32:], "big"))
    public.verify(der, f"{header}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))  # raises when it does not verify
