"""What a DigitalOcean account calls a region, a machine type and an accelerator, as data.

DOKS clusters live in a region; node pools have no zones and take their size's
disk, so `nodes` is the pool's total. A fixed-size node pool has at least one node
(`nodes: 0` needs autoscaling with `minNodes: 0`). Spot node pools are a
DigitalOcean preview that the published API has no field for: a Spot node pool
carries the tag `SPOT_TAG`, the node pool field the API keeps and returns.
Kubernetes Nodes are named `<node pool>-<suffix>`.
"""

from __future__ import annotations

from better_compute.kubernetes.provider import GpuInfo, KubernetesVocabulary, TypicalDurations

__all__ = [
    "CREDENTIAL_EXPIRY_SECONDS",
    "DEVICE_PLUGIN_ON",
    "GPU_SIZES",
    "PROVIDER",
    "REGIONS",
    "SPOT_TAG",
    "SYSTEM_POOL",
    "VOCABULARY",
    "gpu_info",
    "is_gpu_size",
]

PROVIDER = "digitalocean"
SPOT_TAG = "spot"
"""The node pool tag of DigitalOcean's Spot preview (its node pool model has no Spot field)."""

VOCABULARY = KubernetesVocabulary(
    provider=PROVIDER,
    cluster_location="region",
    nodes_per_zone=False,
    zero_nodes=False,
    spot=True,
    zones_and_disk=False,
    node_naming="<node pool>-<suffix>",
    # DOKS: a cluster in about 6 minutes, a node pool's Droplets in about 3, a resize likewise.
    durations=TypicalDurations(cluster_create=360.0, node_pool_create=180.0, node_pool_resize=180.0),
    pools_upgrade_with_cluster=True,
    node_pool_label="doks.digitalocean.com/node-pool",
)

REGIONS = frozenset({"nyc1", "nyc3", "sfo2", "sfo3", "ams3", "sgp1", "lon1", "fra1", "tor1", "blr1", "syd1", "atl1"})
"""The regions that run DOKS."""

GPU_SIZES: dict[str, GpuInfo] = {
    "gpu-h100x1-80gb": GpuInfo("H100", 1, "nvidia-h100"),
    "gpu-h100x8-640gb": GpuInfo("H100", 8, "nvidia-h100"),
    "gpu-h200x1-141gb": GpuInfo("H200", 1, "nvidia-h200"),
    "gpu-h200x8-1128gb": GpuInfo("H200", 8, "nvidia-h200"),
    "gpu-l40sx1-48gb": GpuInfo("L40S", 1, "nvidia-l40s"),
    "gpu-4000adax1-20gb": GpuInfo("RTX4000ADA", 1, "nvidia-rtx-4000-ada"),
    "gpu-6000adax1-48gb": GpuInfo("RTX6000ADA", 1, "nvidia-rtx-6000-ada"),
    "gpu-mi300x1-192gb": GpuInfo("MI300X", 1, "amd-mi300x"),
    "gpu-mi300x8-1536gb": GpuInfo("MI300X", 8, "amd-mi300x"),
}
"""Droplet GPU sizes: the GPUs each carries, in better-compute's model names."""

SYSTEM_POOL = ("bc-system", "s-2vcpu-4gb", 1)
"""DOKS makes no cluster without a node: a cluster better-compute creates gets this (name, size, count)
pool, which runs the cluster's own add-ons and never takes GPU work. Its name cannot be an adopted
pool's (`bc-<6>-<flavor>`) and stays short whatever the cluster is called."""

CREDENTIAL_EXPIRY_SECONDS = 600
DEVICE_PLUGIN_ON = "devicePluginOn"
"""The refusal reason for a GPU node pool while DigitalOcean's own GPU device plugins are on."""


def gpu_info(size: str) -> GpuInfo | None:
    """The GPUs of a Droplet size, or None for a size without GPUs."""
    return GPU_SIZES.get(size)


def is_gpu_size(size: str) -> bool:
    """DigitalOcean names every GPU Droplet size `gpu-...`."""
    return size.startswith("gpu-")
