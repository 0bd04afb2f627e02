"""better-compute's own identity on an adopted cluster, and taking it back.

The substrate reaches an adopted cluster as the `bc-substrate` ServiceAccount in the
`bc-access` namespace, bound to cluster-admin by the ClusterRoleBinding `bc-substrate`.
Teardown revokes it (`ProviderKubernetes.revoke_credentials`): the binding and the
ServiceAccount go when they carry `app.kubernetes.io/managed-by=better-compute` (an owner's
own objects of those names stay), and the namespace goes too, but only when better-compute made it
(it carries `app.kubernetes.io/managed-by=better-compute`) and no subject is left in
it (no ServiceAccount but the `default` one every namespace has). Whatever is already
gone counts as removed, so a retried teardown finishes where the last one stopped.

This is the same on every provider, so it lives here once; each driver mints the
credentials and keeps what is its own (EKS leaves the tenant's access entry alone).
"""

from __future__ import annotations

from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.client import kube_client
from better_compute.kubernetes.provider import ClusterCredentials

__all__ = [
    "ACCESS_NAMESPACE",
    "CLUSTER_ROLE",
    "MANAGED_BY_KEY",
    "MANAGED_BY_VALUE",
    "SUBSTRATE_SUBJECT",
    "revoke_substrate_access",
]

ACCESS_NAMESPACE = "bc-access"
SUBSTRATE_SUBJECT = "bc-substrate"
"""The ServiceAccount's name, and its ClusterRoleBinding's."""
CLUSTER_ROLE = "cluster-admin"
"""What the binding grants."""
MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "better-compute"
"""The namespace label that says better-compute made it (and may delete it)."""
_DEFAULT_ACCOUNT = "default"


async def _delete_if_present(client: AsyncClient, kind: type[Any], name: str, namespace: str | None = None) -> None:
    try:
        await client.delete(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


async def _delete_if_ours(client: AsyncClient, kind: type[Any], name: str, namespace: str | None = None) -> None:
    """Delete the object only when it carries better-compute's label: an owner's own `bc-substrate` stays."""
    try:
        found = await client.get(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return
        raise
    labels = (found.metadata.labels if found.metadata else None) or {}
    if labels.get(MANAGED_BY_KEY) == MANAGED_BY_VALUE:
        await _delete_if_present(client, kind, name, namespace)


async def _namespace_is_ours_and_empty(client: AsyncClient) -> bool:
    try:
        namespace = await client.get(Namespace, ACCESS_NAMESPACE)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    labels = (namespace.metadata.labels if namespace.metadata else None) or {}
    if labels.get(MANAGED_BY_KEY) != MANAGED_BY_VALUE:
        return False
    async for account in client.list(ServiceAccount, namespace=ACCESS_NAMESPACE):
        if account.metadata is not None and account.metadata.name != _DEFAULT_ACCOUNT:
            return False
    return True


async def _remove(client: AsyncClient) -> None:
    await _delete_if_ours(client, ClusterRoleBinding, SUBSTRATE_SUBJECT)
    await _delete_if_ours(client, ServiceAccount, SUBSTRATE_SUBJECT, ACCESS_NAMESPACE)
    if await _namespace_is_ours_and_empty(client):
        await _delete_if_present(client, Namespace, ACCESS_NAMESPACE)


async def revoke_substrate_access(credentials: ClusterCredentials) -> None:
    """Remove `bc-substrate`, its binding, and `bc-access` when ours and empty, from the
    cluster these credentials reach. A refused credential is PERMISSION_DENIED; any other
    refusal, or a cluster API that does not answer, is UNAVAILABLE (the teardown retries)."""
    client = kube_client(credentials)
    try:
        await _remove(client)
    except ApiError as exc:
        code = ErrorCode.PERMISSION_DENIED if exc.status.code in (401, 403) else ErrorCode.UNAVAILABLE
        raise ComputeError(code, f"the cluster refused to revoke {SUBSTRATE_SUBJECT}: {exc.status.message}") from exc
    except httpx2.HTTPError as exc:
        raise ComputeError(
            ErrorCode.UNAVAILABLE,
            f"the cluster API did not answer while revoking {SUBSTRATE_SUBJECT}: {type(exc).__name__}",
        ) from exc
    finally:
        await client.close()
