"""DigitalOcean's JSON to the Protocol's states, and node pool specs to request bodies."""

from __future__ import annotations

import re
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
    NodePoolSpec,
    NodePoolState,
    NodePoolStatus,
)
from better_compute.providers.digitalocean.vocabulary import SPOT_TAG, gpu_info

__all__ = ["cluster_state", "cluster_tags", "node_pool_body", "node_pool_state", "plugins_on", "sizing_body"]

_TAG = re.compile(r"[^A-Za-z0-9:_-]")
"""What a DigitalOcean tag may not hold: a label becomes the tag `key:value` with these made '-'."""
_MARK_PREFIX = _TAG.sub("-", f"{SUBSTRATE_POOL_LABEL}:")
_DEPLOYMENT_PREFIX = _TAG.sub("-", f"{DEPLOYMENT_LABEL}:")

_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}
"""DOKS takes taint effects in Kubernetes casing; other providers' casing is translated."""

_CLUSTER_STATUS = {
    "provisioning": ClusterStatus.PROVISIONING,
    "running": ClusterStatus.READY,
    "degraded": ClusterStatus.READY,
    "upgrading": ClusterStatus.UPDATING,
    "error": ClusterStatus.ERROR,
    "deleting": ClusterStatus.DELETING,
    "deleted": ClusterStatus.DELETED,
}


def cluster_tags(labels: Mapping[str, str]) -> list[str]:
    """A cluster's tags: `better-compute`, and each label as `key:value` (DigitalOcean tags hold no '/' or '.')."""
    return ["better-compute", *(_TAG.sub("-", f"{k}:{v}") for k, v in sorted(labels.items()))]


def _mark(tags: Any, prefix: str = _MARK_PREFIX) -> str | None:
    marks = [t.removeprefix(prefix) for t in tags or () if isinstance(t, str) and t.startswith(prefix)]
    return marks[0] if marks and marks[0] else None


def cluster_state(cluster: Mapping[str, Any]) -> ClusterState:
    """A cluster as the Protocol reports it; outputs once DigitalOcean publishes an endpoint.

    DOKS upgrades a cluster's nodes with its control plane, so `nodeVersion` is the cluster's version;
    `globalId` is the cluster's UUID, which every account and token reads the same.
    """
    status = cluster.get("status") or {}
    state = _CLUSTER_STATUS.get(str(status.get("state")), ClusterStatus.PROVISIONING)
    endpoint = cluster.get("endpoint") or ""
    outputs = None
    if endpoint and state in (ClusterStatus.READY, ClusterStatus.UPDATING):
        outputs = ClusterOutputs(
            endpoint=endpoint,
            version=str(cluster["version"]),
            location=str(cluster["region"]),
            node_version=str(cluster["version"]),
            global_id=str(cluster["id"]),
        )
    return ClusterState(
        cluster_id=str(cluster["id"]),
        name=str(cluster["name"]),
        status=state,
        outputs=outputs,
        private_nodes=bool(cluster.get("isolated_workers", False)),
        message=status.get("message") or None,
        node_pools=tuple(str(p["name"]) for p in cluster.get("node_pools") or ()),
        substrate_pool=_mark(cluster.get("tags")),
        deployment=_mark(cluster.get("tags"), _DEPLOYMENT_PREFIX),
    )


def plugins_on(cluster: Mapping[str, Any]) -> list[str]:
    """DigitalOcean's own GPU device plugins that are on for this cluster."""
    return [
        key
        for key in ("nvidia_gpu_device_plugin", "amd_gpu_device_plugin")
        if bool((cluster.get(key) or {}).get("enabled", False))
    ]


def node_pool_state(pool: Mapping[str, Any], *, version: str | None = None) -> NodePoolState:
    """READY once exactly `count` nodes run; DELETING while every node is going. A DOKS node pool has
    no version of its own: `version` is its cluster's, which its nodes follow."""
    nodes = pool.get("nodes") or []
    states = [str((n.get("status") or {}).get("state")) for n in nodes]
    count = int(pool.get("count") or 0)
    if nodes and all(s == "deleting" for s in states) and count > 0:
        status = NodePoolStatus.DELETING
    elif states.count("running") == count and len(states) == count:
        status = NodePoolStatus.READY
    elif "running" not in states:
        status = NodePoolStatus.PROVISIONING
    else:
        status = NodePoolStatus.UPDATING
    size = str(pool["size"])
    gpus = gpu_info(size)
    autoscaling = None
    if pool.get("auto_scale"):
        autoscaling = Autoscaling(int(pool.get("min_nodes") or 0), int(pool.get("max_nodes") or 0))
    return NodePoolState(
        name=str(pool["name"]),
        status=status,
        machine_type=size,
        node_count=count,
        labels=dict(pool.get("labels") or {}),
        spot=SPOT_TAG in (pool.get("tags") or ()),
        accelerators=Accelerators(gpus.accelerator_type, gpus.count) if gpus else None,
        autoscaling=autoscaling,
        version=version,
    )


def sizing_body(node_count: int, autoscaling: Autoscaling | None) -> dict[str, Any]:
    if autoscaling is None:
        return {"count": node_count, "auto_scale": False}
    return {
        "count": node_count,
        "auto_scale": True,
        "min_nodes": autoscaling.min_nodes,
        "max_nodes": autoscaling.max_nodes,
    }


def node_pool_body(spec: NodePoolSpec) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": spec.name,
        "size": spec.machine_type,
        "labels": dict(spec.labels),
        "taints": [{"key": t.key, "value": t.value, "effect": _EFFECTS.get(t.effect, t.effect)} for t in spec.taints],
        "tags": ["better-compute", SPOT_TAG] if spec.spot else ["better-compute"],
        **sizing_body(spec.node_count, spec.autoscaling),
    }
    return body
