"""What the orphan sweep finds: a thing that carries better-compute's marks and that no record owns.

Each orphan has a stable id (`<kind>:<account>:<cluster id>[:<name>]`) by which an operator names it
for deletion, and what it holds, so that the listing says what a deletion takes with it.

    cluster   a cluster better-compute created (its `substrate-pool` label or tag), with its node pools
    nodePool  a node pool labelled `better-compute.dev/substrate-pool` in a cluster no record of it owns
              (an adopted cluster's owner's own node pools carry no such label and are never listed)
    bcd       bcd's objects of one pool id (every object labelled with it) on a reachable cluster
    claim     the in-cluster claim kube-system/better-compute-substrate naming a pool no record holds
    identity  bc-substrate (bc-access) and its binding, labelled managed-by better-compute, on a cluster
              no adopting record owns

An orphan cluster is listed alone: its node pools, and whatever bcd left in it, go with it.

A cluster or node pool carries, next to its substrate-pool mark, the deployment mark
(`better-compute.dev/deployment=<id>`, kubernetes/deployment.py) of the deployment that made it. One
with another deployment's mark is never an orphan (it is only counted, `otherDeployments`); one
with no deployment mark was made by an older better-compute: it is listed, and says so (`note`). In a
cluster, the claim's deployment mark stands for bcd's objects and bc-substrate too (one cluster backs
one pool): a claim of another deployment's leaves all of them alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "UNMARKED", "Orphan", "Unreachable"]

KINDS = ("bcd", "nodePool", "identity", "claim", "cluster")
"""The kinds, in the order a deletion takes them: what runs in a cluster before the cluster's own access."""


UNMARKED = (
    "carries no deployment mark (made by a better-compute older than the mark): it may be another deployment's "
    "that shares this account; look before deleting"
)


@dataclass(frozen=True, slots=True)
class Orphan:
    kind: str
    account: str
    cluster_id: str
    name: str
    """The cluster's, the node pool's, or (bcd, claim) the pool id the mark names; `bc-substrate` for identity."""
    pool_id: str | None
    holds: tuple[str, ...] = ()
    """What goes with it: a cluster's node pools, bcd's objects as `Kind name`, a node pool's node count."""
    deployment: str | None = None
    """The deployment id its mark names (this deployment's; for bcd, the claim and bc-substrate, the one the
    cluster's claim carries), None where there is none: made by a better-compute older than the mark."""
    unmarked: bool = False
    """No deployment mark (on it, or on the claim it is found under): it may be another deployment's, made
    before the mark."""

    @property
    def id(self) -> str:
        base = f"{self.kind}:{self.account}:{self.cluster_id}"
        return f"{base}:{self.name}" if self.kind in ("nodePool", "bcd") else base

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "account": self.account,
            "clusterId": self.cluster_id,
            "name": self.name,
            "poolId": self.pool_id,
            "holds": list(self.holds),
            "deployment": self.deployment,
            "note": UNMARKED if self.unmarked else None,
        }


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A cluster the sweep could not look into (its credential refused, its API not answering): what runs
    in it is not known, and a sweep again lists it when it answers."""

    account: str
    cluster_id: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"account": self.account, "clusterId": self.cluster_id, "message": self.message}
