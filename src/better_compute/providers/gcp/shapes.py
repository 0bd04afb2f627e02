"""Between better-compute's cluster and node pool shapes and container_v1's messages."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from google.cloud import container_v1

from better_compute.kubernetes.provider import (
    DEPLOYMENT_LABEL,
    SUBSTRATE_POOL_LABEL,
    Accelerators,
    Autoscaling,
    ClusterOutputs,
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    NodePoolSpec,
    NodePoolState,
    NodePoolStatus,
)

SYSTEM_POOL = "bc-system"
"""The small node pool a created cluster starts with: GKE needs one, and kube-system runs there."""
SYSTEM_MACHINE_TYPE = "e2-standard-4"

_CLUSTER_STATUS = {
    "PROVISIONING": ClusterStatus.PROVISIONING,
    "RUNNING": ClusterStatus.READY,
    "DEGRADED": ClusterStatus.READY,
    "RECONCILING": ClusterStatus.UPDATING,
    "STOPPING": ClusterStatus.DELETING,
    "ERROR": ClusterStatus.ERROR,
}
_POOL_STATUS = {
    "PROVISIONING": NodePoolStatus.PROVISIONING,
    "RUNNING": NodePoolStatus.READY,
    "RUNNING_WITH_ERROR": NodePoolStatus.READY,
    "RECONCILING": NodePoolStatus.UPDATING,
    "STOPPING": NodePoolStatus.DELETING,
    "ERROR": NodePoolStatus.ERROR,
}
_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
_LABEL_CHARS = re.compile(r"[^a-z0-9_-]")
_GROUP_URL = re.compile(r"projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instanceGroupManagers/(?P<name>[^/?]+)$")
_PROVIDER_ID = re.compile(r"gce://(?P<project>[^/]+)/(?P<zone>[^/]+)/(?P<name>[^/]+)")


def cluster_id(location: str, name: str) -> str:
    return f"{location}/{name}"


def split_cluster_id(value: str) -> tuple[str, str]:
    location, _, name = value.partition("/")
    return location, name


def resource_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """GCP resource labels allow lower-case letters, digits, '_' and '-' (at most 63 characters)."""
    return {_LABEL_CHARS.sub("-", k.lower())[:63]: _LABEL_CHARS.sub("-", v.lower())[:63] for k, v in labels.items()}


def _mark_key(label: str) -> str:
    (key,) = resource_labels({label: ""})
    return key


MARK_KEY = _mark_key(SUBSTRATE_POOL_LABEL)
"""The resource label better-compute's mark becomes on a GKE cluster (`better-compute-dev-substrate-pool`)."""
DEPLOYMENT_KEY = _mark_key(DEPLOYMENT_LABEL)
"""The resource label the deployment mark becomes on a GKE cluster (`better-compute-dev-deployment`)."""


def cluster_message(spec: ClusterSpec, zones: tuple[str, ...]) -> container_v1.Cluster:
    body: dict[str, Any] = {
        "name": spec.name,
        "resource_labels": resource_labels(spec.labels),
        "locations": list(zones),
        "node_pools": [{"name": SYSTEM_POOL, "initial_node_count": 1, "config": {"machine_type": SYSTEM_MACHINE_TYPE}}],
        "ip_allocation_policy": {"use_ip_aliases": True},
    }
    if spec.version:
        body["initial_cluster_version"] = spec.version
    if spec.private_nodes:
        body["private_cluster_config"] = {"enable_private_nodes": True, "master_ipv4_cidr_block": "172.16.0.0/28"}
    return container_v1.Cluster(body)


NO_DEFAULT_PLUGIN_LABEL = "gke-no-default-nvidia-gpu-device-plugin"
"""The node label that keeps GKE's own NVIDIA device plugin off a node pool."""


def node_pool_message(spec: NodePoolSpec) -> container_v1.NodePool:
    config: dict[str, Any] = {
        "machine_type": spec.machine_type,
        "labels": dict(spec.labels),
        "spot": spec.spot,
        "taints": [{"key": t.key, "value": t.value, "effect": _EFFECTS.get(t.effect, t.effect)} for t in spec.taints],
    }
    if spec.disk_gib is not None:
        config["disk_size_gb"] = spec.disk_gib
    if spec.accelerators is not None:
        # bcd is the only way to these GPUs: GKE's own plugin stays off the pool, and with it GKE's
        # managed driver install (its plugin's pods run it), so the substrate installs the driver
        # (substrates/gpu_driver.py) and the pool says so. docs/providers.md (GKE) has the sources.
        config["labels"][NO_DEFAULT_PLUGIN_LABEL] = "true"
        config["accelerators"] = [
            {
                "accelerator_type": spec.accelerators.type,
                "accelerator_count": spec.accelerators.count,
                "gpu_driver_installation_config": {"gpu_driver_version": "INSTALLATION_DISABLED"},
            }
        ]
    body: dict[str, Any] = {"name": spec.name, "initial_node_count": spec.node_count, "config": config}
    if spec.zones:
        body["locations"] = list(spec.zones)
    if spec.autoscaling is not None:
        body["autoscaling"] = autoscaling_message(spec.autoscaling)
    return container_v1.NodePool(body)


