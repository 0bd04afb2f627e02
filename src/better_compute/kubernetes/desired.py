"""From a pool's `policy.substrate` to what its cluster and node pools should be: pure, no I/O.

The cluster's name is derived from the pool id, and each flavor's node pool is named
`bc-<last 6 of the pool id>-<flavor>` on created and adopted clusters alike, so a run
after a crash addresses what an earlier run made, and never a node pool of the user's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.kubernetes.names import CAPACITY_LABEL, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.provider import (
    Accelerators,
    Autoscaling,
    ClusterSpec,
    NodePoolSpec,
    adopted_node_pool_name,
)

__all__ = ["DesiredFlavor", "DesiredSubstrate", "cluster_name", "desired_substrate", "shape_of", "spec_of"]


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


def cluster_name(pool_id: str) -> str:
    """`bc-<last 10 of the pool id>`: valid on GKE (40 characters, a letter first), EKS and DOKS."""
    return f"bc-{pool_id[-10:]}".lower()


def _flavor(pool_id: str, flavor: Mapping[str, Any]) -> DesiredFlavor:
    name = str(flavor["name"])
    spot = bool(flavor.get("spot", False))
    labels = {SUBSTRATE_POOL_LABEL: pool_id, **dict(flavor.get("labels") or {})}
    if spot:
        labels[CAPACITY_LABEL] = "spot"
    gpus = flavor.get("gpus")
    scaling = flavor.get("autoscaling")
    return DesiredFlavor(
        name,
        NodePoolSpec(
            name=adopted_node_pool_name(pool_id, name),
            machine_type=str(flavor["machineType"]),
            node_count=int(flavor["nodes"]),
            labels=labels,
            accelerators=Accelerators(str(gpus["type"]), int(gpus["count"])) if gpus else None,
            spot=spot,
            zones=tuple(flavor.get("zones") or ()),
            disk_gib=flavor.get("diskGiB"),
            autoscaling=Autoscaling(int(scaling["minNodes"]), int(scaling["maxNodes"])) if scaling else None,
        ),
    )


def desired_substrate(pool_id: str, substrate: Mapping[str, Any]) -> DesiredSubstrate:
    """The substrate a validated `policy.substrate` asks for (FleetConfig checked its shape)."""
    cluster = substrate["cluster"]
    create = cluster.get("create")
    flavors = tuple(_flavor(pool_id, f) for f in substrate["flavors"])
    if create is not None:
        spec = ClusterSpec(
            name=cluster_name(pool_id),
            location=str(create["location"]),
            private_nodes=bool(create.get("privateNodes", False)),
            labels={SUBSTRATE_POOL_LABEL: pool_id},
        )
        return DesiredSubstrate(str(substrate["account"]), "create", spec, None, flavors)
    return DesiredSubstrate(str(substrate["account"]), "adopt", None, str(cluster["adopt"]), flavors)


def shape_of(spec: NodePoolSpec) -> dict[str, Any]:
    """What never changes in place, as stored: machine type, accelerators, spot, zones, disk, labels."""
    return {
        "machineType": spec.machine_type,
        "accelerators": {"type": spec.accelerators.type, "count": spec.accelerators.count}
        if spec.accelerators
        else None,
        "spot": spec.spot,
        "zones": list(spec.zones),
        "diskGiB": spec.disk_gib,
        "labels": dict(spec.labels),
    }


def spec_of(name: str, shape: Mapping[str, Any], node_count: int, scaling: Autoscaling | None) -> NodePoolSpec:
    """The NodePoolSpec a stored node pool row stands for."""
    accelerators = shape.get("accelerators")
    return NodePoolSpec(
        name=name,
        machine_type=str(shape["machineType"]),
        node_count=node_count,
        labels=dict(shape.get("labels") or {}),
        accelerators=Accelerators(str(accelerators["type"]), int(accelerators["count"])) if accelerators else None,
        spot=bool(shape.get("spot")),
        zones=tuple(shape.get("zones") or ()),
        disk_gib=shape.get("diskGiB"),
        autoscaling=scaling,
    )
