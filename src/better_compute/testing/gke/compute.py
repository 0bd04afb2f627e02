"""The Compute Engine side of a GKE node pool: its managed instance groups, as compute.googleapis.com v1 serves them.

GKE keeps a node pool's current size out of the container API: each of the pool's
zones has a managed instance group, named in the pool's `instanceGroupUrls`, whose
`targetSize` setSize and the autoscaler move. google-cloud-compute's
`InstanceGroupManagersClient.get` reads it at
`GET /compute/v1/projects/{p}/zones/{z}/instanceGroupManagers/{name}`; deleteInstances and
recreateInstances (testing/gke/machines.py) remove or recreate named VMs of it.
Compute Engine's errors carry the v1 envelope `{"error": {code, message, errors: [{domain, reason, message}]}}`.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from better_compute.testing.gke.state import COMPUTE_API, ClusterRecord, NodePoolRecord, rfc3339

__all__ = ["GROUP_MANAGER", "INSTANCES_ACTION", "REGION", "ComputeApiError", "instance_group_manager_json"]

GROUP_MANAGER = re.compile(r"projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instanceGroupManagers/(?P<name>[^/:]+)")
REGION = re.compile(r"projects/(?P<project>[^/]+)/regions/(?P<region>[^/]+)")
INSTANCES_ACTION = re.compile(GROUP_MANAGER.pattern + r"/(?P<action>deleteInstances|recreateInstances)")


class ComputeApiError(Exception):
    """An error as compute.googleapis.com v1 answers it."""

    def __init__(self, http_status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.reason = reason
        self.message = message

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.http_status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
            }
        }


def _id(url: str) -> str:
    """A stable uint64 id (written as a string, as the JSON mapping writes uint64)."""
    return str(int(hashlib.sha256(url.encode()).hexdigest()[:15], 16))


def instance_group_manager_json(cluster: ClusterRecord, pool: NodePoolRecord, zone: str) -> dict[str, Any]:
    """The InstanceGroupManager of `pool` in `zone`: `targetSize` is the zone's target, the actions what is left to do."""
    name = pool.group_name(zone)
    zone_url = f"{COMPUTE_API}/projects/{pool.project}/zones/{zone}"
    template = f"{COMPUTE_API}/projects/{pool.project}/global/instanceTemplates/{name.removesuffix('-grp')}"
    target = pool.targets.get(zone, 0)
    recreating = len(pool.recreating.get(zone, ()))
    running = len(pool.nodes.get(zone, []))
    return {
        "kind": "compute#instanceGroupManager",
        "id": _id(pool.group_url(zone)),
        "creationTimestamp": rfc3339(cluster.created_at),
        "name": name,
        "zone": zone_url,
        "instanceTemplate": template,
        "versions": [{"instanceTemplate": template}],
        "instanceGroup": f"{zone_url}/instanceGroups/{name}",
        "baseInstanceName": name.removesuffix("-grp"),
        "fingerprint": hashlib.sha256(f"{name}:{target}".encode()).hexdigest()[:12],
        "currentActions": {
            "none": min(running, target) - recreating,
            "creating": max(target - running, 0),
            "deleting": max(running - target, 0),
            "abandoning": 0,
            "creatingWithoutRetries": 0,
            "recreating": recreating,
            "refreshing": 0,
            "restarting": 0,
            "resuming": 0,
            "starting": 0,
            "stopping": 0,
            "suspending": 0,
            "verifying": 0,
        },
        "status": {
            "isStable": running == target and not recreating,
            "versionTarget": {"isReached": True},
            "stateful": {},
        },
        "targetSize": target,
        "selfLink": pool.group_url(zone),
        "updatePolicy": {"type": "OPPORTUNISTIC", "minimalAction": "REPLACE", "replacementMethod": "SUBSTITUTE"},
    }
