"""Who better-compute is on an EKS cluster, and what revoking it leaves.

- Adoption: better-compute grants itself admin only on clusters it created
  (`bootstrapClusterCreatorAdminPermissions`). On a cluster it adopts, the tenant
  must give the account's principal an access entry with AmazonEKSClusterAdminPolicy
  over the whole cluster; `admin_access_problem` says what is missing.
- Revocation is the kubernetes side's, in the cluster (`better_compute.kubernetes.cluster_access`):
  the EKS side has nothing to revoke, since the tenant's access entry stays: it is theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from better_compute.providers.aws.vocabulary import ADMIN_POLICY_ARN

__all__ = ["NO_ADMIN_ACCESS_ENTRY", "admin_access_problem", "principal_of"]

NO_ADMIN_ACCESS_ENTRY = "no-admin-access-entry"
"""The reason of the error an adopt meets without the access entry."""


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
