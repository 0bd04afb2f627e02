"""The emulator's records of clusters, node pools and operations, and their JSON as the v1 API writes it.

JSON follows the proto3 JSON mapping that google-cloud-container's REST transport
parses: camelCase names, int64 as strings (`acceleratorCount`), int32 as numbers,
enums by name, timestamps as RFC 3339 strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from better_compute.testing.gke.catalog import VALID_MASTER_VERSIONS

API = "https://container.googleapis.com/v1"
COMPUTE_API = "https://www.googleapis.com/compute/v1"


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


@dataclass
class NodePoolRecord:
    name: str
    machine_type: str
    initial_node_count: int
    """Nodes per zone at creation. Like GKE, the emulator never changes it after a resize: the pool's
    current size is its instance groups' `targetSize` (`targets`)."""
    locations: list[str]
    version: str
    self_link: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    spot: bool = False
    disk_size_gb: int = 100
    image_type: str = "COS_CONTAINERD"
    gpu_type: str | None = None
    gpu_count: int = 0
    gpu_driver_version: str | None = None
    autoscaling: dict[str, Any] | None = None
    status: str = "PROVISIONING"
    status_message: str = ""
    conditions: list[dict[str, str]] = field(default_factory=list)
    group_hash: dict[str, str] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=dict)
    """The managed instance group's `targetSize` per zone: what setSize and the autoscaler move."""
    nodes: dict[str, list[str]] = field(default_factory=dict)
    """Kubernetes Node names per zone."""
    recreating: dict[str, set[str]] = field(default_factory=dict)
    """Per zone, the VMs recreateInstances has flagged and that have not booted again yet."""
    project: str = ""
    base_name: str = ""
    """`gke-<cluster>-<pool>`: the instance groups are `<base_name>-<hash>-grp`, their VMs `<base_name>-<hash>-<4>`."""

    def group_name(self, zone: str) -> str:
        return f"{self.base_name}-{self.group_hash[zone]}-grp"

    def group_url(self, zone: str) -> str:
        return f"{COMPUTE_API}/projects/{self.project}/zones/{zone}/instanceGroupManagers/{self.group_name(zone)}"

    def to_json(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "machineType": self.machine_type,
            "diskSizeGb": self.disk_size_gb,
            "labels": dict(self.labels),
            "imageType": self.image_type,
        }
        if self.taints:
            config["taints"] = [dict(t) for t in self.taints]
        if self.spot:
            config["spot"] = True
        if self.gpu_type:
            accelerator: dict[str, Any] = {"acceleratorCount": str(self.gpu_count), "acceleratorType": self.gpu_type}
            if self.gpu_driver_version is not None:
                accelerator["gpuDriverInstallationConfig"] = {"gpuDriverVersion": self.gpu_driver_version}
            config["accelerators"] = [accelerator]
        body: dict[str, Any] = {
            "name": self.name,
            "config": config,
            "initialNodeCount": self.initial_node_count,
            "locations": list(self.locations),
            "instanceGroupUrls": [self.group_url(zone) for zone in self.locations],
            "selfLink": self.self_link,
            "version": self.version,
            "status": self.status,
            "podIpv4CidrSize": 24,
        }
        if self.status_message:
            body["statusMessage"] = self.status_message
        if self.conditions:
            body["conditions"] = [dict(c) for c in self.conditions]
        if self.autoscaling:
            body["autoscaling"] = dict(self.autoscaling)
        return body


@dataclass
class ClusterRecord:
    project: str
    location: str
    name: str
    id: str
    self_link: str
    locations: list[str]
    master_version: str
    node_version: str
    created_at: datetime
    kube_id: str
    endpoint: str = ""
    ca_data: str = ""
    private_nodes: bool = False
    resource_labels: dict[str, str] = field(default_factory=dict)
    beta_apis: list[str] = field(default_factory=list)
    """`enableK8sBetaApis.enabledApis`: the beta APIs (`group/version/resource`) the API server serves."""
    status: str = "PROVISIONING"
    status_message: str = ""
    node_pools: dict[str, NodePoolRecord] = field(default_factory=dict)

    def current_node_version(self) -> str:
        """The oldest version any node pool runs (the cluster's when it has none), as GKE reports it."""
        versions = [pool.version for pool in self.node_pools.values()] or [self.node_version]
        return max(versions, key=VALID_MASTER_VERSIONS.index)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.name}"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "nodePools": [pool.to_json() for pool in self.node_pools.values()],
            "locations": list(self.locations),
            "resourceLabels": dict(self.resource_labels),
            "privateClusterConfig": {"enablePrivateNodes": self.private_nodes},
            "selfLink": self.self_link,
            "zone": self.location,
            "location": self.location,
            "initialClusterVersion": self.master_version,
            "currentMasterVersion": self.master_version,
            "currentNodeVersion": self.current_node_version(),
            "createTime": rfc3339(self.created_at),
            "status": self.status,
            "currentNodeCount": sum(len(names) for p in self.node_pools.values() for names in p.nodes.values()),
            "id": self.id,
            "network": "default",
            "subnetwork": "default",
        }
        if self.beta_apis:
            body["enableK8sBetaApis"] = {"enabledApis": list(self.beta_apis)}
        if self.endpoint:
            body["endpoint"] = self.endpoint
            body["masterAuth"] = {"clusterCaCertificate": self.ca_data}
        if self.status_message:
            body["statusMessage"] = self.status_message
        return body


@dataclass
class OperationRecord:
    name: str
    project: str
    location: str
    operation_type: str
    target_link: str
    self_link: str
    started_at: datetime
    status: str = "PENDING"
    ended_at: datetime | None = None
    error: dict[str, Any] | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "zone": self.location,
            "location": self.location,
            "operationType": self.operation_type,
            "status": self.status,
            "selfLink": self.self_link,
            "targetLink": self.target_link,
            "startTime": rfc3339(self.started_at),
        }
        if self.ended_at is not None:
            body["endTime"] = rfc3339(self.ended_at)
        if self.detail:
            body["detail"] = self.detail
        if self.error is not None:
            body["error"] = self.error
            body["statusMessage"] = self.error["message"]
        return body
