"""A project's regional quotas, as Compute Engine's `regions.get` serves them (`compute#region`, `quotas[]`).

Each quota is `{metric, limit, usage}`. A GPU metric's usage is the GPUs of the emulator's
node pools in that project and region (each zone's `targetSize` times the pool's GPUs per VM;
Spot pools count under `PREEMPTIBLE_<metric>`), plus what a test says is used outside them.
Every region starts with Compute Engine-like limits; a test sets its own:

    gke.quotas.set("us-central1", "NVIDIA_H100_GPUS", limit=16, used_elsewhere=8)

A region that does not exist is 404 notFound; `faults.compute_denied` answers 403 forbidden
(the caller lacks `compute.regions.get`), `faults.compute_disabled` 403 accessNotConfigured (the
Compute Engine API is off in the project), with Compute Engine's own messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from better_compute.testing.gke.catalog import REGION_ZONES, region_of
from better_compute.testing.gke.compute import ComputeApiError
from better_compute.testing.gke.state import COMPUTE_API, ClusterRecord

__all__ = ["DEFAULT_LIMITS", "RegionQuotas"]

GPU_METRICS = {
    "nvidia-b200": "NVIDIA_B200_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-tesla-v100": "NVIDIA_V100_GPUS",
    "nvidia-tesla-p100": "NVIDIA_P100_GPUS",
    "nvidia-tesla-p4": "NVIDIA_P4_GPUS",
}
"""Accelerator type -> its regional quota metric (Spot VMs: `PREEMPTIBLE_` before it)."""

DEFAULT_LIMITS: dict[str, float] = {
    "CPUS": 2400.0,
    "INSTANCES": 6000.0,
    "PREEMPTIBLE_CPUS": 2400.0,
    **{metric: 64.0 for metric in GPU_METRICS.values()},
    **{f"PREEMPTIBLE_{metric}": 64.0 for metric in GPU_METRICS.values()},
}


def _project_number(project: str) -> int:
    return sum(ord(c) for c in project) * 1000003 % 10**12


@dataclass
class RegionQuotas:
    """Limits (and usage outside the emulator) a test set, per region and metric."""

    limits: dict[tuple[str, str], float] = field(default_factory=dict)
    elsewhere: dict[tuple[str, str], float] = field(default_factory=dict)

    def set(self, region: str, metric: str, *, limit: float, used_elsewhere: float = 0.0) -> None:
        self.limits[(region, metric)] = limit
        self.elsewhere[(region, metric)] = used_elsewhere

    def region(
        self, project: str, region: str, clusters: Iterable[ClusterRecord], *, denied: bool, disabled: bool
    ) -> dict[str, Any]:
        """regions.get's answer, or its 403 or 404."""
        resource = f"projects/{project}/regions/{region}"
        if disabled:
            number = _project_number(project)
            raise ComputeApiError(
                403,
                "accessNotConfigured",
                f"Compute Engine API has not been used in project {number} before or it is disabled. Enable it by "
                f"visiting https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project="
                f"{number} then retry.",
            )
        if denied:
            raise ComputeApiError(403, "forbidden", f"Required 'compute.regions.get' permission for '{resource}'")
        if region not in REGION_ZONES:
            raise ComputeApiError(404, "notFound", f"The resource '{resource}' was not found")
        used = self._usage(project, region, clusters)
        metrics = sorted({*DEFAULT_LIMITS, *(m for r, m in self.limits if r == region)})
        quotas = [
            {
                "metric": metric,
                "limit": self.limits.get((region, metric), DEFAULT_LIMITS.get(metric, 0.0)),
                "usage": used.get(metric, 0.0) + self.elsewhere.get((region, metric), 0.0),
            }
            for metric in metrics
        ]
        return {
            "kind": "compute#region",
            "id": str(1000 + sorted(REGION_ZONES).index(region)),
            "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": region,
            "description": region,
            "status": "UP",
            "zones": [f"{COMPUTE_API}/projects/{project}/zones/{z}" for z in REGION_ZONES[region]],
            "quotas": quotas,
            "selfLink": f"{COMPUTE_API}/{resource}",
            "supportsPzs": False,
        }

    @staticmethod
    def _usage(project: str, region: str, clusters: Iterable[ClusterRecord]) -> dict[str, float]:
        used: dict[str, float] = {}
        for cluster in clusters:
            for pool in cluster.node_pools.values():
                metric = GPU_METRICS.get(pool.gpu_type or "")
                if pool.project != project or metric is None or region_of(cluster.location) != region:
                    continue
                key = f"PREEMPTIBLE_{metric}" if pool.spot else metric
                used[key] = used.get(key, 0.0) + sum(pool.targets.values()) * pool.gpu_count
        return used
