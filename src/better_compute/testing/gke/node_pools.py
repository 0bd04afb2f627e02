"""The GKE emulator's node pools: create (with quota and stockout faults), setSize, setAutoscaling, the cluster
autoscaler, and delete."""

from __future__ import annotations

import re
import secrets
from typing import Any

from better_compute.testing.gke.catalog import ATTACHABLE_GPUS, MACHINE_TYPES, REGION_ZONES, region_of
from better_compute.testing.gke.errors import GkeApiError, error_info
from better_compute.testing.gke.gpu_nodes import DRIVER_VERSIONS
from better_compute.testing.gke.nodes import NodeVms, node_base_name
from better_compute.testing.gke.operations import LongRunningOperations
from better_compute.testing.gke.state import ClusterRecord, NodePoolRecord, OperationRecord
from better_compute.testing.gke.updates import autoscaling_of, clamp_to_bounds

__all__ = ["CREATE_NODE_POOL_SECONDS", "DELETE_NODE_POOL_SECONDS", "NAME", "RESIZE_NODE_POOL_SECONDS", "NodePoolApi"]

CREATE_NODE_POOL_SECONDS = 120.0
RESIZE_NODE_POOL_SECONDS = 60.0
DELETE_NODE_POOL_SECONDS = 60.0
NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")
"""A cluster's or node pool's name, as GKE takes it."""
_EFFECTS = {1: "NO_SCHEDULE", 2: "PREFER_NO_SCHEDULE", 3: "NO_EXECUTE"}


