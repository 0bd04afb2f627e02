"""Who better-compute is on an EKS cluster, and taking that back.

- Adoption: better-compute grants itself admin only on clusters it created
  (`bootstrapClusterCreatorAdminPermissions`). On a cluster it adopts, the tenant
  must give the account's principal an access entry with AmazonEKSClusterAdminPolicy
  over the whole cluster; `admin_access_problem` says what is missing.
- Revocation: the `bc-substrate` ServiceAccount in `bc-access`, its ClusterRoleBinding,
  and the namespace when better-compute made it (label
  `app.kubernetes.io/managed-by=better-compute`) and no subject is left in it.
  The tenant's access entry stays: it is theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.client import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.providers.aws.vocabulary import ADMIN_POLICY_ARN

__all__ = [
    "ACCESS_NAMESPACE",
    "MANAGED_BY",
    "SUBSTRATE_SUBJECT",
    "admin_access_problem",
    "principal_of",
    "revoke_substrate_access",
]

ACCESS_NAMESPACE = "bc-access"
SUBSTRATE_SUBJECT = "bc-substrate"
MANAGED_BY = ("app.kubernetes.io/managed-by", "better-compute")


def principal_of(caller_arn: str) -> str:
    """The IAM principal an access entry names: an assumed-role session is its role."""
    if ":sts::" in caller_arn and ":assumed-role/" in caller_arn:
        account = caller_arn.split(":")[4]
        role = caller_arn.split(":assumed-role/")[1].split("/")[0]
        return f"arn:aws:iam::{account}:role/{role}"
    return caller_arn


def _grant_command(cluster: str, region: str, principal: str) -> str:
    return (
        f"aws eks create-access-entry --region {region} --cluster-name {cluster} --principal-arn {principal} && "
        f"aws eks associate-access-policy --region {region} --cluster-name {cluster} --principal-arn {principal} "
        f"--policy-arn {ADMIN_POLICY_ARN} --access-scope type=cluster"
    )


def admin_access_problem(
    cluster: Mapping[str, Any], region: str, principal: str, policies: list[Mapping[str, Any]] | None
) -> str | None:
    """Why better-compute cannot adopt this cluster, or None when it can.
    `policies` is what ListAssociatedAccessPolicies answered for the principal (None: no entry)."""
    name = cluster["name"]
    mode = (cluster.get("accessConfig") or {}).get("authenticationMode", "CONFIG_MAP")
    if mode == "CONFIG_MAP":
        return (
            f"cluster {name} authenticates only through the aws-auth ConfigMap; switch its authenticationMode to "
            f"API_AND_CONFIG_MAP and grant {principal} AmazonEKSClusterAdminPolicy: {_grant_command(name, region, principal)}"
        )
    if policies is None:
        return (
            f"cluster {name} has no access entry for {principal}; better-compute grants itself admin only on "
            f"clusters it created. Grant it AmazonEKSClusterAdminPolicy: {_grant_command(name, region, principal)}"
        )
    for policy in policies:
        if policy.get("policyArn") == ADMIN_POLICY_ARN and (policy.get("accessScope") or {}).get("type") == "cluster":
            return None
    return (
        f"the access entry of {principal} on cluster {name} lacks AmazonEKSClusterAdminPolicy over the whole "
        f"cluster: aws eks associate-access-policy --region {region} --cluster-name {name} --principal-arn "
        f"{principal} --policy-arn {ADMIN_POLICY_ARN} --access-scope type=cluster"
    )


async def _delete_if_present(client: AsyncClient, kind: Any, name: str, namespace: str | None = None) -> None:
    try:
        await client.delete(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


async def _remove(client: AsyncClient) -> None:
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


async def revoke_substrate_access(credentials: ClusterCredentials) -> None:
    """Remove better-compute's in-cluster identity; what is already gone is fine."""
    client = kube_client(credentials)
    try:
        await _remove(client)
    except ApiError as exc:
        code = exc.status.code or 0
        error = ErrorCode.PERMISSION_DENIED if code in (401, 403) else ErrorCode.UNAVAILABLE
        raise ComputeError(error, f"the cluster refused to revoke {SUBSTRATE_SUBJECT}: {exc.status.message}") from exc
    finally:
        await client.close()
