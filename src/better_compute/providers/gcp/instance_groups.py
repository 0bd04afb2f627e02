"""The Compute Engine side of a GKE node pool: its zones' managed instance groups.

The container API keeps a pool's current size and its machines out of its own answers: each
zone of the pool has a managed instance group (named in `instanceGroupUrls`) whose
`targetSize` is the zone's node count, and whose members are the pool's VMs. This reads the
sizes and removes named VMs through google-cloud-compute's REST transport, with the SDK's
retries off like every driver call (the engine decides when to try again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from google.api_core import exceptions as gexc

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.providers.gcp import shapes
from better_compute.providers.gcp.compute_client import ComputeClient

if TYPE_CHECKING:
    from google.cloud import compute_v1

__all__ = ["InstanceGroups"]


class InstanceGroups(ComputeClient["compute_v1.InstanceGroupManagersClient"]):
    """One lazily made InstanceGroupManagersClient, shared by the driver's threads."""

    def _new(self, module: Any, **options: Any) -> compute_v1.InstanceGroupManagersClient:
        return cast("compute_v1.InstanceGroupManagersClient", module.InstanceGroupManagersClient(**options))

    def size(self, urls: Iterable[str]) -> int:
        """The groups' `targetSize` summed; a group already gone counts no nodes."""
        total = 0
        for url in urls:
            project, zone, name = shapes.instance_group(url)
            try:
                group = self._api().get(
                    project=project, zone=zone, instance_group_manager=name, retry=None, timeout=self._timeout
                )
            except gexc.NotFound:
                continue
            total += group.target_size
        return total

    def remove(self, urls: Iterable[str], wanted: Mapping[str, list[str]], *, replace: bool, what: str) -> None:
        """recreateInstances (the same VM name, a fresh VM from the group's template, the count stays) or
        deleteInstances (lowers `targetSize` by as many, skipping VMs already gone or going), zone by zone;
        `wanted` maps a zone to its `zones/{zone}/instances/{name}` members."""
        from google.cloud import compute_v1  # loaded by _api() already: see there

        groups = {zone: (project, name) for project, zone, name in map(shapes.instance_group, urls)}
        strays = sorted(set(wanted) - set(groups))
        if strays:
            raise ComputeError(ErrorCode.INVALID_INPUT, f"{what}: the node pool has no machines in zone(s) {strays}")
        for zone, instances in wanted.items():
            project, group = groups[zone]
            if replace:
                op = self._api().recreate_instances_unary(
                    project=project,
                    zone=zone,
                    instance_group_manager=group,
                    instance_group_managers_recreate_instances_request_resource=(
                        compute_v1.InstanceGroupManagersRecreateInstancesRequest(instances=instances)
                    ),
                    retry=None,
                    timeout=self._timeout,
                )
            else:
                op = self._api().delete_instances_unary(
                    project=project,
                    zone=zone,
                    instance_group_manager=group,
                    instance_group_managers_delete_instances_request_resource=(
                        compute_v1.InstanceGroupManagersDeleteInstancesRequest(
                            instances=instances, skip_instances_on_validation_error=True
                        )
                    ),
                    retry=None,
                    timeout=self._timeout,
                )
            if op.error.errors:
                raise ComputeError(ErrorCode.INVALID_STATE, f"{what}: {op.error.errors[0].message}")