def autoscaling_message(autoscaling: Autoscaling | None) -> container_v1.NodePoolAutoscaling:
    if autoscaling is None:
        return container_v1.NodePoolAutoscaling(enabled=False)
    return container_v1.NodePoolAutoscaling(
        enabled=True, min_node_count=autoscaling.min_nodes, max_node_count=autoscaling.max_nodes
    )


def cluster_state(cluster: container_v1.Cluster) -> ClusterState:
    status = _CLUSTER_STATUS.get(cluster.status.name, ClusterStatus.PROVISIONING)
    outputs = None
    if cluster.endpoint and status in (ClusterStatus.READY, ClusterStatus.UPDATING):
        outputs = ClusterOutputs(
            endpoint=f"https://{cluster.endpoint}",
            version=cluster.current_master_version,
            location=cluster.location,
            node_version=cluster.current_node_version,
            global_id=cluster.self_link,
            ca_data=cluster.master_auth.cluster_ca_certificate or None,
        )
    return ClusterState(
        cluster_id=cluster_id(cluster.location, cluster.name),
        name=cluster.name,
        status=status,
        outputs=outputs,
        private_nodes=bool(cluster.private_cluster_config.enable_private_nodes),
        message=cluster.status_message or None,
        node_pools=tuple(pool.name for pool in cluster.node_pools),
        substrate_pool=cluster.resource_labels.get(MARK_KEY) or None,
        deployment=cluster.resource_labels.get(DEPLOYMENT_KEY) or None,
    )


def instance_group(url: str) -> tuple[str, str, str]:
    """(project, zone, name) of an instance group manager URL in a node pool's `instanceGroupUrls`."""
    match = _GROUP_URL.search(url)
    if match is None:
        raise ValueError(f"not an instance group manager URL: {url!r}")
    return match["project"], match["zone"], match["name"]


def gce_instance(provider_id: str) -> tuple[str, str, str]:
    """(project, zone, instance) of a GKE Node's `spec.providerID`, `gce://<project>/<zone>/<instance>`."""
    match = _PROVIDER_ID.fullmatch(provider_id)
    if match is None:
        raise ValueError(f"not a GKE Node's providerID (gce://<project>/<zone>/<instance>): {provider_id!r}")
    return match["project"], match["zone"], match["name"]


def node_pool_state(pool: container_v1.NodePool, nodes_per_zone: int) -> NodePoolState:
    """`nodes_per_zone` is the pool's current size, which the container API does not hold (see driver.py)."""
    config = pool.config
    accelerators = None
    if config.accelerators:
        first = config.accelerators[0]
        accelerators = Accelerators(type=first.accelerator_type, count=int(first.accelerator_count))
    autoscaling = None
    if pool.autoscaling.enabled:
        autoscaling = Autoscaling(pool.autoscaling.min_node_count, pool.autoscaling.max_node_count)
    message = pool.status_message or "; ".join(c.message for c in pool.conditions) or None
    return NodePoolState(
        name=pool.name,
        status=_POOL_STATUS.get(pool.status.name, NodePoolStatus.PROVISIONING),
        machine_type=config.machine_type,
        node_count=nodes_per_zone,
        labels=dict(config.labels),
        spot=bool(config.spot or config.preemptible),
        accelerators=accelerators,
        zones=tuple(pool.locations),
        autoscaling=autoscaling,
        message=message,
        version=pool.version or None,
    )


def shape_changes(pool: container_v1.NodePool, spec: NodePoolSpec) -> list[str]:
    """How `spec` differs in shape from an existing pool; node pools never change shape in place."""
    state = node_pool_state(pool, pool.initial_node_count)
    changes = []
    if state.machine_type != spec.machine_type:
        changes.append(f"machine type {state.machine_type} -> {spec.machine_type}")
    if spec.accelerators is not None and state.accelerators != spec.accelerators:
        changes.append(f"accelerators {state.accelerators} -> {spec.accelerators}")
    if state.spot != spec.spot:
        changes.append(f"spot {state.spot} -> {spec.spot}")
    if spec.zones and set(spec.zones) != set(state.zones):
        changes.append(f"zones {sorted(state.zones)} -> {sorted(spec.zones)}")
    if spec.disk_gib is not None and pool.config.disk_size_gb != spec.disk_gib:
        changes.append(f"disk {pool.config.disk_size_gb} GiB -> {spec.disk_gib} GiB")
    return changes
