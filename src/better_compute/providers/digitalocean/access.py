"""Removing better-compute's own identity from an adopted cluster (`revoke_credentials`).

The substrate reaches an adopted cluster as the `bc-substrate` ServiceAccount in
`bc-access`, bound to cluster-admin by the ClusterRoleBinding `bc-substrate`. On
teardown both go, and the namespace goes too once no subject is left in it (no
ServiceAccount but `default`) and only if better-compute made it (it carries
`app.kubernetes.io/managed-by=better-compute`). Whatever is already gone is fine.
"""

from __future__ import annotations

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.client import kube_client
from better_compute.kubernetes.provider import ClusterCredentials

__all__ = ["ACCESS_NAMESPACE", "MANAGED_BY", "SUBSTRATE_SUBJECT", "revoke_access", "revoke_substrate_access"]

ACCESS_NAMESPACE = "bc-access"
SUBSTRATE_SUBJECT = "bc-substrate"
MANAGED_BY = ("app.kubernetes.io/managed-by", "better-compute")


async def _delete_if_present(client: AsyncClient, kind: type, name: str, namespace: str | None = None) -> None:
    try:
        if namespace is None:
            await client.delete(kind, name)
        else:
            await client.delete(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


async def revoke_substrate_access(client: AsyncClient) -> None:
    """Delete the binding, the ServiceAccount, and the namespace when it is ours and empty."""
    await _delete_if_present(client, ClusterRoleBinding, SUBSTRATE_SUBJECT)
    await _delete_if_present(client, ServiceAccount, SUBSTRATE_SUBJECT, ACCESS_NAMESPACE)
    try:
        namespace = await client.get(Namespace, ACCESS_NAMESPACE)
    except ApiError as exc:
        if exc.status.code == 404:
            return
        raise
    labels = (namespace.metadata.labels if namespace.metadata else None) or {}
    if labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
        return
    async for account in client.list(ServiceAccount, namespace=ACCESS_NAMESPACE):
        if account.metadata is not None and account.metadata.name != "default":
            return
    await _delete_if_present(client, Namespace, ACCESS_NAMESPACE)


async def revoke_access(credentials: ClusterCredentials) -> None:
    """Revoke better-compute's identity on the cluster these credentials reach."""
    client = kube_client(credentials)
    try:
        await revoke_substrate_access(client)
    except ApiError as exc:
        code = exc.status.code or 0
        error = ErrorCode.PERMISSION_DENIED if code in (401, 403) else ErrorCode.UNAVAILABLE
        raise ComputeError(error, f"the cluster refused to revoke bc-substrate: {exc.status.message}") from exc
    except httpx2.HTTPError as exc:
        raise ComputeError(
            ErrorCode.UNAVAILABLE, f"the cluster API did not answer while revoking bc-substrate: {type(exc).__name__}"
        ) from exc
    finally:
        await client.close()
