"""What the emulated Google Cloud offers: regions and zones, machine types and their GPUs, GKE versions.

This is the emulator's own idea of Google's world, kept apart from the driver's
vocabulary so that a test of the driver against the emulator compares two tables,
not one table with itself.
"""

from __future__ import annotations

from dataclasses import dataclass

REGION_ZONES: dict[str, tuple[str, ...]] = {
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
    "us-east1": ("us-east1-b", "us-east1-c", "us-east1-d"),
    "us-east4": ("us-east4-a", "us-east4-b", "us-east4-c"),
    "us-west1": ("us-west1-a", "us-west1-b", "us-west1-c"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
    "asia-southeast1": ("asia-southeast1-a", "asia-southeast1-b", "asia-southeast1-c"),
}

REGIONAL_DEFAULT_ZONES = 3
"""A regional cluster without `locations` puts its nodes in this many of the region's zones."""


@dataclass(frozen=True)
class MachineType:
    """A Compute Engine machine type as its Nodes report it: vCPUs, memory (MiB, as `memoryMb` gives it) and GPUs."""

    name: str
    vcpus: int
    memory_mib: int
    gpu_type: str | None = None
    gpu_count: int = 0


def _gib(gib: int) -> int:
    return gib * 1024


MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType("e2-medium", 2, _gib(4)),
        MachineType("e2-standard-2", 2, _gib(8)),
        MachineType("e2-standard-4", 4, _gib(16)),
        MachineType("n2-standard-8", 8, _gib(32)),
        MachineType("n1-standard-8", 8, _gib(30)),
        MachineType("g2-standard-4", 4, _gib(16), "nvidia-l4", 1),
        MachineType("g2-standard-48", 48, _gib(192), "nvidia-l4", 4),
        MachineType("a2-highgpu-1g", 12, _gib(85), "nvidia-tesla-a100", 1),
        MachineType("a2-highgpu-8g", 96, _gib(680), "nvidia-tesla-a100", 8),
        MachineType("a2-ultragpu-8g", 96, _gib(1360), "nvidia-a100-80gb", 8),
        MachineType("a3-highgpu-1g", 26, _gib(234), "nvidia-h100-80gb", 1),
        MachineType("a3-highgpu-8g", 208, _gib(1872), "nvidia-h100-80gb", 8),
        MachineType("a3-megagpu-8g", 208, _gib(1872), "nvidia-h100-mega-80gb", 8),
        MachineType("a3-ultragpu-8g", 224, _gib(2952), "nvidia-h200-141gb", 8),
    )
}

ATTACHABLE_GPUS = {"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"}
"""GPUs that attach to N1 machine types (the others come with their machine type)."""

VALID_MASTER_VERSIONS = ("1.31.2-gke.1115000", "1.30.5-gke.1443001", "1.29.10-gke.1054000")
DEFAULT_CLUSTER_VERSION = "1.30.5-gke.1443001"


def region_of(location: str) -> str | None:
    """The region of a region or zone name that exists, else None."""
    if location in REGION_ZONES:
        return location
    region = location.rsplit("-", 1)[0]
    if location in REGION_ZONES.get(region, ()):
        return region
    return None


def resolve_version(wanted: str | None) -> str | None:
    """A GKE version for `wanted`: "latest", a full version, or a prefix such as 1.31 (its newest patch)."""
    if not wanted or wanted == "-":
        return DEFAULT_CLUSTER_VERSION
    if wanted == "latest":
        return VALID_MASTER_VERSIONS[0]
    for version in VALID_MASTER_VERSIONS:
        if version == wanted or version.startswith((wanted + ".", wanted + "-")):
            return version
    return None


def kubernetes_version(gke_version: str) -> str:
    """1.31.2-gke.1115000 -> 1.31.2 (what the cluster's API server reports)."""
    return gke_version.split("-", 1)[0]
