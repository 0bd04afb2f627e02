"""DOKS's rules for a pool's `policy.substrate`, as FleetConfig validation reports them.

Every problem carries a JSON pointer: flavor rules under the substrate's `path`,
account rules under `<path>/account/config/...` (the substrate's field that names
the account), which FleetConfig moves to the account's own `/providerAccounts/<i>`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from better_compute.core.errors import Problem
from better_compute.providers.digitalocean.vocabulary import REGIONS, gpu_info, is_gpu_size
from better_compute.secrets import is_reference

__all__ = ["account_problems", "spot_allowed", "substrate_problems"]

_SIZE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def spot_allowed(config: Mapping[str, Any]) -> bool:
    """Spot on DOKS is a preview: the account opts in with `allowSpot: true` and `previews`
    (`true`, or a list that names `spot`)."""
    previews = config.get("previews")
    opted = previews is True or (isinstance(previews, list) and "spot" in previews)
    return config.get("allowSpot") is True and opted


def account_problems(config: Mapping[str, Any], account_path: str) -> list[Problem]:
    problems: list[Problem] = []
    token = config.get("token")
    if token is None:
        problems.append(
            Problem(f"{account_path}/config/token", "DigitalOcean needs an API token: a secret:// reference")
        )
    elif not is_reference(token):
        problems.append(
            Problem(
                f"{account_path}/config/token",
                "the API token must be a secret://<tenant>/<id> reference, never the token itself",
            )
        )
    regions = config.get("regions")
    if regions is not None:
        if not isinstance(regions, list) or not regions:
            problems.append(Problem(f"{account_path}/config/regions", "regions must be a non-empty list of regions"))
        else:
            for i, region in enumerate(regions):
                if region not in REGIONS:
                    problems.append(Problem(f"{account_path}/config/regions/{i}", f"{region!r} is not a DOKS region"))
    return problems


def _location_problems(config: Mapping[str, Any], cluster: Any, path: str) -> list[Problem]:
    if not isinstance(cluster, Mapping):
        return []
    create, adopt = cluster.get("create"), cluster.get("adopt")
    if isinstance(create, Mapping):
        location = create.get("location")
        where = f"{path}/cluster/create/location"
        if location not in REGIONS:
            return [Problem(where, f"{location!r} is not a DOKS region (DOKS clusters live in a region, e.g. tor1)")]
        regions = config.get("regions")
        if isinstance(regions, list) and regions and location not in regions:
            return [Problem(where, f"{location} is not one of the account's regions {regions}")]
    if adopt is not None:
        try:
            uuid.UUID(str(adopt))
        except ValueError:
            return [Problem(f"{path}/cluster/adopt", "a DOKS cluster to adopt is named by its UUID")]
    return []


def _flavor_problems(config: Mapping[str, Any], flavor: Mapping[str, Any], where: str) -> list[Problem]:
    problems: list[Problem] = []
    size = flavor.get("machineType")
    gpus = flavor.get("gpus")
    if not isinstance(size, str) or not _SIZE.match(size):
        problems.append(Problem(f"{where}/machineType", f"{size!r} is not a Droplet size slug"))
    elif is_gpu_size(size) or gpus is not None:
        info = gpu_info(size)
        if info is None:
            problems.append(Problem(f"{where}/machineType", f"{size} is not a DOKS GPU size"))
        else:
            wanted = {"type": info.accelerator_type, "count": info.count}
            given = {"type": gpus.get("type"), "count": gpus.get("count")} if isinstance(gpus, Mapping) else None
            if given != wanted:
                problems.append(
                    Problem(
                        f"{where}/gpus",
                        f"{size} carries {info.count} x {info.accelerator_type}: gpus must be "
                        f'{{"type": "{info.accelerator_type}", "count": {info.count}}}',
                    )
                )
    if flavor.get("zones") is not None:
        problems.append(Problem(f"{where}/zones", "DOKS node pools have no zones: they are regional"))
    if flavor.get("diskGiB") is not None:
        problems.append(Problem(f"{where}/diskGiB", "DOKS node pools take their size's disk; diskGiB cannot be set"))
    autoscaling = flavor.get("autoscaling")
    if flavor.get("nodes") == 0 and not (isinstance(autoscaling, Mapping) and autoscaling.get("minNodes") == 0):
        problems.append(
            Problem(
                f"{where}/nodes",
                "a fixed-size DOKS node pool has at least one node; nodes: 0 needs autoscaling with minNodes: 0",
            )
        )
    if flavor.get("spot") is True and not spot_allowed(config):
        problems.append(
            Problem(
                f"{where}/spot",
                "Spot on DOKS is a DigitalOcean preview: the account's config needs allowSpot: true and previews",
            )
        )
    return problems


def substrate_problems(config: Mapping[str, Any], substrate: Mapping[str, Any], *, path: str) -> list[Problem]:
    """Every DOKS problem of one substrate (and its account), each with its JSON pointer."""
    problems = account_problems(config, f"{path}/account")
    problems += _location_problems(config, substrate.get("cluster"), path)
    flavors = substrate.get("flavors")
    for i, flavor in enumerate(flavors if isinstance(flavors, list) else []):
        if isinstance(flavor, Mapping):
            problems += _flavor_problems(config, flavor, f"{path}/flavors/{i}")
    return problems
