"""A region's GPU quotas, as Compute Engine's `regions.get` answers them (`quotas[]`: metric, limit, usage).

GKE's node pools are Compute Engine VMs, so their GPUs count against the project's regional
quotas: one metric per accelerator (`NVIDIA_H100_GPUS`, `NVIDIA_L4_GPUS`, `NVIDIA_T4_GPUS`, ...),
and another for Spot / preemptible ones (`PREEMPTIBLE_NVIDIA_H100_GPUS`). The usage Compute Engine
reports is the project's in the region, whoever made the VMs. Read through google-cloud-compute's
REST transport with the SDK's retries off, like every driver call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import Quota, QuotaNeed
from better_compute.providers.gcp.compute_client import ComputeClient
from better_compute.providers.gcp.vocabulary import GPU_QUOTA_METRICS, MACHINE_GPUS

if TYPE_CHECKING:
    from google.cloud import compute_v1

__all__ = ["RegionQuotas", "gpu_needs", "region_quotas"]

PREEMPTIBLE = "PREEMPTIBLE_"


def gpu_needs(needs: tuple[QuotaNeed, ...]) -> dict[str, float]:
    """The GPUs the needs add, by quota metric: the flavor's accelerators, else its machine type's."""
    wanted: dict[str, float] = {}
    for need in needs:
        accelerator = (need.accelerators.type, need.accelerators.count) if need.accelerators else None
        accelerator = accelerator or MACHINE_GPUS.get(need.machine_type)
        metric = GPU_QUOTA_METRICS.get(accelerator[0]) if accelerator is not None else None
        if accelerator is None or metric is None:
            continue
        key = PREEMPTIBLE + metric if need.spot else metric
        wanted[key] = wanted.get(key, 0) + need.count * accelerator[1]
    return wanted


def _name(metric: str) -> str:
    """`PREEMPTIBLE_NVIDIA_H100_GPUS` -> `Preemptible NVIDIA H100 GPUs`, as the console writes it."""
    words = metric.split("_")
    spelled = {"PREEMPTIBLE": "Preemptible", "GPUS": "GPUs"}
    return " ".join(spelled.get(w, w) for w in words)


def region_quotas(
    wanted: Mapping[str, float], listed: Mapping[str, tuple[float, float]], region: str
) -> tuple[Quota, ...]:
    """A Quota for each metric wanted; one the region does not list is refused (NOT_FOUND) rather than guessed."""
    missing = sorted(set(wanted) - set(listed))
    if missing:
        raise ComputeError(ErrorCode.NOT_FOUND, f"region {region} lists no quota {', '.join(missing)}")
    return tuple(
        Quota(metric, _name(metric), "GPUs", listed[metric][0], listed[metric][1], wanted[metric], scope=region)
        for metric in sorted(wanted)
    )


class RegionQuotas(ComputeClient["compute_v1.RegionsClient"]):
    """One lazily made RegionsClient, shared by the driver's threads."""

    def _new(self, module: Any, **options: Any) -> compute_v1.RegionsClient:
        return cast("compute_v1.RegionsClient", module.RegionsClient(**options))

    def read(self, project: str, region: str) -> dict[str, tuple[float, float]]:
        """The region's quotas: metric -> (limit, usage)."""
        answer = self._api().get(project=project, region=region, retry=None, timeout=self._timeout)
        return {q.metric: (q.limit, q.usage) for q in answer.quotas}
