"""Each provider's admin identity is authorized the way that provider does it: GKE's IAM
authorizer for the project's owner, EKS access entries holding AmazonEKSClusterAdminPolicy (other
entries get their Kubernetes groups, which RBAC judges), the DOKS cluster admin in system:masters."""

from __future__ import annotations

from typing import Any

import lightkube
import pytest
from lightkube.models.authorization_v1 import ResourceAttributes, SelfSubjectAccessReviewSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.authentication_v1 import SelfSubjectReview
from lightkube.resources.authorization_v1 import SelfSubjectAccessReview
from lightkube.resources.core_v1 import Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.cloud import Cloud
from better_compute.vps.provider import ProviderAccount

EKS_CONFIG = {
    "region": "us-east-1",
    "zones": ["us-east-1a", "us-east-1b"],
    "eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
    "eksNodeRoleArn": "arn:aws:iam::111111111111:role/eks-node",
    "eksSubnetIds": ["subnet-0000000000000000a", "subnet-0000000000000000b"],
}


async def _credentials(cloud: Cloud, name: str, config: dict[str, Any], cluster_id: str) -> ClusterCredentials:
    async def resolve(reference: str) -> str:
        return cloud.doks_token

    [provider] = [p for p in cloud.providers() if p.name == name]
    assert provider.kubernetes is not None
    account = ProviderAccount("managed-k8s", name, "tenant_1", config, resolve_secret=resolve)
    return await provider.kubernetes.credentials(account, cluster_id)


async def _whoami_and_can_delete_nodes(credentials: ClusterCredentials) -> tuple[Any, Any]:
    api = kube_client(credentials, timeout=10)
    try:
        me = await api.create(SelfSubjectReview())
        attributes = ResourceAttributes(verb="delete", resource="nodes", name="n")
        can = await api.create(SelfSubjectAccessReview(spec=SelfSubjectAccessReviewSpec(resourceAttributes=attributes)))
    finally:
        await api.close()
    return me.status.userInfo, can.status


async def test_gke_project_owner_is_authorized_by_iam_not_by_a_group() -> None:
    async with Cloud() as cloud:
        await cloud.gke.seed_cluster("c", project="my-project")
        credentials = await _credentials(
            cloud, "gcp", {"projectId": "my-project", "zones": ["us-central1-a"]}, "us-central1/c"
        )
        user, can = await _whoami_and_can_delete_nodes(credentials)
    assert user.groups == ["system:authenticated"]
    assert (can.allowed, can.reason) == (True, "GKE IAM: roles/owner on the project")


async def test_eks_admin_policy_authorizes_and_a_plain_entry_gets_only_its_groups() -> None:
    async with Cloud() as cloud:
        await cloud.eks.seed_cluster("adm")
        credentials = await _credentials(cloud, "aws", EKS_CONFIG, "us-east-1/adm")
        user, can = await _whoami_and_can_delete_nodes(credentials)
        assert user.groups == ["system:authenticated"]
        assert can.allowed is True
        assert can.reason.startswith("EKS access policy AmazonEKSClusterAdminPolicy for arn:aws:iam::")

        await cloud.eks.seed_cluster("viewers", admin_access=False)
        [cluster] = [c for c in cloud.eks.world.clusters.values() if c.name == "viewers"]
        entry = cloud.eks.api.grant(cluster, user.username, None)
        entry.kubernetes_groups = ["pod-viewers"]
        credentials = await _credentials(cloud, "aws", EKS_CONFIG, "us-east-1/viewers")
        api = kube_client(credentials, timeout=10)
        try:
            me = await api.create(SelfSubjectReview())
            assert me.status.userInfo.groups == ["pod-viewers", "system:authenticated"]
            with pytest.raises(lightkube.ApiError) as caught:
                [p async for p in api.list(Pod, namespace="default")]
            assert caught.value.status.code == 403
            assert cluster.kube is not None
            cluster.kube.ops.create(
                cluster.kube.resource("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
                "",
                ClusterRoleBinding(
                    metadata=ObjectMeta(name="pod-viewers"),
                    roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
                    subjects=[Subject(kind="Group", name="pod-viewers")],
                ).to_dict(),
                manager="test",
            )
            assert [p async for p in api.list(Pod, namespace="default")] == []
        finally:
            await api.close()


async def test_doks_cluster_admin_is_in_system_masters() -> None:
    async with Cloud() as cloud:
        cluster_id = await cloud.doks.seed_cluster(name="c")
        credentials = await _credentials(
            cloud, "digitalocean", {"token": "secret://t/doks", "regions": ["tor1"]}, cluster_id
        )
        user, can = await _whoami_and_can_delete_nodes(credentials)
    assert "system:masters" in user.groups
    assert can.reason == (
        'RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole "cluster-admin" to Group "system:masters"'
    )
