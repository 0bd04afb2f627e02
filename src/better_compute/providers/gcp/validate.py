"""FleetConfig validation in GKE's vocabulary: every problem of one pool's `policy.substrate`, never raising."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from better_compute.core.errors import Problem
from better_compute.providers.gcp.vocabulary import (
    ATTACHABLE_COUNTS,
    ATTACHABLE_FAMILY,
    ATTACHABLE_GPUS,
    DISK_MAX_GIB,
    DISK_MIN_GIB,
    GPU_MODELS,
    MACHINE_GPUS,
    REGION_ZONES,
    known_machine_type,
    region_of,
)


def validate_account(config: Mapping[str, Any], path: str, region: str | None = None) -> list[Problem]:
    """The account's own keys, under `<path>/config/...` (`path` names the account)."""
    problems = []
    project = config.get("projectId")
    if not isinstance(project, str) or not project:
        problems.append(Problem(f"{path}/config/projectId", "a GKE provider account needs config.projectId"))
    zones = config.get("zones", [])
    if not isinstance(zones, list):
        return [*problems, Problem(f"{path}/config/zones", "config.zones is a list of zone names")]
    for index, zone in enumerate(zones):
        at = f"{path}/config/zones/{index}"
        if not isinstance(zone, str) or zone in REGION_ZONES or region_of(zone) is None:
            problems.append(Problem(at, f"{zone!r} is not a GKE zone"))
        elif region is not None and region_of(zone) != region:
            problems.append(Problem(at, f"the account's zone {zone} is not in the cluster's region {region}"))
    return problems


def _location_problems(substrate: Mapping[str, Any], path: str) -> tuple[str | None, list[Problem]]:
    """The cluster's region (None when unknown) and the problems with its place."""
    cluster = substrate.get("cluster")
    if not isinstance(cluster, Mapping):
        return None, []
    if "adopt" in cluster:
        adopt = cluster["adopt"]
        location, _, name = str(adopt).partition("/")
        if not isinstance(adopt, str) or not name or region_of(location) is None:
            return None, [
                Problem(f"{path}/cluster/adopt", f"a GKE adopt id is <location>/<cluster name>, not {adopt!r}")
            ]
        return region_of(location), []
    create = cluster.get("create")
    if not isinstance(create, Mapping):
        return None, []
    place = create.get("location")
    region = region_of(place) if isinstance(place, str) else None
    if region is None:
        return None, [Problem(f"{path}/cluster/create/location", f"{place!r} is neither a GKE region nor a GKE zone")]
    return region, []


def _gpu_problems(flavor: Mapping[str, Any], at: str) -> list[Problem]:
    machine = flavor.get("machineType")
    if not isinstance(machine, str) or not known_machine_type(machine):
        return [Problem(f"{at}/machineType", f"{machine!r} is not a GKE machine type")]
    gpus = flavor.get("gpus")
    built_in = MACHINE_GPUS.get(machine)
    if gpus is None:
        if built_in is not None:
            return [Problem(f"{at}/gpus", f"{machine} carries {built_in[1]} x {built_in[0]}; say so in gpus")]
        return []
    if not isinstance(gpus, Mapping):
        return [Problem(f"{at}/gpus", "gpus is {type, count}")]
    kind, count = gpus.get("type"), gpus.get("count")
    if kind not in GPU_MODELS:
        return [Problem(f"{at}/gpus/type", f"{kind!r} is not a GKE accelerator type (e.g. nvidia-h100-80gb)")]
    if built_in is not None:
        if (kind, count) != built_in:
            return [Problem(f"{at}/gpus", f"{machine} carries {built_in[1]} x {built_in[0]}, not {count} x {kind}")]
        return []
    if machine.startswith(ATTACHABLE_FAMILY) and kind in ATTACHABLE_GPUS:
        if count not in ATTACHABLE_COUNTS:
            return [Problem(f"{at}/gpus/count", f"{kind} attaches in counts of 1, 2, 4 or 8, not {count!r}")]
        return []
    return [Problem(f"{at}/gpus", f"{machine} takes no {kind}: use a machine type that carries it")]


def _flavor_problems(flavor: Mapping[str, Any], at: str, region: str | None) -> list[Problem]:
    problems = _gpu_problems(flavor, at)
    nodes = flavor.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
        problems.append(Problem(f"{at}/nodes", "nodes is a whole number of nodes per zone, 0 or more"))
    zones = flavor.get("zones", [])
    if not isinstance(zones, list):
        problems.append(Problem(f"{at}/zones", "zones is a list of zone names"))
    else:
        for index, zone in enumerate(zones):
            if not isinstance(zone, str) or zone in REGION_ZONES or region_of(zone) is None:
                problems.append(Problem(f"{at}/zones/{index}", f"{zone!r} is not a GKE zone"))
            elif region is not None and region_of(zone) != region:
                problems.append(
                    Problem(f"{at}/zones/{index}", f"{zone} is not a zone of the cluster's region {region}")
                )
    disk = flavor.get("diskGiB")
    if disk is not None and (
        isinstance(disk, bool) or not isinstance(disk, int) or not DISK_MIN_GIB <= disk <= DISK_MAX_GIB
    ):
        problems.append(Problem(f"{at}/diskGiB", f"a GKE boot disk is {DISK_MIN_GIB} to {DISK_MAX_GIB} GiB"))
    spot = flavor.get("spot")
    if spot is not None and not isinstance(spot, bool):
        problems.append(Problem(f"{at}/spot", "spot is true or false"))
    return problems


def validate_substrate(config: Mapping[str, Any], substrate: Mapping[str, Any], path: str) -> list[Problem]:
    """Account problems come under `<path>/account/config/...` (FleetConfig validation moves them to the account)."""
    region, problems = _location_problems(substrate, path)
    problems = validate_account(config, f"{path}/account", region) + problems
    flavors = substrate.get("flavors")
    if isinstance(flavors, list):
        for index, flavor in enumerate(flavors):
            if isinstance(flavor, Mapping):
                problems += _flavor_problems(flavor, f"{path}/flavors/{index}", region)
    return problems
