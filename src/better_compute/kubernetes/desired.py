"""From a pool's `policy.substrate` to what its cluster and node pools should be: pure, no I/O.

The cluster's name is derived from the pool id, and each flavor's node pool is named
`bc-<last 6 of the pool id>-<flavor>` on created and adopted clusters alike, so a run
after a crash addresses what an earlier run made, and never a node pool of the user's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.kubernetes.policy import BookedNodes, parse_substrate
from better_compute.kubernetes.provider import Accelerators, Autoscaling, ClusterSpec, NodePoolSpec

__all__ = ["DesiredFlavor", "DesiredSubstrate", "NodeShape", "cluster_name", "desired_substrate"]


@dataclass(frozen=True)
class DesiredFlavor:
    flavor: str
    spec: NodePoolSpec


@dataclass(frozen=True)
class DesiredSubstrate:
    account: str
    mode: str  # "create" | "adopt"
    cluster: ClusterSpec | None  # None when adopting
    adopt_id: str | None
    flavors: tuple[DesiredFlavor, ...]
    booked_nodes: BookedNodes = "wait"
    """What a shrink does with a booked Node it must take (`disruption.bookedNodes`)."""


def cluster_name(pool_id: str) -> str:
    """`bc-<last 10 of the pool id>`: valid on GKE (40 characters, a letter first), EKS and DOKS."""
    return f"bc-{pool_id[-10:]}".lower()


def desired_substrate(pool_id: str, stored: Mapping[str, Any]) -> DesiredSubstrate:
    """The substrate a pool's stored `policy.substrate` asks for, parsed once (policy.py)."""
    substrate = parse_substrate(stored)
    flavors = tuple(DesiredFlavor(f.name, f.node_pool(pool_id)) for f in substrate.flavors)
    spec = substrate.cluster_spec(cluster_name(pool_id), pool_id)
    return DesiredSubstrate(
        substrate.account, substrate.mode, spec, substrate.cluster.adopt, flavors, substrate.booked_nodes
    )


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What never changes in place on a node pool, as its row stores it (`node_pools.shape`):
    read from that JSON in one place (`stored`), written in one (`to_json`)."""

    machine_type: str
    accelerators: Accelerators | None
    spot: bool
    zones: tuple[str, ...]
    disk_gib: int | None
    labels: Mapping[str, str]

    @classmethod
    def of(cls, spec: NodePoolSpec) -> NodeShape:
        return cls(spec.machine_type, spec.accelerators, spec.spot, spec.zones, spec.disk_gib, dict(spec.labels))

    @classmethod
    def stored(cls, shape: Mapping[str, Any]) -> NodeShape:
        accelerators = shape.get("accelerators")
        return cls(
            machine_type=str(shape.get("machineType")),
            accelerators=Accelerators(str(accelerators["type"]), int(accelerators["count"])) if accelerators else None,
            spot=bool(shape.get("spot")),
            zones=tuple(shape.get("zones") or ()),
            disk_gib=shape.get("diskGiB"),
            labels=dict(shape.get("labels") or {}),
        )

    def to_json(self) -> dict[str, Any]:
        accelerators = self.accelerators
        return {
            "machineType": self.machine_type,
            "accelerators": {"type": accelerators.type, "count": accelerators.count} if accelerators else None,
            "spot": self.spot,
            "zones": list(self.zones),
            "diskGiB": self.disk_gib,
            "labels": dict(self.labels),
        }

    def spec(self, name: str, node_count: int, scaling: Autoscaling | None) -> NodePoolSpec:
        """The NodePoolSpec a stored node pool row stands for."""
        return NodePoolSpec(
            name=name,
            machine_type=self.machine_type,
            node_count=node_count,
            labels=dict(self.labels),
            accelerators=self.accelerators,
            spot=self.spot,
            zones=self.zones,
            disk_gib=self.disk_gib,
            autoscaling=scaling,
        )
