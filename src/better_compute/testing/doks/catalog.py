"""What the emulated DigitalOcean sells: regions, Kubernetes versions, Droplet sizes.

The emulator's own table, kept apart from the driver's vocabulary on purpose: the
driver's knowledge of sizes is tested against this "cloud", not against itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "REGIONS",
    "REGION_NAMES",
    "SIZES",
    "SPOT_TAG",
    "VERSIONS",
    "Size",
    "kubernetes_version",
    "resolve_version",
    "upgrades_from",
]

REGION_NAMES = {
    "nyc1": "New York 1",
    "nyc3": "New York 3",
    "sfo2": "San Francisco 2",
    "sfo3": "San Francisco 3",
    "ams3": "Amsterdam 3",
    "sgp1": "Singapore 1",
    "lon1": "London 1",
    "fra1": "Frankfurt 1",
    "tor1": "Toronto 1",
    "blr1": "Bangalore 1",
    "syd1": "Sydney 1",
    "atl1": "Atlanta 1",
}
REGIONS = tuple(REGION_NAMES)

SPOT_TAG = "spot"
"""A node pool with this tag is Spot: the emulator's model of DigitalOcean's Spot preview, which the published
node pool model has no field for (a `spot` key in a request is ignored, as the API ignores unknown keys)."""

VERSIONS = ("1.30.10-do.0", "1.31.6-do.0", "1.32.2-do.0", "1.33.1-do.0")
"""Supported version slugs, oldest first: `<kubernetes version>-do.<n>`."""


@dataclass(frozen=True)
class Size:
    """A Droplet size as DigitalOcean's size list gives it: vCPUs, memory (MiB, the list's `memory`) and GPUs."""

    slug: str
    vcpus: int
    memory_mib: int
    gpu_vendor: str | None = None  # "nvidia" | "amd"
    gpus: int = 0


def _gib(gib: int) -> int:
    return gib * 1024


SIZES = {
    s.slug: s
    for s in (
        Size("s-1vcpu-2gb", 1, _gib(2)),
        Size("s-2vcpu-4gb", 2, _gib(4)),
        Size("s-4vcpu-8gb", 4, _gib(8)),
        Size("c-4", 4, _gib(8)),
        Size("c-8", 8, _gib(16)),
        Size("g-4vcpu-16gb", 4, _gib(16)),
        Size("gpu-h100x1-80gb", 20, _gib(240), "nvidia", 1),
        Size("gpu-h100x8-640gb", 160, _gib(1920), "nvidia", 8),
        Size("gpu-h200x1-141gb", 24, _gib(240), "nvidia", 1),
        Size("gpu-h200x8-1128gb", 192, _gib(1920), "nvidia", 8),
        Size("gpu-l40sx1-48gb", 8, _gib(64), "nvidia", 1),
        Size("gpu-4000adax1-20gb", 8, _gib(32), "nvidia", 1),
        Size("gpu-6000adax1-48gb", 8, _gib(64), "nvidia", 1),
        Size("gpu-mi300x1-192gb", 20, _gib(240), "amd", 1),
        Size("gpu-mi300x8-1536gb", 160, _gib(1920), "amd", 8),
    )
}


def kubernetes_version(slug: str) -> str:
    """`1.31.6-do.0` -> `1.31.6`: what the cluster's API server reports."""
    return slug.split("-", 1)[0]


def resolve_version(asked: str | None, offered: Sequence[str] = VERSIONS) -> str | None:
    """A version slug of `offered` for what a request asks: a full slug, a minor (`1.31`) or `latest`."""
    if asked in (None, "", "latest"):
        return offered[-1]
    if asked in offered:
        return asked
    matching = [v for v in offered if kubernetes_version(v).startswith(f"{asked}.") or kubernetes_version(v) == asked]
    return matching[-1] if matching else None


def upgrades_from(slug: str, offered: Sequence[str] = VERSIONS) -> list[str]:
    """The newer slugs of `offered` a cluster at `slug` may upgrade to (DOKS allows the next minor)."""
    if slug not in offered:
        return []
    index = list(offered).index(slug)
    return list(offered[index + 1 : index + 2])
