"""`validate_substrate` for EKS: the account's keys and a pool's substrate in EKS's terms.

Every problem is collected, each with a JSON pointer under the substrate's path.
The GPUs of each machine type are read from EC2 (cached per instance type by the
driver); an unknown instance type is a problem, an unreachable EC2 is an error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.kubernetes.provider import GpuInfo
from better_compute.providers.aws.vocabulary import ACCOUNT_KEYS, REGION_PATTERN, ZONE_PATTERN

__all__ = ["account_problems", "substrate_problems"]

GpuLookup = Callable[[str], Awaitable[GpuInfo | None]]


def account_problems(config: Mapping[str, Any], path: str) -> list[Problem]:
    """The provider account's own keys (region, zones, roles, subnets), under `<path>/config/...`
    (`path` names the account; FleetConfig moves them to `/providerAccounts/<i>/config/...`)."""
    problems = [
        Problem(f"{path}/config/{key}", f"the EKS provider account needs {key}")
        for key in ACCOUNT_KEYS
        if not config.get(key)
    ]
    region = config.get("region")
    if isinstance(region, str) and region and not REGION_PATTERN.match(region):
        problems.append(
            Problem(f"{path}/config/region", f"region {region[:32]!r} is not an AWS region (like us-east-1)")
        )
    zones = config.get("zones")
    for index, zone in enumerate(zones if isinstance(zones, list) else []):
        if not isinstance(zone, str) or not isinstance(region, str) or not _zone_in(zone, region):
            problems.append(
                Problem(
                    f"{path}/config/zones/{index}", f"zone {str(zone)[:32]!r} is not an Availability Zone of {region}"
                )
            )
    return problems


def _zone_in(zone: str, region: str) -> bool:
    match = ZONE_PATTERN.match(zone)
    return match is not None and match[1] == region


def _location_problem(location: str, region: str, where: str) -> Problem | None:
    zone = ZONE_PATTERN.match(location)
    if zone is not None:
        return Problem(
            where, f"EKS clusters are regional: give the region {zone[1]}, not the Availability Zone {location}"
        )
    if not REGION_PATTERN.match(location):
        return Problem(where, f"{location!r} is not an AWS region (like us-east-1)")
    if region and location != region:
        return Problem(where, f"the account's subnets are in {region}; the cluster must be in {region}, not {location}")
    return None


async def substrate_problems(
    config: Mapping[str, Any], substrate: Mapping[str, Any], path: str, gpus_of: GpuLookup
) -> list[Problem]:
    region = str(config.get("region") or "")
    problems = account_problems(config, f"{path}/account")
    cluster = substrate.get("cluster") or {}
    create = cluster.get("create")
    if isinstance(create, Mapping):
        problem = _location_problem(str(create.get("location", "")), region, f"{path}/cluster/create/location")
        if problem is not None:
            problems.append(problem)
    adopt = cluster.get("adopt")
    if isinstance(adopt, str):
        where, _, name = adopt.partition("/")
        if not name or "/" in name:
            problems.append(
                Problem(f"{path}/cluster/adopt", f"an EKS adopt id is <region>/<cluster name>, not {adopt!r}")
            )
        else:
            problem = _location_problem(where, region, f"{path}/cluster/adopt")
            if problem is not None:
                problems.append(problem)
    zones = config.get("zones")
    account_zones = [str(z) for z in zones] if isinstance(zones, list) else []
    for i, flavor in enumerate(substrate.get("flavors") or []):
        problems += await _flavor_problems(flavor, f"{path}/flavors/{i}", account_zones, gpus_of)
    return problems


async def _flavor_problems(
    flavor: Mapping[str, Any], at: str, account_zones: list[str], gpus_of: GpuLookup
) -> list[Problem]:
    problems = []
    nodes = flavor.get("nodes")
    if not isinstance(nodes, int) or nodes < 0:
        problems.append(Problem(f"{at}/nodes", f"nodes must be a whole number of at least 0, not {nodes!r}"))
    for j, zone in enumerate(flavor.get("zones") or []):
        if zone not in account_zones:
            problems.append(
                Problem(f"{at}/zones/{j}", f"zone {zone!r} is not one of the account's zones {account_zones}")
            )
    if "diskType" in flavor:
        problems.append(Problem(f"{at}/diskType", "EKS node groups take a disk size only, no disk type"))
    disk = flavor.get("diskGiB")
    if disk is not None and (not isinstance(disk, int) or not 1 <= disk <= 16_384):
        problems.append(Problem(f"{at}/diskGiB", f"an EKS node disk is 1 to 16384 GiB, not {disk!r}"))
    machine = str(flavor.get("machineType") or "")
    try:
        gpus = await gpus_of(machine)
    except ComputeError as exc:
        if exc.code is not ErrorCode.INVALID_INPUT and exc.code is not ErrorCode.NOT_FOUND:
            raise
        return [*problems, Problem(f"{at}/machineType", f"EC2 has no instance type {machine!r}: {exc.message}")]
    wanted = flavor.get("gpus")
    if isinstance(wanted, Mapping):
        have = f"{gpus.count} x {gpus.accelerator_type}" if gpus else "no GPUs"
        if gpus is None or wanted.get("type") != gpus.accelerator_type or wanted.get("count") != gpus.count:
            problems.append(
                Problem(
                    f"{at}/gpus",
                    f"{machine} has {have} (EC2 DescribeInstanceTypes); the flavor asks "
                    f"{wanted.get('count')} x {wanted.get('type')}",
                )
            )
    return problems
