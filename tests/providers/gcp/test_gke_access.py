"""revoke_credentials on an adopted GKE cluster removes bc-substrate, its binding, and bc-access when ours and empty."""

from __future__ import annotations

import pytest
from gke_world import Gke
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.kubernetes.client import kube_client

MANAGED = {"app.kubernetes.io/managed-by": "better-compute"}


async def grant(client: AsyncClient, *, namespace_labels: dict[str, str], other_subject: bool = False) -> None:
    await client.create(Namespace(metadata=ObjectMeta(name="bc-access", labels=namespace_labels)))
    await client.create(ServiceAccount(metadata=ObjectMeta(name="bc-substrate", namespace="bc-access")))
    if other_subject:
        await client.create(ServiceAccount(metadata=ObjectMeta(name="someone-else", namespace="bc-access")))
    await client.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="bc-substrate"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
            subjects=[Subject(kind="ServiceAccount", name="bc-substrate", namespace="bc-access")],
        )
    )


async def exists(client: AsyncClient, kind: type, name: str, namespace: str | None = None) -> bool:
    try:
        await client.get(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    return True


@pytest.mark.parametrize(
    ("labels", "other_subject", "namespace_stays"),
    [(MANAGED, False, False), ({}, False, True), (MANAGED, True, True)],
    ids=["ours-and-empty", "not-ours", "another-subject-left"],
)
async def test_revoke_removes_the_identity_and_the_namespace_only_when_ours_and_empty(
    gke: Gke, labels: dict[str, str], other_subject: bool, namespace_stays: bool
) -> None:
    adopt_id = await gke.emulator.seed_cluster("theirs", project="bc-test-project")
    state = await gke.driver.read_adoptable(gke.account, adopt_id)
    client = kube_client(await gke.driver.credentials(gke.account, state.cluster_id))
    try:
        await grant(client, namespace_labels=labels, other_subject=other_subject)

        await gke.driver.revoke_credentials(gke.account, state.cluster_id)

        assert not await exists(client, ClusterRoleBinding, "bc-substrate")
        assert not await exists(client, ServiceAccount, "bc-substrate", "bc-access")
        assert await exists(client, Namespace, "bc-access") == namespace_stays
        await gke.driver.revoke_credentials(gke.account, state.cluster_id)  # again: already gone is fine
    finally:
        await client.close()
