"""Names the substrate owns and other modules refer to: its work kinds, labels and account holds.

They live here, below fleet, so that fleet can queue substrate work and hold an
account for a teardown without reaching into the reconcilers.
"""

from __future__ import annotations

from better_compute.kubernetes.provider import SUBSTRATE_POOL_LABEL

__all__ = [
    "APP_LABEL",
    "BCD_NAMESPACE",
    "CAPACITY_LABEL",
    "CLUSTER_KIND",
    "JOIN_AUDIENCE",
    "LEAVING_ANNOTATION",
    "MANAGED_BY_KEY",
    "MANAGED_BY_VALUE",
    "SUBSTRATE_KIND",
    "SUBSTRATE_POOL_LABEL",
    "substrate_holder",
    "substrate_labels",
]

SUBSTRATE_KIND = "kubernetes.substrate"
"""The engine work kind of the substrate reconciler; its key is the pool id."""

CLUSTER_KIND = "kubernetes.cluster"
"""The engine work kind of the clusters reconciler; its key is the cluster record's id."""

JOIN_AUDIENCE = "better-compute.dev/join"
"""The audience of the ServiceAccount token bcd presents at join: good for nothing else."""

CAPACITY_LABEL = "better-compute.dev/capacity"
"""On a Spot flavor's node pool: `spot`."""

LEAVING_ANNOTATION = "better-compute.dev/leaving"
"""On a Node the substrate cordoned to take away: a shrink's (`cordoned`, `removed`), so that a later
run that picks another Node uncordons this one and only what it cordoned, or a replacement's
(`replacing`, `replaced`: replace_step.py), which no shrink uncordons."""


MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "better-compute"
"""The label that says better-compute made an object in a cluster (and may delete it)."""

BCD_NAMESPACE = "bc-system"
"""Where bcd's objects (and the join reviewer's ServiceAccount) live in a substrate's cluster."""
APP_LABEL = "app.kubernetes.io/name"


def substrate_labels(pool_id: str) -> dict[str, str]:
    """The labels of every object the substrate makes for bcd (and the join reviewer): teardown finds them by pool."""
    return {SUBSTRATE_POOL_LABEL: pool_id, APP_LABEL: "bcd", MANAGED_BY_KEY: MANAGED_BY_VALUE}


def substrate_holder(pool_id: str) -> str:
    """The account-hold name of a pool's substrate teardown (`vps_account_holds`)."""
    return f"substrate:{pool_id}"
