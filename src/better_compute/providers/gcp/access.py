"""Revoking better-compute's own identity on an adopted GKE cluster.

On an adopted cluster the substrate may have made the `bc-substrate` ServiceAccount
in `bc-access` and bound it to cluster-admin (ClusterRoleBinding `bc-substrate`).
Revocation deletes both, then the namespace, but only when better-compute made it
(`app.kubernetes.io/managed-by=better-compute`) and no subject is left in it (no
ServiceAccount besides `default`). Whatever is already gone counts as removed.
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

ACCESS_NAMESPACE = "bc-access"
SUBJECT = "bc-substrate"
MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "better-compute"


async def _delete(client: AsyncClient, kind: Any, name: str, namespace: str | None = None) -> None:
    try:
        await client.delete(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


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
        if account.metadata is not None and account.metadata.name != "default":
            return False
    return True


async def revoke(credentials: ClusterCredentials) -> None:
    """Remove bc-substrate, its binding, and the bc-access namespace when ours and empty."""
    client = kube_client(credentials)
    try:
        await _delete(client, ClusterRoleBinding, SUBJECT)
        await _delete(client, ServiceAccount, SUBJECT, ACCESS_NAMESPACE)
        if await _namespace_is_ours_and_empty(client):
            await _delete(client, Namespace, ACCESS_NAMESPACE)
    except ApiError as exc:
        code = ErrorCode.PERMISSION_DENIED if exc.status.code in (401, 403) else ErrorCode.UNAVAILABLE
        raise ComputeError(code, f"revoking {SUBJECT} on the cluster failed: {exc.status.message}") from exc
    except httpx2.HTTPError as exc:
        raise ComputeError(
            ErrorCode.UNAVAILABLE, f"revoking {SUBJECT}: the cluster did not answer ({type(exc).__name__})"
        ) from exc
    finally:
        await client.close()
