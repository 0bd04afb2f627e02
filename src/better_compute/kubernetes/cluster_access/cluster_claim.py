"""The in-cluster claim: `kube-system/better-compute-substrate`, labelled with the pool id.

One cluster backs one pool, whichever deployment reaches it, and every cluster a substrate
backs carries it, created or adopted. The claim is created, never
applied: a create that answers 409 reads what is there, and a claim labelled with another
pool id (another pool, or another better-compute deployment on another database) refuses
this substrate before it adds node pools or applies bcd. Teardown deletes the claim only
when it is this pool's (a created cluster's goes with the cluster). It also carries the mark of the
deployment that took it (`better-compute.dev/deployment`), by which another deployment's orphan
sweep leaves the cluster's in-cluster objects alone (`claim_marks`).
"""

from __future__ import annotations

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.cluster_access.kube_api import kube_error, missing_ok
from better_compute.kubernetes.names import MANAGED_BY_KEY, MANAGED_BY_VALUE, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import DEPLOYMENT_LABEL

__all__ = [
    "CLAIMED_ELSEWHERE",
    "CLAIM_NAME",
    "CLAIM_NAMESPACE",
    "claim_marks",
    "holder_of",
    "release_claim",
    "take_claim",
]

CLAIM_NAMESPACE = "kube-system"
CLAIM_NAME = "better-compute-substrate"
CLAIMED_ELSEWHERE = "claimedElsewhere"
"""The reason of the error a substrate meets on a cluster another pool holds."""


def _claim(pool_id: str, deployment: str | None) -> ConfigMap:
    labels = {SUBSTRATE_POOL_LABEL: pool_id, MANAGED_BY_KEY: MANAGED_BY_VALUE}
    if deployment:
        labels[DEPLOYMENT_LABEL] = deployment
    return ConfigMap(
        metadata=ObjectMeta(name=CLAIM_NAME, namespace=CLAIM_NAMESPACE, labels=labels),
        data={"poolId": pool_id},
    )


async def claim_marks(client: AsyncClient) -> tuple[str, str | None] | None:
    """(the pool id the claim names, "" for none; the deployment id it carries, None for none), or None
    when there is no claim."""
    try:
        found = await client.get(ConfigMap, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise kube_error(f"reading ConfigMap {CLAIM_NAMESPACE}/{CLAIM_NAME}", exc) from exc
    labels = (found.metadata.labels if found.metadata else None) or {}
    return str(labels.get(SUBSTRATE_POOL_LABEL, "")), labels.get(DEPLOYMENT_LABEL) or None


async def holder_of(client: AsyncClient) -> str | None:
    """The pool id the claim names, "" for a claim without one, None when there is no claim."""
    marks = await claim_marks(client)
    return marks[0] if marks is not None else None


async def take_claim(client: AsyncClient, pool_id: str, deployment: str | None = None) -> None:
    """Create the claim for `pool_id` (marked with `deployment`), or find it already ours; CONFLICT
    (`claimedElsewhere`) when the cluster is another pool's."""
    try:
        await client.create(_claim(pool_id, deployment))
        return
    except ApiError as exc:
        if exc.status.code != 409:
            raise kube_error(f"creating ConfigMap {CLAIM_NAMESPACE}/{CLAIM_NAME}", exc) from exc
    holder = await holder_of(client)
    if holder is None:  # deleted between our create and read: try once more on the next run
        raise ComputeError(ErrorCode.UNAVAILABLE, f"ConfigMap {CLAIM_NAMESPACE}/{CLAIM_NAME} changed while claiming")
    if holder != pool_id:
        raise ComputeError(
            ErrorCode.CONFLICT,
            f"the cluster is claimed by pool {holder or '(unnamed)'} (ConfigMap {CLAIM_NAMESPACE}/{CLAIM_NAME}), "
            "perhaps of another better-compute deployment: one cluster backs one pool. Archive that pool and wait "
            "for its substrate to be deleted; delete the ConfigMap by hand only if that deployment is gone for good",
            reason=CLAIMED_ELSEWHERE,
        )


async def release_claim(client: AsyncClient, pool_id: str) -> None:
    """Delete the claim when it is `pool_id`'s; another pool's claim, or none, is left as it is."""
    if await holder_of(client) == pool_id:
        await missing_ok(
            f"deleting ConfigMap {CLAIM_NAMESPACE}/{CLAIM_NAME}",
            client.delete(ConfigMap, CLAIM_NAME, namespace=CLAIM_NAMESPACE),
        )
