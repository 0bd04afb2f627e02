"""How the substrate reaches an adopted cluster, and how it leaves it.

reach    with the provider's admin credential: find the admission policy version the
         cluster serves (refused when none: substrate_identity.py), take the in-cluster
         claim (refused when another pool holds it), make the bc-substrate identity where
         missing, and mint a 600 s token for it; the run then works as bc-substrate
leave    last in teardown, when the in-cluster claim names this pool (whatever the
         database says): revoke bc-substrate on the same admin client
         (`revoke_substrate_identity`), then delete the claim. A cluster that is gone has
         nothing left to take back.

Revoking is the kubernetes side's own work: what it takes back is what it made. The provider's
driver only mints the admin credential it is done with.
"""

from __future__ import annotations

from datetime import datetime

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.cluster_claim import holder_of, release_claim, take_claim
from better_compute.kubernetes.cluster_access.kube_api import cluster_client, credentials_client
from better_compute.kubernetes.cluster_access.substrate_identity import (
    ensure_substrate_identity,
    guard_api_version,
    revoke_substrate_identity,
    substrate_credentials,
)
from better_compute.kubernetes.provider import ClusterCredentials, ProviderKubernetes
from better_compute.vps.provider import ProviderAccount

__all__ = ["leave_adopted", "reach_adopted", "revoke_identity"]


async def reach_adopted(
    driver: ProviderKubernetes,
    account: ProviderAccount,
    cluster_id: str,
    pool_id: str,
    now: datetime,
    deployment: str | None = None,
) -> ClusterCredentials:
    """bc-substrate's credential for this run, once the cluster is claimed for `pool_id` (by `deployment`)."""
    admin = await driver.credentials(account, cluster_id)
    async with credentials_client(admin) as client:
        guard_api = await guard_api_version(client)  # before anything is made: a refusal leaves the cluster as it was
        await take_claim(client, pool_id, deployment)
        await ensure_substrate_identity(client, guard_api)
        return await substrate_credentials(client, admin, now)


async def _unless_gone(
    driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str, exc: ComputeError
) -> None:
    """Raise `exc` unless it is a NOT_FOUND of a cluster the provider no longer has."""
    if exc.code is not ErrorCode.NOT_FOUND or await driver.get_cluster(account, cluster_id) is not None:
        raise exc


async def leave_adopted(driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str, pool_id: str) -> None:
    """When the in-cluster claim names `pool_id`: revoke bc-substrate, then give back the claim.
    A claim that is another's, or gone, leaves everything as it is. Safe to repeat after a crash."""
    try:
        async with cluster_client(driver, account, cluster_id) as client:
            if await holder_of(client) != pool_id:
                return  # never ours, or already given back: nothing of ours is left to take back
            await revoke_substrate_identity(client)
            await release_claim(client, pool_id)
    except ComputeError as exc:
        await _unless_gone(driver, account, cluster_id, exc)


async def revoke_identity(driver: ProviderKubernetes, account: ProviderAccount, cluster_id: str) -> None:
    """Revoke bc-substrate on a fresh admin credential, whoever claims the cluster (the sweep's
    `identity` orphan). A cluster that is gone has nothing left to revoke."""
    try:
        async with cluster_client(driver, account, cluster_id) as client:
            await revoke_substrate_identity(client)
    except ComputeError as exc:
        await _unless_gone(driver, account, cluster_id, exc)
