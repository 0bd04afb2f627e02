"""UpdateCluster (`PUT .../clusters/{c}` with `{"update": ClusterUpdate}`), UpdateNodePool and node-pool autoscaling,
as GKE takes them.

One change per call, as GKE applies them:
  desiredMasterVersion                         -> UPGRADE_MASTER (the same as `:updateMaster`)
  desiredLocations                             -> UPDATE_CLUSTER; node pools on the cluster's zones follow
  desiredNodePoolId + desiredNodeVersion       -> UPGRADE_NODES ("-" is the master's version)
  desiredNodePoolId + desiredImageType         -> UPGRADE_NODES
  desiredNodePoolId + desiredNodePoolAutoscaling -> UPDATE_CLUSTER
Any other `desired*` field is refused with INVALID_ARGUMENT naming it: the emulator does not model it.
UpdateNodePool (`PUT .../nodePools/{np}`) takes `nodeVersion` and `imageType` (UPGRADE_NODES) and refuses the rest.
Autoscaling bounds are per zone (`minNodeCount`, `maxNodeCount`) or in total (`totalMinNodeCount`,
`totalMaxNodeCount`, never both), with `locationPolicy` BALANCED or ANY.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from better_compute.testing.gke.catalog import REGION_ZONES, VALID_MASTER_VERSIONS, region_of, resolve_version
from better_compute.testing.gke.errors import GkeApiError
from better_compute.testing.gke.state import ClusterRecord, NodePoolRecord, OperationRecord

if TYPE_CHECKING:
    from better_compute.testing.gke.emulator import GkeEmulator

__all__ = ["IMAGE_TYPES", "autoscaling_of", "clamp_to_bounds", "update_cluster", "update_node_pool"]

UPDATE_CLUSTER_SECONDS = 300.0
UPGRADE_NODES_SECONDS = 300.0
IMAGE_TYPES = ("COS_CONTAINERD", "UBUNTU_CONTAINERD")
_POOL_FIELDS = ("desiredNodeVersion", "desiredImageType", "desiredNodePoolAutoscaling")
_CLUSTER_FIELDS = ("desiredMasterVersion", "desiredLocations")
_NOT_CHANGES = ("desiredNodePoolId", "etag")
_POOL_REQUEST_IDS = ("name", "projectId", "zone", "clusterId", "nodePoolId", "etag")
_LOCATION_POLICIES: dict[Any, str] = {0: "BALANCED", 1: "BALANCED", 2: "ANY"}
"""The SDK sends enums as numbers (`enum-encoding=int`); 0 is unspecified, which GKE takes as BALANCED."""


def _bound(autoscaling: dict[str, Any], key: str, field: str) -> int | None:
    value = autoscaling.get(key)
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise GkeApiError("INVALID_ARGUMENT", f'Invalid value for field "{field}.{key}": {value!r}.') from None
    if number < 0:
        raise GkeApiError("INVALID_ARGUMENT", f'Invalid value for field "{field}.{key}": {number}. Must be >= 0.')
    return number


def autoscaling_of(body: Any, field: str) -> dict[str, Any] | None:
    """A NodePoolAutoscaling checked as GKE checks it; None when it is off."""
    if body is None:
        return None
    if not isinstance(body, dict):
        raise GkeApiError("INVALID_ARGUMENT", f'Invalid value for field "{field}": must be an object.')
    if not body.get("enabled"):
        return None
    low, high = _bound(body, "minNodeCount", field), _bound(body, "maxNodeCount", field)
    total_low, total_high = _bound(body, "totalMinNodeCount", field), _bound(body, "totalMaxNodeCount", field)
    if (low is not None or high is not None) and (total_low is not None or total_high is not None):
        raise GkeApiError(
            "INVALID_ARGUMENT",
            f"Invalid {field}: set the limits per zone (min_node_count, max_node_count) or in total "
            "(total_min_node_count, total_max_node_count), not both.",
        )
    per_zone = total_low is None and total_high is None
    lower, upper = (low or 0, high or 0) if per_zone else (total_low or 0, total_high or 0)
    names = ("min_node_count", "max_node_count") if per_zone else ("total_min_node_count", "total_max_node_count")
    if upper < 1:
        raise GkeApiError("INVALID_ARGUMENT", f"Invalid {field}: {names[1]} must be greater than 0.")
    if lower > upper:
        raise GkeApiError(
            "INVALID_ARGUMENT",
            f"Invalid {field}: {names[0]} ({lower}) must be less than or equal to {names[1]} ({upper}).",
        )
    policy = _LOCATION_POLICIES.get(body.get("locationPolicy"), body.get("locationPolicy")) or "BALANCED"
    if policy not in ("BALANCED", "ANY"):
        raise GkeApiError("INVALID_ARGUMENT", f'Invalid value for field "{field}.locationPolicy": "{policy}".')
    checked: dict[str, Any] = {"enabled": True, "locationPolicy": policy}
    if per_zone:
        checked.update(minNodeCount=lower, maxNodeCount=upper)
    else:
        checked.update(totalMinNodeCount=lower, totalMaxNodeCount=upper)
    return checked


def clamp_to_bounds(autoscaling: dict[str, Any] | None, wanted: dict[str, int]) -> dict[str, int]:
    """Where the autoscaler may take each zone's target: within the per-zone bounds, or the total's."""
    if autoscaling is None:
        return dict(wanted)
    if "maxNodeCount" in autoscaling:
        low, high = autoscaling["minNodeCount"], autoscaling["maxNodeCount"]
        return {zone: min(max(count, low), high) for zone, count in wanted.items()}
    targets = dict(wanted)
    low, high = autoscaling["totalMinNodeCount"], autoscaling["totalMaxNodeCount"]
    while targets and sum(targets.values()) > high:
        targets[max(targets, key=lambda z: targets[z])] -= 1
    while targets and sum(targets.values()) < low:
        targets[min(targets, key=lambda z: targets[z])] += 1
    return targets


def update_cluster(
    emulator: GkeEmulator, project: str, location: str, name: str, body: dict[str, Any]
) -> OperationRecord:
    record = emulator.cluster(project, location, name)
    update = body.get("update")
    if not isinstance(update, dict):
        raise GkeApiError("INVALID_ARGUMENT", 'Invalid value for field "update": must be set.')
    changes = [key for key, value in update.items() if key not in _NOT_CHANGES and value not in (None, "", [], {})]
    if not changes:
        raise GkeApiError("INVALID_ARGUMENT", "Must specify a field to update.")
    if len(changes) > 1:
        raise GkeApiError(
            "INVALID_ARGUMENT", f"Only one update can be applied at a time; this request sets {', '.join(changes)}."
        )
    change = changes[0]
    if change not in _POOL_FIELDS + _CLUSTER_FIELDS:
        raise GkeApiError("INVALID_ARGUMENT", f'Field "update.{change}" is not supported by the GKE emulator.')
    if change == "desiredMasterVersion":
        return emulator.update_master(project, location, name, {"masterVersion": update[change]})
    if change == "desiredLocations":
        return _relocate(emulator, record, list(update[change]))
    pool_name = update.get("desiredNodePoolId")
    if not pool_name:
        raise GkeApiError("INVALID_ARGUMENT", f'"update.desiredNodePoolId" must be set with "update.{change}".')
    pool = emulator.pool_for_change(project, location, name, str(pool_name))
    target = f"clusters/{name}/nodePools/{pool.name}"
    if change == "desiredNodePoolAutoscaling":
        autoscaling = autoscaling_of(update[change], "update.desiredNodePoolAutoscaling")
        op = emulator.new_operation(project, location, "UPDATE_CLUSTER", target)

        async def rescale() -> None:
            pool.autoscaling = autoscaling
            await emulator.autoscale_pool(record, pool, pool.targets)

        emulator.run_operation(op, UPDATE_CLUSTER_SECONDS, rescale, pool.self_link, record)
        return op
    if change == "desiredNodeVersion":
        return _upgrade_nodes(emulator, record, pool, version=str(update[change]), image="")
    return _upgrade_nodes(emulator, record, pool, version="", image=str(update[change]))


def update_node_pool(
    emulator: GkeEmulator, project: str, location: str, name: str, pool_name: str, body: dict[str, Any]
) -> OperationRecord:
    """UpdateNodePool (`PUT .../nodePools/{np}`): the node version (`-` is the master's) and the image type."""
    record = emulator.cluster(project, location, name)
    unsupported = [
        key
        for key, value in body.items()
        if key not in (*_POOL_REQUEST_IDS, "nodeVersion", "imageType") and value not in (None, "", "0", 0, [], {})
    ]
    if unsupported:
        raise GkeApiError("INVALID_ARGUMENT", f'Field "{unsupported[0]}" is not supported by the GKE emulator.')
    pool = emulator.pool_for_change(project, location, name, pool_name)
    return _upgrade_nodes(
        emulator, record, pool, version=str(body.get("nodeVersion") or ""), image=str(body.get("imageType") or "")
    )


def _upgrade_nodes(
    emulator: GkeEmulator, record: ClusterRecord, pool: NodePoolRecord, *, version: str, image: str
) -> OperationRecord:
    """UPGRADE_NODES: the pool moves to `version` and `image` ("" keeps what it has)."""
    new_version = _node_version(record, version) if version else pool.version
    new_image = image or pool.image_type
    if new_image not in IMAGE_TYPES:
        raise GkeApiError("INVALID_ARGUMENT", f'Image type "{new_image}" is not supported.')
    pool.status = "RECONCILING"
    target = f"clusters/{record.name}/nodePools/{pool.name}"
    op = emulator.new_operation(record.project, record.location, "UPGRADE_NODES", target)

    async def upgrade() -> None:
        # GKE upgrades a pool's nodes one after another; each comes back under the same name
        # (surge off: the instance group recreates the VM in place) running the new kubelet.
        if new_version != pool.version:
            kubelet = emulator.kube.cluster(record.kube_id).kubelet
            for zone in pool.locations:
                for node in pool.nodes.get(zone, []):
                    await kubelet.upgrade_node(node, new_version)
        pool.version, pool.image_type, pool.status = new_version, new_image, "RUNNING"

    emulator.run_operation(op, UPGRADE_NODES_SECONDS, upgrade, pool.self_link, record)
    return op


def _node_version(record: ClusterRecord, wanted: str) -> str:
    """`-` or `latest` is the master's version; a node version is never newer than the master's."""
    version = record.master_version if wanted in ("-", "latest") else resolve_version(wanted)
    if version is None:
        raise GkeApiError("INVALID_ARGUMENT", f'Node version "{wanted}" is unsupported.')
    if VALID_MASTER_VERSIONS.index(version) < VALID_MASTER_VERSIONS.index(record.master_version):
        raise GkeApiError(
            "INVALID_ARGUMENT",
            f'Node version "{version}" must not be newer than the master version "{record.master_version}".',
        )
    return version


def _relocate(emulator: GkeEmulator, record: ClusterRecord, zones: list[str]) -> OperationRecord:
    """The cluster's node zones change; its node pools on the cluster's zones follow, with the same nodes per zone."""
    region = region_of(record.location) or record.location
    for zone in zones:
        if zone not in REGION_ZONES.get(region, ()):
            raise GkeApiError("INVALID_ARGUMENT", f'Location "{zone}" is not a zone of region "{region}".')
    if record.location != region and record.location not in zones:
        raise GkeApiError("INVALID_ARGUMENT", f'Cluster locations must contain the cluster zone "{record.location}".')
    if record.status != "RUNNING":
        emulator.refuse_if_busy(record.path)
        raise GkeApiError(
            "FAILED_PRECONDITION", f"Cluster {record.name} is {record.status}; try again once it is done."
        )
    emulator.refuse_if_busy(record.path)
    old = list(record.locations)
    following = [pool for pool in record.node_pools.values() if sorted(pool.locations) == sorted(old)]
    record.status = "RECONCILING"
    op = emulator.new_operation(record.project, record.location, "UPDATE_CLUSTER", f"clusters/{record.name}")

    async def move() -> None:
        for pool in following:
            await _move_pool(emulator, record, pool, zones)
        record.locations = list(zones)
        record.status = "RUNNING"

    emulator.run_operation(op, UPDATE_CLUSTER_SECONDS, move, record.path, record)
    return op


async def _move_pool(emulator: GkeEmulator, record: ClusterRecord, pool: NodePoolRecord, zones: list[str]) -> None:
    per_zone = max(pool.targets.values(), default=pool.initial_node_count)
    for zone in zones:
        pool.group_hash.setdefault(zone, secrets.token_hex(4))
    pool.targets = {zone: pool.targets.get(zone, per_zone) if zone in zones else 0 for zone in pool.locations}
    await emulator.materialise(record, pool)  # the zones left behind drain first
    pool.locations = list(zones)
    pool.targets = {zone: pool.targets.get(zone, per_zone) for zone in zones}
    pool.nodes = {zone: names for zone, names in pool.nodes.items() if zone in zones}
    await emulator.materialise(record, pool)
