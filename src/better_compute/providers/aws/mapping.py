"""EKS's answers (botocore dicts) read as better-compute's cluster and node pool states.

`desiredSize` is the node group's total; the state counts per zone (the spec's
unit on EKS), so it is divided by the number of Availability Zones the node
group's subnets span.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from better_compute.kubernetes.provider import (
    DEPLOYMENT_LABEL,
    SUBSTRATE_POOL_LABEL,
    Accelerators,
    Autoscaling,
    ClusterOutputs,
    ClusterState,
    ClusterStatus,
    GpuInfo,
    NodePoolState,
    NodePoolStatus,
)

__all__ = ["cluster_state", "node_pool_state", "scaling_config"]

_CLUSTER_STATUS = {
    "CREATING": ClusterStatus.PROVISIONING,
    "PENDING": ClusterStatus.PROVISIONING,
    "ACTIVE": ClusterStatus.READY,
    "UPDATING": ClusterStatus.UPDATING,
    "DELETING": ClusterStatus.DELETING,
    "FAILED": ClusterStatus.ERROR,
}
_NODEGROUP_STATUS = {
    "CREATING": NodePoolStatus.PROVISIONING,
    "ACTIVE": NodePoolStatus.READY,
    "UPDATING": NodePoolStatus.UPDATING,
    "DELETING": NodePoolStatus.DELETING,
    "CREATE_FAILED": NodePoolStatus.ERROR,
    "DELETE_FAILED": NodePoolStatus.ERROR,
    "DEGRADED": NodePoolStatus.ERROR,
}


def cluster_state(cluster: Mapping[str, Any], region: str, node_pools: list[str]) -> ClusterState:
    status = _CLUSTER_STATUS.get(cluster.get("status", ""), ClusterStatus.ERROR)
    outputs = None
    endpoint = cluster.get("endpoint")
    if endpoint and status in (ClusterStatus.READY, ClusterStatus.UPDATING):
        outputs = ClusterOutputs(
            endpoint=endpoint,
            version=cluster["version"],
            location=region,
            node_version=cluster["version"],
            global_id=cluster["arn"],
            ca_data=(cluster.get("certificateAuthority") or {}).get("data"),
        )
    issues = [i.get("message", "") for i in (cluster.get("health") or {}).get("issues", [])]
    return ClusterState(
        cluster_id=f"{region}/{cluster['name']}",
        name=cluster["name"],
        status=status,
        outputs=outputs,
        private_nodes=bool((cluster.get("resourcesVpcConfig") or {}).get("endpointPrivateAccess", False)),
        message="; ".join(issues) or None,
        node_pools=tuple(sorted(node_pools)),
        substrate_pool=(cluster.get("tags") or {}).get(SUBSTRATE_POOL_LABEL) or None,
        deployment=(cluster.get("tags") or {}).get(DEPLOYMENT_LABEL) or None,
    )


def scaling_config(node_count: int, autoscaling: Autoscaling | None, zones: int) -> dict[str, int]:
    """EKS's scalingConfig for `node_count` nodes per zone over `zones` zones."""
    desired = node_count * zones
    if autoscaling is None:
        return {"minSize": desired, "maxSize": max(desired, 1), "desiredSize": desired}
    return {
        "minSize": autoscaling.min_nodes * zones,
        "maxSize": max(autoscaling.max_nodes * zones, 1),
        "desiredSize": desired,
    }


def bounds_update(autoscaling: Autoscaling, zones: int, current: Mapping[str, int]) -> dict[str, int]:
    """The scalingConfig that sets only an autoscaled node group's bounds: the autoscaler owns `desiredSize`,
    which is sent only when the current one lies outside the new bounds (EKS refuses the update otherwise),
    moved to the nearest bound."""
    low, high = autoscaling.min_nodes * zones, max(autoscaling.max_nodes * zones, 1)
    update = {"minSize": low, "maxSize": high}
    desired = int(current.get("desiredSize", 0))
    if not low <= desired <= high:
        update["desiredSize"] = min(max(desired, low), high)
    return update


def _autoscaling(scaling: Mapping[str, int], zones: int) -> Autoscaling | None:
    low, high, want = scaling.get("minSize", 0), scaling.get("maxSize", 1), scaling.get("desiredSize", 0)
    if low == want and high == max(want, 1):
        return None
    return Autoscaling(min_nodes=low // zones, max_nodes=high // zones)


def node_pool_state(group: Mapping[str, Any], zones: tuple[str, ...], gpus: GpuInfo | None) -> NodePoolState:
    """`node_count` is per zone, rounded up: a removal cut short (one zone's instance terminated, the
    other's not) still reads above the lower count, so the shrink finishes it rather than recording it."""
    count = max(len(zones), 1)
    scaling = group.get("scalingConfig") or {}
    accelerators = None
    if gpus is not None and "NVIDIA" in group.get("amiType", ""):
        accelerators = Accelerators(type=gpus.accelerator_type, count=gpus.count)
    issues = [f"{i.get('code')}: {i.get('message')}" for i in (group.get("health") or {}).get("issues", [])]
    return NodePoolState(
        name=group["nodegroupName"],
        status=_NODEGROUP_STATUS.get(group.get("status", ""), NodePoolStatus.ERROR),
        machine_type=(group.get("instanceTypes") or [""])[0],
        node_count=-(-int(scaling.get("desiredSize", 0)) // count),  # rounded up, as GKE's (see the docstring)
        labels=dict(group.get("labels") or {}),
        spot=group.get("capacityType") == "SPOT",
        accelerators=accelerators,
        zones=zones,
        autoscaling=_autoscaling(scaling, count),
        message="; ".join(issues) or None,
        version=group.get("version"),
    )
