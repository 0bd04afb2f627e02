"""What the driver asks of EKS for a node pool, and how it tells a changed shape.

Pure functions of the node pool spec, so the request and the shape rule are read
(and tested) apart from the SDK calls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from better_compute.kubernetes.provider import NodePoolSpec
from better_compute.providers.aws.mapping import scaling_config
from better_compute.providers.aws.vocabulary import TAINT_EFFECTS

__all__ = ["create_nodegroup_request", "request_token", "shape_changes"]


def request_token(*parts: object) -> str:
    """A clientRequestToken that is the same for the same request, so a retry after a
    lost answer is the same request to EKS."""
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()[:32]


def create_nodegroup_request(
    *,
    cluster_id: str,
    spec: NodePoolSpec,
    node_role: str,
    subnets: list[str],
    zones: tuple[str, ...],
    ami: str,
    capacity: str,
) -> dict[str, Any]:
    """CreateNodegroup's arguments: `desiredSize` is `node_count` per zone of `subnets`."""
    request: dict[str, Any] = {
        "clusterName": cluster_id.partition("/")[2],
        "nodegroupName": spec.name,
        "scalingConfig": scaling_config(spec.node_count, spec.autoscaling, len(zones)),
        "subnets": subnets,
        "instanceTypes": [spec.machine_type],
        "amiType": ami,
        "nodeRole": node_role,
        "labels": dict(spec.labels),
        "taints": [
            {"key": t.key, "value": t.value, "effect": TAINT_EFFECTS.get(t.effect, t.effect)} for t in spec.taints
        ],
        "capacityType": capacity,
        "clientRequestToken": request_token("nodegroup", cluster_id, spec.name, spec.machine_type, capacity, zones),
    }
    if spec.disk_gib is not None:
        request["diskSize"] = spec.disk_gib
    return request


def shape_changes(
    group: Mapping[str, Any], spec: NodePoolSpec, ami: str, capacity: str, subnets: list[str]
) -> list[str]:
    """How an existing node group differs in shape from `spec` ("machine type a -> b"); empty when it does not."""
    have: dict[str, object] = {
        "machine type": (group.get("instanceTypes") or [""])[0],
        "capacity type": group.get("capacityType", "ON_DEMAND"),
        "AMI type": group.get("amiType"),
        "subnets": sorted(group.get("subnets") or []),
    }
    want: dict[str, object] = {
        "machine type": spec.machine_type,
        "capacity type": capacity,
        "AMI type": ami,
        "subnets": sorted(subnets),
    }
    if spec.disk_gib is not None:
        have["disk size"] = group.get("diskSize")
        want["disk size"] = spec.disk_gib
    return [f"{k} {have[k]} -> {want[k]}" for k in want if have[k] != want[k]]
