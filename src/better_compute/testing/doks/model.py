"""The emulated account's state and its JSON, in the shapes of DigitalOcean API v2.

Each object keeps the simulated times at which its next transition is due;
`DoksEmulator.settle` applies the transitions that are due, so the state is the
same whether a background wake-up or a request gets there first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from better_compute.testing.doks.catalog import SIZES, SPOT_TAG

if TYPE_CHECKING:
    from better_compute.testing.kube import KubeCluster

__all__ = ["GOING", "Cluster", "Node", "NodePool", "iso"]

GOING = ("draining", "deleting")
"""The states of a node on its way out (DOKS drains a deleted node unless asked to skip it)."""


def iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Node:
    id: str
    name: str
    droplet_id: str
    created_at: datetime
    ready_at: datetime
    state: str = "provisioning"  # provisioning | running | draining | deleting
    gone_at: datetime | None = None
    materialised: bool = False  # a Node object exists in the cluster's Kubernetes API
    updated_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "status": {"state": self.state},
            "droplet_id": self.droplet_id,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at or self.created_at),
        }


@dataclass
class NodePool:
    id: str
    name: str
    size: str
    count: int
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    auto_scale: bool = False
    min_nodes: int = 0
    max_nodes: int = 0
    nodes: list[Node] = field(default_factory=list)
    gone_at: datetime | None = None

    def to_json(self, cluster_id: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "size": self.size,
            "count": self.count,
            "tags": ["k8s", f"k8s:{cluster_id}", "k8s:worker", *self.tags],
            "labels": dict(self.labels) or None,
            "taints": [dict(t) for t in self.taints],
            "auto_scale": self.auto_scale,
            "min_nodes": self.min_nodes if self.auto_scale else 0,
            "max_nodes": self.max_nodes if self.auto_scale else 0,
            "nodes": [n.to_json() for n in self.nodes],
        }
        return body

    @property
    def spot(self) -> bool:
        """DigitalOcean's Spot preview, which the published node pool model has no field for: the `spot` tag."""
        return SPOT_TAG in self.tags


@dataclass
class Cluster:
    id: str
    team: str
    name: str
    region: str
    version: str
    created_at: datetime
    ready_at: datetime | None
    kube: KubeCluster
    isolated_workers: bool = False
    nvidia_gpu_device_plugin: bool = False
    amd_gpu_device_plugin: bool = False
    tags: list[str] = field(default_factory=list)
    vpc_uuid: str = ""
    state: str = "provisioning"  # provisioning | running | upgrading | degraded | error | deleting | deleted
    message: str = ""
    pools: list[NodePool] = field(default_factory=list)
    upgrade_to: str | None = None
    upgrade_at: datetime | None = None
    gone_at: datetime | None = None
    updated_at: datetime | None = None
    auto_upgrade: bool = False
    surge_upgrade: bool = False
    serving: bool = False  # the control plane has answered once: the endpoint is published

    def plugin_default(self, vendor: str, asked: bool | None) -> bool:
        """A GPU device plugin is on unless asked otherwise when the cluster has GPUs of its vendor."""
        if asked is not None:
            return asked
        return any(SIZES[p.size].gpu_vendor == vendor for p in self.pools)

    def pool(self, pool_id: str) -> NodePool | None:
        return next((p for p in self.pools if p.id == pool_id), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "region": self.region,
            "version": self.version,
            "cluster_subnet": "10.244.0.0/16",
            "service_subnet": "10.245.0.0/16",
            "vpc_uuid": self.vpc_uuid,
            "ipv4": "",
            "endpoint": self.kube.endpoint if self.serving else "",
            "tags": ["k8s", f"k8s:{self.id}", *self.tags],
            "node_pools": [p.to_json(self.id) for p in self.pools],
            "maintenance_policy": {"start_time": "00:00", "duration": "4h0m0s", "day": "any"},
            "auto_upgrade": self.auto_upgrade,
            "status": {"state": self.state, "message": self.message},
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at or self.created_at),
            "surge_upgrade": self.surge_upgrade,
            "registry_enabled": False,
            "ha": False,
            "isolated_workers": self.isolated_workers,
            "nvidia_gpu_device_plugin": {"enabled": self.nvidia_gpu_device_plugin},
            "amd_gpu_device_plugin": {"enabled": self.amd_gpu_device_plugin},
        }
