"""What GKE calls places, shapes and counts: data, read by the driver and its validation.

- A cluster's location is a region (regional cluster) or a zone (zonal cluster).
- A flavor's `nodes` counts per zone of its node pool: the flavor's `zones`, else the
  cluster's node zones (the account's `zones`, else GKE's default: three zones of the
  region for a regional cluster, the one zone for a zonal cluster).
- Machine types of the A2, A3, A4 and G2 families carry their GPUs; N1 machine types
  take attachable GPUs (T4, V100, P100, P4) of 1, 2, 4 or 8.
- Nodes are named after their VM: `gke-<cluster>-<node pool>-<8 hex>-<4 chars>`.
"""

from __future__ import annotations

import re

from better_compute.kubernetes.provider import GpuNode, KubernetesVocabulary, TypicalDurations

REGION_ZONES: dict[str, tuple[str, ...]] = {
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
    "us-east1": ("us-east1-b", "us-east1-c", "us-east1-d"),
    "us-east4": ("us-east4-a", "us-east4-b", "us-east4-c"),
    "us-east5": ("us-east5-a", "us-east5-b", "us-east5-c"),
    "us-south1": ("us-south1-a", "us-south1-b", "us-south1-c"),
    "us-west1": ("us-west1-a", "us-west1-b", "us-west1-c"),
    "us-west4": ("us-west4-a", "us-west4-b", "us-west4-c"),
    "europe-west1": ("europe-west1-b", "europe-west1-c", "europe-west1-d"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
    "asia-northeast1": ("asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c"),
    "asia-southeast1": ("asia-southeast1-a", "asia-southeast1-b", "asia-southeast1-c"),
}

REGIONAL_DEFAULT_NODE_ZONES = 3
"""A regional cluster whose node zones are not given gets nodes in three zones of its region."""

GPU_MODELS: dict[str, str] = {
    "nvidia-b200": "B200",
    "nvidia-h200-141gb": "H200",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100",
    "nvidia-a100-80gb": "A100",
    "nvidia-tesla-a100": "A100",
    "nvidia-l4": "L4",
    "nvidia-tesla-t4": "T4",
    "nvidia-tesla-v100": "V100",
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-p4": "P4",
}
"""GKE accelerator type -> better-compute's GPU model name."""

MACHINE_GPUS: dict[str, tuple[str, int]] = {
    "a4-highgpu-8g": ("nvidia-b200", 8),
    "a3-ultragpu-8g": ("nvidia-h200-141gb", 8),
    "a3-megagpu-8g": ("nvidia-h100-mega-80gb", 8),
    "a3-highgpu-8g": ("nvidia-h100-80gb", 8),
    "a3-highgpu-4g": ("nvidia-h100-80gb", 4),
    "a3-highgpu-2g": ("nvidia-h100-80gb", 2),
    "a3-highgpu-1g": ("nvidia-h100-80gb", 1),
    "a2-ultragpu-8g": ("nvidia-a100-80gb", 8),
    "a2-ultragpu-4g": ("nvidia-a100-80gb", 4),
    "a2-ultragpu-2g": ("nvidia-a100-80gb", 2),
    "a2-ultragpu-1g": ("nvidia-a100-80gb", 1),
    "a2-highgpu-8g": ("nvidia-tesla-a100", 8),
    "a2-highgpu-4g": ("nvidia-tesla-a100", 4),
    "a2-highgpu-2g": ("nvidia-tesla-a100", 2),
    "a2-highgpu-1g": ("nvidia-tesla-a100", 1),
    "g2-standard-4": ("nvidia-l4", 1),
    "g2-standard-8": ("nvidia-l4", 1),
    "g2-standard-12": ("nvidia-l4", 1),
    "g2-standard-16": ("nvidia-l4", 1),
    "g2-standard-24": ("nvidia-l4", 2),
    "g2-standard-32": ("nvidia-l4", 1),
    "g2-standard-48": ("nvidia-l4", 4),
    "g2-standard-96": ("nvidia-l4", 8),
}
"""Machine types that come with their GPUs: type and count."""

GPU_QUOTA_METRICS: dict[str, str] = {
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
"""GKE accelerator type -> the Compute Engine regional quota metric its GPUs count against
(Spot / preemptible ones: the same with `PREEMPTIBLE_` before it)."""

ATTACHABLE_GPUS = frozenset({"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"})
ATTACHABLE_COUNTS = frozenset({1, 2, 4, 8})
ATTACHABLE_FAMILY = "n1-"

CPU_MACHINE_TYPE = re.compile(
    r"^(e2|n1|n2|n2d|n4|c2|c2d|c3|c3d|c4|t2d|t2a|m1|m2|m3)-"
    r"(standard|highmem|highcpu|megamem|ultramem|medium|small|micro)(-\d+)?$"
)

DISK_MIN_GIB = 10
DISK_MAX_GIB = 65536

VOCABULARY = KubernetesVocabulary(
    provider="gcp",
    cluster_location="region-or-zone",
    nodes_per_zone=True,
    zero_nodes=True,
    spot=True,
    zones_and_disk=True,
    node_naming="the VM hostname: gke-<cluster>-<node pool>-<8 hex>-<4 chars>",
    # GKE: a cluster in about 5 minutes, a node pool in about 2, a resize in 1.
    durations=TypicalDurations(cluster_create=300.0, node_pool_create=120.0, node_pool_resize=60.0),
    node_pool_label="cloud.google.com/gke-nodepool",
    # GKE limits the critical classes; COS has no NVIDIA runtime and its driver is on the host (substrates/manifests.py).
    gpu_node=GpuNode(driver_dir="/home/kubernetes/bin/nvidia", critical_pods_quota=True),
)


def region_of(location: str) -> str | None:
    """The region of a known region or zone name, else None."""
    if location in REGION_ZONES:
        return location
    region = location.rsplit("-", 1)[0]
    return region if location in REGION_ZONES.get(region, ()) else None


def is_zone(location: str) -> bool:
    return location not in REGION_ZONES and region_of(location) is not None


def known_machine_type(machine_type: str) -> bool:
    return machine_type in MACHINE_GPUS or CPU_MACHINE_TYPE.match(machine_type) is not None
