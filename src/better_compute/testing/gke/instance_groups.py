"""The Compute Engine side of the GKE emulator: regions.get with quotas, and each node pool's managed instance
groups (instanceGroupManagers.get, deleteInstances, recreateInstances)."""

from __future__ import annotations

import secrets
from typing import Any

from better_compute.testing.gke.compute import ComputeApiError, instance_group_manager_json
from better_compute.testing.gke.machines import operation_json, remove_instances
from better_compute.testing.gke.nodes import NodeVms
from better_compute.testing.gke.operations import LongRunningOperations
from better_compute.testing.gke.state import ClusterRecord, NodePoolRecord

__all__ = ["InstanceGroupApi"]


class InstanceGroupApi(NodeVms, LongRunningOperations):
    """compute.googleapis.com v1 as far as GKE's node pools need it: regions and managed instance groups."""

    def _group(self, project: str, zone: str, group: str, permission: str) -> tuple[ClusterRecord, NodePoolRecord]:
        """The cluster and node pool whose managed instance group in `zone` is `group`."""
        resource = f"projects/{project}/zones/{zone}/instanceGroupManagers/{group}"
        if self.faults.compute_denied:
            raise ComputeApiError(403, "forbidden", f"Required '{permission}' permission for '{resource}'")
        for record in self.clusters.values():
            for pool in record.node_pools.values():
                if pool.project == project and zone in pool.locations and pool.group_name(zone) == group:
                    return record, pool
        raise ComputeApiError(404, "notFound", f"The resource '{resource}' was not found")

    def region(self, project: str, region: str) -> dict[str, Any]:
        """Compute Engine's regions.get: the region with its quotas (testing/gke/quotas.py)."""
        return self.quotas.region(
            project,
            region,
            self.clusters.values(),
            denied=self.faults.compute_denied,
            disabled=self.faults.compute_disabled,
        )

    def instance_group_manager(self, project: str, zone: str, group: str) -> dict[str, Any]:
        """A node pool's managed instance group in `zone`, as Compute Engine's instanceGroupManagers.get answers."""
        record, pool = self._group(project, zone, group, "compute.instanceGroupManagers.get")
        return instance_group_manager_json(record, pool, zone)

    def remove_instances(
        self, project: str, zone: str, group: str, body: dict[str, Any], *, recreate: bool
    ) -> dict[str, Any]:
        """instanceGroupManagers.deleteInstances or .recreateInstances (testing/gke/machines.py)."""
        record, pool = self._group(project, zone, group, "compute.instanceGroupManagers.update")
        if pool.status == "STOPPING":
            raise ComputeApiError(
                400, "resourceNotReady", f"The resource '{pool.group_url(zone)}' is not ready: it is being deleted."
            )
        remove_instances(self, record, pool, zone, body, recreate=recreate)
        kind = "recreateInstances" if recreate else "deleteInstances"
        name = f"operation-{int(self.clock.now().timestamp() * 1000)}-{secrets.token_hex(8)}"
        return operation_json(self, project, zone, pool.group_url(zone), f"compute.instanceGroupManagers.{kind}", name)
