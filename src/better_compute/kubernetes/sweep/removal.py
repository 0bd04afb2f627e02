"""Remove one orphan, by the same calls teardown makes, each safe to repeat.

    bcd       every object labelled with its pool id (substrates/agent_step.remove_bcd)
    nodePool  the provider's node pool delete (its machines go with it)
    identity  cluster_access.adopted_cluster.revoke_identity: bc-substrate and its binding when labelled
              ours, bc-access when ours and empty
    claim     the in-cluster claim, only while it still names that pool
    cluster   first its node pools that carry our mark, as teardown does (EKS refuses to delete a cluster
              with node groups attached); once none is left, the provider's cluster delete (what runs in
              it goes with it). A cluster whose node pools are still going is `pending`: the sweep lists
              it again, and a delete then finishes it.

What is already gone counts as removed. Only what `find_orphans` found again just before is passed
here: an id the sweep no longer finds is never acted on. A cluster's or node pool's deployment mark
is read again at the provider right before its delete (it may have changed since the sweep): one
that now carries another deployment's mark is refused (INVALID_STATE), and so are a cluster's node
pools of another deployment.
"""

from __future__ import annotations

import httpx2
from lightkube import ApiError

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.adopted_cluster import revoke_identity
from better_compute.kubernetes.cluster_access.cluster_claim import claim_marks, release_claim
from better_compute.kubernetes.cluster_access.kube_api import cluster_client, kube_error
from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import DEPLOYMENT_LABEL, NodePoolStatus, ProviderKubernetes
from better_compute.kubernetes.substrates.agent_step import remove_bcd
from better_compute.kubernetes.sweep.orphans import Orphan
from better_compute.vps.provider import ProviderAccount

__all__ = ["remove_orphan"]


async def _in_cluster(driver: ProviderKubernetes, account: ProviderAccount, orphan: Orphan, ours: str) -> None:
    """bcd's objects or the claim (`identity` goes through the driver), once the claim does not say the
    cluster is another deployment's now."""
    async with cluster_client(driver, account, orphan.cluster_id) as client:
        try:
            marks = await claim_marks(client)
            _not_theirs(orphan, marks[1] if marks is not None else None, ours)
            if orphan.kind == "bcd":
                await remove_bcd(client, orphan.name)
            elif orphan.kind == "claim":
                await release_claim(client, orphan.name)
        except ApiError as exc:
            raise kube_error(f"removing {orphan.id}", exc) from exc
        except httpx2.HTTPError as exc:
            message = f"removing {orphan.id}: the cluster API did not answer ({type(exc).__name__})"
            raise ComputeError(ErrorCode.UNAVAILABLE, message) from exc


def _not_theirs(orphan: Orphan, mark: str | None, ours: str) -> None:
    """Refuse a delete of what now carries another deployment's mark."""
    if mark not in (None, ours):
        raise ComputeError(
            ErrorCode.INVALID_STATE,
            f"{orphan.id} now carries another deployment's mark ({DEPLOYMENT_LABEL}={mark}): left alone",
        )


async def _cluster(driver: ProviderKubernetes, account: ProviderAccount, orphan: Orphan, ours: str) -> str | None:
    state = await driver.get_cluster(account, orphan.cluster_id)
    if state is None:
        return None
    _not_theirs(orphan, state.deployment, ours)
    going = []
    for name in state.node_pools:
        pool = await driver.get_node_pool(account, orphan.cluster_id, name)
        if pool is None or not pool.labels.get(SUBSTRATE_POOL_LABEL):
            continue
        _not_theirs(orphan, pool.deployment, ours)
        if pool.status is not NodePoolStatus.DELETING:
            await driver.delete_node_pool(account, orphan.cluster_id, name)
        going.append(name)
    if going:
        return (
            f"its node pools ({', '.join(going)}) are being deleted first; once they are gone, "
            "a sweep --delete deletes the cluster"
        )
    await driver.delete_cluster(account, orphan.cluster_id)
    return None


async def remove_orphan(driver: ProviderKubernetes, account: ProviderAccount, orphan: Orphan, ours: str) -> str | None:
    """Start removing `orphan` (a provider delete answers once it has begun); a ComputeError says why not.
    Answers why it is not done yet where it must wait (a cluster's node pools going first), else None.
    `ours` is this deployment's id: what carries another's is never deleted."""
    if orphan.kind == "cluster":
        return await _cluster(driver, account, orphan, ours)
    if orphan.kind == "nodePool":
        pool = await driver.get_node_pool(account, orphan.cluster_id, orphan.name)
        if pool is None:
            return None
        _not_theirs(orphan, pool.deployment, ours)
        await driver.delete_node_pool(account, orphan.cluster_id, orphan.name)
    else:
        await _in_cluster(driver, account, orphan, ours)
        if orphan.kind == "identity":
            await revoke_identity(driver, account, orphan.cluster_id)
    return None
