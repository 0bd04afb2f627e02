"""The kubernetes side's revocation on an adopted GKE cluster, end to end with the driver's own admin
credential (the rules themselves are tested once, in tests/kubernetes/cluster_access/)."""

from __future__ import annotations

from gke_world import Gke
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.kubernetes.cluster_access.adopted_cluster import revoke_identity
from better_compute.kubernetes.cluster_access.kube_api import kube_client

MANAGED = {"app.kubernetes.io/managed-by": "better-compute"}


async def exists(client: AsyncClient, kind: type, name: str, namespace: str | None = None) -> bool:
    try:
        await client.get(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    return True


async def test_revoke_removes_the_identity_and_the_namespace_better_compute_made(gke: Gke) -> None:
    adopt_id = await gke.emulator.seed_cluster("theirs", project="bc-test-project")
    state = await gke.driver.read_adoptable(gke.account, adopt_id)
    client = kube_client(await gke.driver.credentials(gke.account, state.cluster_id))
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

        await revoke_identity(gke.driver, gke.account, state.cluster_id)

        assert not await exists(client, ClusterRoleBinding, "bc-substrate")
        assert not await exists(client, ServiceAccount, "bc-substrate", "bc-access")
        assert not await exists(client, Namespace, "bc-access")
        await revoke_identity(gke.driver, gke.account, state.cluster_id)  # again: already gone is fine
    finally:
        await client.close()
