"""The emulated EKS objects and how each is written on the wire (rest-json, camelCase).

Timestamps go out as epoch seconds, as EKS writes them; botocore turns them into
datetimes. Only the fields a driver reads, and the ones that make a response look
like EKS's, are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from better_compute.testing.eks.errors import AwsError

if TYPE_CHECKING:
    from better_compute.testing.kube import KubeCluster

__all__ = ["AccessEntry", "Cluster", "Nodegroup", "Update"]


def _ts(when: datetime) -> float:
    return when.timestamp()


@dataclass
class Update:
    id: str
    type: str
    params: list[tuple[str, str]]
    created_at: datetime
    status: str = "InProgress"
    errors: list[dict[str, Any]] = field(default_factory=list)
    client_request_token: str | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "type": self.type,
            "params": [{"type": k, "value": v} for k, v in self.params],
            "createdAt": _ts(self.created_at),
            "errors": self.errors,
        }


@dataclass
class AccessEntry:
    cluster: str
    principal_arn: str
    arn: str
    created_at: datetime
    kubernetes_groups: list[str] = field(default_factory=list)
    username: str = ""
    type: str = "STANDARD"
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy ARN -> {"accessScope", "associatedAt"}

    def wire(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster,
            "principalArn": self.principal_arn,
            "kubernetesGroups": self.kubernetes_groups,
            "accessEntryArn": self.arn,
            "createdAt": _ts(self.created_at),
            "modifiedAt": _ts(self.created_at),
            "tags": {},
            "username": self.username or self.principal_arn,
            "type": self.type,
        }


@dataclass(frozen=True)
class LaunchTemplate:
    """An EC2 launch template (version 1 only): a node group made with it boots with its user data."""

    id: str
    name: str
    user_data: str  # base64, as EC2 keeps it


@dataclass
class Nodegroup:
    name: str
    cluster: str
    arn: str
    instance_type: str
    capacity_type: str
    ami_type: str
    subnets: list[str]
    zones: list[str]  # the distinct Availability Zones of `subnets`, in order
    node_role: str
    version: str
    created_at: datetime
    min_size: int
    max_size: int
    desired_size: int
    disk_size: int = 20
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    status: str = "CREATING"
    modified_at: datetime | None = None
    client_request_token: str | None = None
    issues: list[dict[str, Any]] = field(default_factory=list)
    launch_template: dict[str, str] | None = None  # {"id", "name", "version"}, as CreateNodegroup named it
    user_data: str = ""  # the launch template's, decoded: Bottlerocket reads its settings (TOML) from it
    nodes: dict[str, str] = field(default_factory=dict)  # Node name -> zone
    instances: dict[str, str] = field(default_factory=dict)  # EC2 instance id -> Node name, of `nodes`
    terminating: dict[str, tuple[str, str]] = field(default_factory=dict)  # instance id -> (Node name, zone)
    updates: dict[str, Update] = field(default_factory=dict)

    @property
    def auto_scaling_group(self) -> str:
        """The name of the Auto Scaling group EKS made for the node group (`resources.autoScalingGroups`)."""
        return f"eks-{self.name}-{self.arn[-8:]}"

    def wire(self) -> dict[str, Any]:
        return {
            "nodegroupName": self.name,
            "nodegroupArn": self.arn,
            "clusterName": self.cluster,
            "version": self.version,
            "releaseVersion": f"{self.version}.0-20260101",
            "createdAt": _ts(self.created_at),
            "modifiedAt": _ts(self.modified_at or self.created_at),
            "status": self.status,
            "capacityType": self.capacity_type,
            "scalingConfig": {"minSize": self.min_size, "maxSize": self.max_size, "desiredSize": self.desired_size},
            "instanceTypes": [self.instance_type],
            "subnets": self.subnets,
            "amiType": self.ami_type,
            "nodeRole": self.node_role,
            "labels": self.labels,
            "taints": self.taints,
            "resources": {"autoScalingGroups": [{"name": self.auto_scaling_group}]},
            "diskSize": self.disk_size,
            "health": {"issues": self.issues},
            "updateConfig": {"maxUnavailable": 1},
            "tags": {},
            **({"launchTemplate": dict(self.launch_template)} if self.launch_template else {}),
        }


@dataclass
class Cluster:
    name: str
    region: str
    account_id: str
    arn: str
    uid: str
    version: str
    role_arn: str
    subnet_ids: list[str]
    endpoint_private: bool
    endpoint_public: bool
    authentication_mode: str
    creator_arn: str
    bootstrap_admin: bool
    created_at: datetime
    status: str = "CREATING"
    platform_version: str = "eks.1"
    client_request_token: str | None = None
    kube_id: str = ""
    kube: KubeCluster | None = None
    tags: dict[str, str] = field(default_factory=dict)
    nodegroups: dict[str, Nodegroup] = field(default_factory=dict)
    access_entries: dict[str, AccessEntry] = field(default_factory=dict)
    updates: dict[str, Update] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "arn": self.arn,
            "createdAt": _ts(self.created_at),
            "version": self.version,
            "roleArn": self.role_arn,
            "resourcesVpcConfig": {
                "subnetIds": self.subnet_ids,
                "securityGroupIds": [],
                "clusterSecurityGroupId": f"sg-{self.uid[:17]}",
                "vpcId": "vpc-00000000000000001",
                "endpointPublicAccess": self.endpoint_public,
                "endpointPrivateAccess": self.endpoint_private,
                "publicAccessCidrs": ["0.0.0.0/0"],
            },
            "kubernetesNetworkConfig": {"serviceIpv4Cidr": "172.20.0.0/16", "ipFamily": "ipv4"},
            "status": self.status,
            "platformVersion": self.platform_version,
            "tags": self.tags,
            "id": self.uid,
            "health": {"issues": []},
            "accessConfig": {
                "bootstrapClusterCreatorAdminPermissions": self.bootstrap_admin,
                "authenticationMode": self.authentication_mode,
            },
        }
        if self.client_request_token:
            body["clientRequestToken"] = self.client_request_token
        if self.kube is not None and self.status in ("ACTIVE", "UPDATING", "DELETING"):
            body["endpoint"] = self.kube.endpoint
            body["certificateAuthority"] = {"data": self.kube.ca_data}
        return body


_TAG_CHARS = re.compile(r"[\w\s+=.:/@-]*")


def checked_tags(tags: Any) -> dict[str, str]:
    """A resource's tags as EKS takes them, or its InvalidParameterException: at most 50; a key 1-128
    characters, not `aws:`; a value at most 256; both letters, digits, spaces and `+ - = . _ : / @`
    (docs/providers.md cites the page). better-compute's marks are tags whose keys keep their `/` and `.`."""
    if tags is None:
        return {}
    if not isinstance(tags, dict) or len(tags) > 50:
        raise AwsError("InvalidParameterException", "tags: at most 50 tags", 400)
    for key, value in tags.items():
        if not (isinstance(key, str) and 1 <= len(key) <= 128 and _TAG_CHARS.fullmatch(key)) or key.startswith("aws:"):
            raise AwsError("InvalidParameterException", f"tags: invalid tag key {key!r}", 400)
        if not (isinstance(value, str) and len(value) <= 256 and _TAG_CHARS.fullmatch(value)):
            raise AwsError("InvalidParameterException", f"tags: invalid value of tag {key!r}", 400)
    return dict(tags)
