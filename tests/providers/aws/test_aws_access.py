"""Access on EKS: a created cluster makes the creator admin through an access entry;
an adopted one must already grant the account's principal AmazonEKSClusterAdminPolicy;
the kubernetes side's in-cluster revocation (tested once, in tests/kubernetes/cluster_access/) runs
end to end on the driver's admin credential and leaves the tenant's entry."""

from __future__ import annotations

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.adopted_cluster import revoke_identity
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterSpec, ClusterStatus
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import ADMIN_POLICY_ARN, EksEmulator
from better_compute.vps.provider import ProviderAccount


async def test_a_created_cluster_uses_access_entries_and_makes_its_creator_admin(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    await driver.ensure_cluster(account, ClusterSpec("mine", "us-east-1", version="1.30.6"))
    cluster = eks.cluster("mine")
    assert cluster is not None
    assert cluster.authentication_mode == "API_AND_CONFIG_MAP"
    assert cluster.bootstrap_admin
    assert cluster.version == "1.30", "EKS takes the minor version"
    assert cluster.role_arn == "arn:aws:iam::111111111111:role/eks-cluster"
    assert cluster.subnet_ids == ["subnet-0000000000000000a", "subnet-0000000000000000b"]
    assert ADMIN_POLICY_ARN in cluster.access_entries[eks.principal_arn].policies


async def test_adopting_needs_an_access_entry_with_the_admin_policy(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    granted = await eks.seed_cluster("granted", nodegroups={"own": ("m7i.large", 1)})
    state = await driver.read_adoptable(account, granted)
    assert state.status == ClusterStatus.READY
    assert state.cluster_id == "us-east-1/granted"
    assert state.node_pools == ("own",)
    assert state.outputs is not None and state.outputs.global_id == "arn:aws:eks:us-east-1:111111111111:cluster/granted"

    closed = await eks.seed_cluster("closed", admin_access=False)
    with pytest.raises(ComputeError) as caught:
        await driver.read_adoptable(account, closed)
    assert caught.value.code is ErrorCode.INVALID_STATE
    assert "no access entry for arn:aws:iam::111111111111:user/better-compute" in caught.value.message
    assert "AmazonEKSClusterAdminPolicy" in caught.value.message
    assert "only on clusters it created" in caught.value.message

    config_map = await eks.seed_cluster("legacy", admin_access=False, authentication_mode="CONFIG_MAP")
    with pytest.raises(ComputeError) as legacy:
        await driver.read_adoptable(account, config_map)
    assert legacy.value.code is ErrorCode.INVALID_STATE
    assert "API_AND_CONFIG_MAP" in legacy.value.message

    with pytest.raises(ComputeError) as missing:
        await driver.read_adoptable(account, "us-east-1/nothing-here")
    assert missing.value.code is ErrorCode.NOT_FOUND


async def test_a_view_only_entry_is_not_enough(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    adopt_id = await eks.seed_cluster("viewer", admin_access=False)
    cluster = eks.cluster("viewer")
    assert cluster is not None
    eks.api.grant(cluster, eks.principal_arn, "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy")
    with pytest.raises(ComputeError) as caught:
        await driver.read_adoptable(account, adopt_id)
    assert "lacks AmazonEKSClusterAdminPolicy" in caught.value.message


async def test_the_token_of_an_unadmitted_principal_is_refused_by_the_cluster(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    adopt_id = await eks.seed_cluster("closed", admin_access=False)
    creds = await driver.credentials(account, adopt_id)
    assert not eks.accepts(creds), "no access entry: the API server does not know the principal"


async def _bc_identity(driver: EksKubernetes, account: ProviderAccount, adopt_id: str) -> None:
    client = kube_client(await driver.credentials(account, adopt_id))
    try:
        labels = {"app.kubernetes.io/managed-by": "better-compute"}
        await client.create(Namespace(metadata=ObjectMeta(name="bc-access", labels=labels)))
        await client.create(
            ServiceAccount(metadata=ObjectMeta(name="bc-substrate", namespace="bc-access", labels=labels))
        )
        await client.create(
            ClusterRoleBinding(
                metadata=ObjectMeta(name="bc-substrate", labels=labels),
                roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
                subjects=[Subject(kind="ServiceAccount", name="bc-substrate", namespace="bc-access")],
            )
        )
    finally:
        await client.close()


async def test_revoke_removes_the_identity_and_the_namespace_better_compute_made(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    adopt_id = await eks.seed_cluster("adopted")
    await _bc_identity(driver, account, adopt_id)
    await revoke_identity(driver, account, adopt_id)
    kube = eks.cluster("adopted").kube  # type: ignore[union-attr]
    assert kube is not None
    assert kube.get_object("ServiceAccount", "bc-substrate", "bc-access") is None
    assert kube.get_object("ClusterRoleBinding", "bc-substrate") is None
    assert kube.get_object("Namespace", "bc-access") is None
    assert eks.principal_arn in eks.cluster("adopted").access_entries  # type: ignore[union-attr]
    await revoke_identity(driver, account, adopt_id)  # twice: what is gone is fine
    await revoke_identity(driver, account, "us-east-1/never-was")  # a cluster that is gone: nothing to revoke


async def test_an_assumed_role_session_is_admitted_through_its_roles_access_entry(
    eks: EksEmulator, clock: SimClock, account: ProviderAccount
) -> None:
    from better_compute.providers.aws import AwsCredentials, aws_provider

    session_arn = "arn:aws:sts::111111111111:assumed-role/bc-admin/session-1"
    eks.add_identity("AKIAEMULATORROLE0001", "role-session-secret-0000000000000000001", session_arn)
    adopt_id = await eks.seed_cluster("by-role", principal_arn="arn:aws:iam::111111111111:role/bc-admin")
    impl = aws_provider(
        endpoint=eks.url,
        credentials=AwsCredentials("AKIAEMULATORROLE0001", "role-session-secret-0000000000000000001"),
        clock=clock,
    )
    driver = impl.kubernetes
    assert isinstance(driver, EksKubernetes)
    try:
        state = await driver.read_adoptable(account, adopt_id)
        assert state.status == ClusterStatus.READY
        creds = await driver.credentials(account, adopt_id)
        assert eks.accepts(creds)
    finally:
        driver.close()
