"""A managed instance group's deleteInstances and recreateInstances, as compute.googleapis.com v1 serves them.

`POST .../instanceGroupManagers/{name}/deleteInstances` flags the named VMs for deletion and lowers
the group's `targetSize` by as many; `.../recreateInstances` flags them to be recreated from the
group's template under the same name (the count stays). Both answer a zonal Operation that is DONE
once the flags are set: the VM goes `INSTANCE_DELETE_SECONDS` later, and a recreated one boots and
registers its Node again (the same name, a new Node object) `INSTANCE_BOOT_SECONDS` after that.
Instances are named by full or partial URL (`zones/{zone}/instances/{name}`), at most 1000 a request.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

from better_compute.testing.gke.compute import ComputeApiError
from better_compute.testing.gke.state import COMPUTE_API, ClusterRecord, NodePoolRecord

if TYPE_CHECKING:
    from better_compute.testing.gke.instance_groups import InstanceGroupApi

__all__ = ["INSTANCE_BOOT_SECONDS", "INSTANCE_DELETE_SECONDS", "MAX_INSTANCES", "operation_json", "remove_instances"]

INSTANCE_DELETE_SECONDS = 30.0
INSTANCE_BOOT_SECONDS = 60.0
MAX_INSTANCES = 1000
_INSTANCE = re.compile(
    r"^(?:(?:https://[^/]+/compute/v1/)?projects/(?P<project>[^/]+)/)?zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)$"
)


def _instances(body: dict[str, Any], project: str, zone: str) -> list[str]:
    """The instance names a request body asks for; a malformed URL or one of another zone is refused."""
    asked = body.get("instances") or []
    if not isinstance(asked, list) or not asked:
        raise ComputeApiError(400, "required", "Required field 'instances' not specified")
    if len(asked) > MAX_INSTANCES:
        raise ComputeApiError(400, "invalid", f"At most {MAX_INSTANCES} instances may be given in one request.")
    names = []
    for url in asked:
        match = _INSTANCE.match(str(url))
        if match is None or match["project"] not in (None, project):
            raise ComputeApiError(400, "invalid", f"Invalid value for field 'instances': '{url}'. Malformed URL.")
        if match["zone"] != zone:
            raise ComputeApiError(
                400, "invalid", f"Instance '{url}' is in zone {match['zone']}, not in the group's zone {zone}."
            )
        names.append(match["name"])
    return names


def operation_json(
    emulator: InstanceGroupApi, project: str, zone: str, group_url: str, kind: str, name: str
) -> dict[str, Any]:
    """A zonal compute#operation, DONE: the flags are set (the VMs follow later)."""
    now = emulator.clock.now().isoformat(timespec="milliseconds")
    zone_url = f"{COMPUTE_API}/projects/{project}/zones/{zone}"
    return {
        "kind": "compute#operation",
        "id": str(secrets.randbits(63)),
        "name": name,
        "zone": zone_url,
        "operationType": kind,
        "targetLink": group_url,
        "status": "DONE",
        "user": "better-compute@emulated-project.iam.gserviceaccount.com",
        "progress": 100,
        "insertTime": now,
        "startTime": now,
        "endTime": now,
        "selfLink": f"{zone_url}/operations/{name}",
    }


def remove_instances(
    emulator: InstanceGroupApi,
    record: ClusterRecord,
    pool: NodePoolRecord,
    zone: str,
    body: dict[str, Any],
    *,
    recreate: bool,
) -> None:
    """Flag the named members of the pool's group in `zone`; their VMs go (and come back) on the clock.

    deleteInstances skips instances that are no members or already going when
    `skipInstancesOnValidationError` is true, and refuses the request otherwise; recreateInstances
    refuses a name that is no member, and takes an instance already being recreated as flagged."""
    project = pool.project
    names = _instances(body, project, zone)
    members = pool.nodes.setdefault(zone, [])
    recreating = pool.recreating.setdefault(zone, set())
    skip = bool(body.get("skipInstancesOnValidationError")) and not recreate
    group = f"projects/{project}/zones/{zone}/instanceGroupManagers/{pool.group_name(zone)}"
    chosen = []
    for name in dict.fromkeys(names):
        if name in members and (recreate or name not in recreating):
            chosen.append(name)
        elif not skip:
            raise ComputeApiError(
                400,
                "invalid",
                f"Instance 'projects/{project}/zones/{zone}/instances/{name}' is not a member of "
                f"managed instance group '{group}', or is already being deleted or abandoned.",
            )
    kube = emulator.kube.cluster(record.kube_id)
    for name in chosen:
        if recreate:
            if name in recreating:
                continue
            recreating.add(name)

            async def recreate_vm(name: str = name) -> None:
                await kube.kubelet.remove_node(name)

                async def boot() -> None:
                    recreating.discard(name)
                    if name in pool.nodes.get(zone, []):
                        await emulator.add_vm(record, pool, zone, name)

                emulator.run_later(INSTANCE_BOOT_SECONDS, boot, f"gke:boot:{name}")

            emulator.run_later(INSTANCE_DELETE_SECONDS, recreate_vm, f"gke:recreate:{name}")
        else:
            members.remove(name)
            recreating.discard(name)
            pool.targets[zone] = max(pool.targets.get(zone, 0) - 1, 0)

            async def delete_vm(name: str = name) -> None:
                await kube.kubelet.remove_node(name)

            emulator.run_later(INSTANCE_DELETE_SECONDS, delete_vm, f"gke:delete:{name}")