class NodePoolApi(NodeVms, LongRunningOperations):
    """Node pools: their requests checked, then created, resized, autoscaled and deleted as operations."""

    def _pool_record(self, record: ClusterRecord, body: dict[str, Any]) -> NodePoolRecord:
        name = body.get("name", "")
        if not NAME.match(name):
            raise GkeApiError("INVALID_ARGUMENT", f'Invalid value for field "node_pool.name": "{name}".')
        config = body.get("config") or {}
        machine_name = config.get("machineType") or "e2-medium"
        machine = MACHINE_TYPES.get(machine_name)
        if machine is None:
            raise GkeApiError("INVALID_ARGUMENT", f'Invalid machine type "{machine_name}".')
        gpu_type, gpu_count = machine.gpu_type, machine.gpu_count
        driver_version = None
        for accel in config.get("accelerators") or []:
            driver_version = (accel.get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion")
            if isinstance(driver_version, int) and 0 <= driver_version < len(DRIVER_VERSIONS):
                driver_version = DRIVER_VERSIONS[driver_version]  # the REST transport sends enums as numbers
            if driver_version is not None and driver_version not in DRIVER_VERSIONS:
                raise GkeApiError(
                    "INVALID_ARGUMENT",
                    f'Invalid value for field "node_pool.config.accelerators[0].gpu_driver_installation_config'
                    f'.gpu_driver_version": "{driver_version}".',
                )
            asked_type = accel.get("acceleratorType", "")
            asked_count = int(accel.get("acceleratorCount") or 0)
            if gpu_type is not None:
                if asked_type != gpu_type or asked_count not in (0, gpu_count):
                    raise GkeApiError(
                        "INVALID_ARGUMENT",
                        f"Machine type {machine_name} comes with {gpu_count} x {gpu_type}; "
                        f"{asked_count} x {asked_type} was requested.",
                    )
            elif machine_name.startswith("n1-") and asked_type in ATTACHABLE_GPUS and asked_count in (1, 2, 4, 8):
                gpu_type, gpu_count = asked_type, asked_count
            else:
                raise GkeApiError(
                    "INVALID_ARGUMENT", f"Accelerator {asked_type} cannot be attached to machine type {machine_name}."
                )
        region = region_of(record.location) or record.location
        locations = list(body.get("locations") or record.locations)
        for zone in locations:
            if zone not in REGION_ZONES.get(region, ()):
                raise GkeApiError("INVALID_ARGUMENT", f'Location "{zone}" is not a zone of region "{region}".')
        count = int(body.get("initialNodeCount") or 0)
        if count < 0:
            raise GkeApiError("INVALID_ARGUMENT", "node_pool.initial_node_count must be non-negative.")
        taints = []
        for taint in config.get("taints") or []:
            effect = taint.get("effect", "NO_SCHEDULE")
            effect = _EFFECTS.get(effect, "NO_SCHEDULE") if isinstance(effect, int) else effect
            taints.append({"key": taint.get("key", ""), "value": taint.get("value", ""), "effect": effect})
        autoscaling = autoscaling_of(body.get("autoscaling"), "node_pool.autoscaling")
        return NodePoolRecord(
            name=name,
            machine_type=machine_name,
            initial_node_count=count,
            locations=locations,
            version=record.node_version,
            self_link=f"{record.self_link}/nodePools/{name}",
            labels=dict(config.get("labels") or {}),
            taints=taints,
            spot=bool(config.get("spot")),
            disk_size_gb=int(config.get("diskSizeGb") or 100),
            gpu_type=gpu_type,
            gpu_count=gpu_count,
            gpu_driver_version=driver_version,
            autoscaling=autoscaling,
            group_hash={zone: secrets.token_hex(4) for zone in locations},
            targets=clamp_to_bounds(autoscaling, {zone: count for zone in locations}),
            project=record.project,
            base_name=node_base_name(record.name, name),
        )

    def _check_quota(self, project: str, region: str, pools: list[NodePoolRecord]) -> None:
        if not self.faults.quota_exceeded:
            return
        gpu_pools = [p for p in pools if p.gpu_type]
        resource = (gpu_pools[0].gpu_type or "").upper().replace("-", "_") + "_GPUS" if gpu_pools else "CPUS"
        wanted = sum(sum(p.targets.values()) * max(p.gpu_count, 1) for p in pools)
        raise GkeApiError(
            "PERMISSION_DENIED",
            f'Insufficient regional quota to satisfy request: resource "{resource}": request requires '
            f"'{wanted}.0' and is short '{wanted}.0'. project has a quota of '0.0' with '0.0' available. "
            f"View and manage quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project={project}.",
        )

    def create_node_pool(self, project: str, location: str, name: str, body: dict[str, Any]) -> OperationRecord:
        record = self.cluster(project, location, name)
        pool = self._pool_record(record, body.get("nodePool") or {})
        if pool.name in record.node_pools:
            raise GkeApiError("ALREADY_EXISTS", f"Already exists: {record.path}/nodePools/{pool.name}.")
        self.refuse_if_busy(record.path)
        if record.status != "RUNNING":
            raise GkeApiError("FAILED_PRECONDITION", f"Cluster {name} is {record.status}; try again once it is done.")
        self._check_quota(project, region_of(location) or location, [pool])
        record.node_pools[pool.name] = pool
        op = self.new_operation(project, location, "CREATE_NODE_POOL", f"clusters/{name}/nodePools/{pool.name}")

        async def provision() -> None:
            if pool.machine_type in self.faults.stockout:
                zone = pool.locations[0]
                message = (
                    f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
                    f"fulfill the request. '(resource type:compute)'. ZONE_RESOURCE_POOL_EXHAUSTED: "
                    f"a {pool.machine_type} VM instance is currently unavailable in the {zone} zone."
                )
                pool.status = "ERROR"
                pool.status_message = message
                pool.conditions = [{"code": "GCE_STOCKOUT", "message": message, "canonicalCode": "RESOURCE_EXHAUSTED"}]
                raise GkeApiError("RESOURCE_EXHAUSTED", message, details=[error_info("GCE_STOCKOUT")])
            await self.materialise(record, pool)
            pool.status = "RUNNING"

        self.run_operation(op, CREATE_NODE_POOL_SECONDS, provision, pool.self_link, record)
        return op

    def pool_for_change(self, project: str, location: str, name: str, pool_name: str) -> NodePoolRecord:
        record, pool = self.node_pool(project, location, name, pool_name)
        self.refuse_if_busy(record.path)
        self.refuse_if_busy(pool.self_link)
        if pool.status != "RUNNING":
            raise GkeApiError("FAILED_PRECONDITION", f"Node pool {pool_name} is {pool.status}; it cannot change now.")
        return pool

    def set_size(self, project: str, location: str, name: str, pool_name: str, body: dict[str, Any]) -> OperationRecord:
        pool = self.pool_for_change(project, location, name, pool_name)
        record = self.cluster(project, location, name)
        count = int(body.get("nodeCount") or 0)
        if count < 0:
            raise GkeApiError("INVALID_ARGUMENT", "node_count must be non-negative.")
        op = self.new_operation(project, location, "SET_NODE_POOL_SIZE", f"clusters/{name}/nodePools/{pool_name}")

        async def resize() -> None:
            pool.targets = {zone: count for zone in pool.locations}
            await self.materialise(record, pool)

        self.run_operation(op, RESIZE_NODE_POOL_SECONDS, resize, pool.self_link, record)
        return op

    def set_autoscaling(
        self, project: str, location: str, name: str, pool_name: str, body: dict[str, Any]
    ) -> OperationRecord:
        pool = self.pool_for_change(project, location, name, pool_name)
        autoscaling = autoscaling_of(body.get("autoscaling"), "autoscaling")
        op = self.new_operation(project, location, "SET_NODE_POOL_MANAGEMENT", f"clusters/{name}/nodePools/{pool_name}")

        record = self.cluster(project, location, name)

        async def apply() -> None:
            pool.autoscaling = autoscaling
            await self.autoscale_pool(record, pool, pool.targets)

        self.run_operation(op, RESIZE_NODE_POOL_SECONDS, apply, pool.self_link, record)
        return op

    async def autoscale_pool(self, record: ClusterRecord, pool: NodePoolRecord, wanted: dict[str, int]) -> None:
        """The cluster autoscaler: each zone's target moves to what is wanted, within the pool's bounds."""
        wanted = clamp_to_bounds(pool.autoscaling, {zone: wanted.get(zone, 0) for zone in pool.locations})
        pool.targets = wanted
        await self.materialise(record, pool)

    async def autoscale(
        self, location: str, name: str, pool_name: str, nodes_per_zone: int, project: str | None = None
    ) -> dict[str, int]:
        """Demand asks the autoscaler for `nodes_per_zone`; it moves the instance groups' targetSize within the
        pool's bounds (the node pool's `initialNodeCount` stays). Returns the targets per zone."""
        for record in self.clusters.values():
            if record.location == location and record.name == name and project in (None, record.project):
                pool = record.node_pools.get(pool_name)
                if pool is None or pool.autoscaling is None:
                    raise ValueError(f"{pool_name} is not an autoscaled node pool of {location}/{name}")
                await self.autoscale_pool(record, pool, {zone: nodes_per_zone for zone in pool.locations})
                return dict(pool.targets)
        raise KeyError(f"{location}/{name}")

    def delete_node_pool(self, project: str, location: str, name: str, pool_name: str) -> OperationRecord:
        record, pool = self.node_pool(project, location, name, pool_name)
        self.refuse_if_busy(record.path)
        self.refuse_if_busy(pool.self_link)
        if pool.status == "STOPPING":
            raise GkeApiError("FAILED_PRECONDITION", f"Node pool {pool_name} is currently being deleted.")
        pool.status = "STOPPING"
        op = self.new_operation(project, location, "DELETE_NODE_POOL", f"clusters/{name}/nodePools/{pool_name}")

        async def delete() -> None:
            pool.targets = {zone: 0 for zone in pool.locations}
            await self.materialise(record, pool)
            record.node_pools.pop(pool_name, None)

        self.run_operation(op, DELETE_NODE_POOL_SECONDS, delete, pool.self_link + "#delete", record)
        return op
