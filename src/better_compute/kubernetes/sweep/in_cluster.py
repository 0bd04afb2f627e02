"""What a reachable cluster holds of better-compute's: bcd's objects by pool id, the claim, bc-substrate.

Read with the provider's admin credential of this sweep alone (minted through the driver, held in
memory for the read, never stored), by the same marks teardown goes by: bcd's objects carry
`better-compute.dev/substrate-pool=<pool id>`, the claim names its pool in that label, and the
identity is `bc-access/bc-substrate` with its binding, labelled managed-by better-compute (an
owner's own objects of those names are never counted). The claim's deployment mark says whose all
of it is: one cluster backs one pool. The cluster-wide objects an adoption leaves on purpose (the
ClusterRole better-compute:edit and the access guard) are not listed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from lightkube import ApiError, AsyncClient, operators
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.kubernetes.cluster_access.cluster_claim import claim_marks
from better_compute.kubernetes.cluster_access.kube_api import kube_call, kube_error
from better_compute.kubernetes.cluster_access.substrate_identity import ACCESS_NAMESPACE, SUBSTRATE_SUBJECT
from better_compute.kubernetes.names import MANAGED_BY_KEY, MANAGED_BY_VALUE, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.substrates.agent_step import BCD_CLUSTER_KINDS, BCD_KINDS
from better_compute.kubernetes.substrates.manifests import NAMESPACE

__all__ = ["InCluster", "read_in_cluster"]


@dataclass(frozen=True, slots=True)
class InCluster:
    bcd: dict[str, tuple[str, ...]]
    """pool id -> bcd's objects labelled with it, as `Kind name` (namespaced ones in bc-system)."""
    claim: str | None
    """The pool id the in-cluster claim names ("" for a claim without one), None without a claim."""
    identity: tuple[str, ...]
    """bc-substrate's objects of ours that are there, as `Kind name`."""
    claim_deployment: str | None = None
    """The deployment id the claim carries (None without a claim, or on one made before the mark)."""


def _name(obj: Any) -> str | None:
    return obj.metadata.name if obj.metadata is not None and obj.metadata.name else None


def _pool(obj: Any) -> str:
    return str(((obj.metadata.labels if obj.metadata is not None else None) or {}).get(SUBSTRATE_POOL_LABEL, ""))


async def _listed(client: AsyncClient, kind: Any, namespace: str | None) -> list[Any]:
    selector: dict[str, Any] = {SUBSTRATE_POOL_LABEL: operators.exists()}
    items = client.list(kind, namespace=namespace, labels=selector) if namespace else client.list(kind, labels=selector)
    try:
        return [obj async for obj in items]
    except ApiError as exc:
        raise kube_error(f"listing {kind.__name__} labelled {SUBSTRATE_POOL_LABEL}", exc) from exc


async def _ours(client: AsyncClient, kind: Any, name: str, namespace: str | None = None) -> bool:
    try:
        found = await client.get(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise kube_error(f"reading {kind.__name__} {name}", exc) from exc
    labels = (found.metadata.labels if found.metadata is not None else None) or {}
    return bool(labels.get(MANAGED_BY_KEY) == MANAGED_BY_VALUE)


async def read_in_cluster(client: AsyncClient) -> InCluster:
    """Everything of ours on the cluster `client` reaches; a refusal is a ComputeError (the cluster is unreachable)."""
    bcd: defaultdict[str, list[str]] = defaultdict(list)
    for kind in BCD_KINDS:
        for obj in await _listed(client, kind, NAMESPACE):
            if name := _name(obj):
                bcd[_pool(obj)].append(f"{kind.__name__} {NAMESPACE}/{name}")
    for kind in (*BCD_CLUSTER_KINDS, Namespace):
        for obj in await _listed(client, kind, None):
            if name := _name(obj):
                bcd[_pool(obj)].append(f"{kind.__name__} {name}")
    identity = []
    if await kube_call("reading bc-substrate", _ours(client, ServiceAccount, SUBSTRATE_SUBJECT, ACCESS_NAMESPACE)):
        identity.append(f"ServiceAccount {ACCESS_NAMESPACE}/{SUBSTRATE_SUBJECT}")
    if await kube_call("reading bc-substrate's binding", _ours(client, ClusterRoleBinding, SUBSTRATE_SUBJECT)):
        identity.append(f"ClusterRoleBinding {SUBSTRATE_SUBJECT}")
    marks = await claim_marks(client)
    return InCluster(
        bcd={pool: tuple(objects) for pool, objects in bcd.items() if pool},
        claim=marks[0] if marks is not None else None,
        identity=tuple(identity),
        claim_deployment=marks[1] if marks is not None else None,
    )
