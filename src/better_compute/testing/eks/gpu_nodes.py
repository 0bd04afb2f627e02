"""What EKS puts on a GPU node, by the node group's AMI type.

- AL2023 NVIDIA (`AL2023_x86_64_NVIDIA`, `AL2023_ARM_64_NVIDIA`): the driver and NVIDIA's container
  toolkit on the image, `nvidia` as containerd's default runtime (CDI on), which honours
  `NVIDIA_VISIBLE_DEVICES` for unprivileged containers by default; no device plugin.
- Bottlerocket NVIDIA (`BOTTLEROCKET_x86_64_NVIDIA`, `BOTTLEROCKET_ARM_64_NVIDIA`): the driver, a
  runtime that ignores `NVIDIA_VISIBLE_DEVICES` from unprivileged containers and takes volume mounts,
  and NVIDIA's device plugin run by the host (a systemd service, `volume-mounts` strategy), unless
  the node group's user data (its launch template's, Bottlerocket's TOML settings) sets
  `settings.kubelet-device-plugins.nvidia.enabled = false` (bottlerocket-os/bottlerocket-core-kit
  #914: "defaults to enabled"). User data that is not TOML leaves the default.
- Any other AMI type: the GPUs are there but no driver, so no devices.

No GPU label or taint is added: a managed node group carries only the labels and taints it was
created with. Sources in docs/providers.md (EKS).
"""

from __future__ import annotations

import tomllib

from better_compute.testing.eks.catalog import InstanceType
from better_compute.testing.kube.gpus import AL2023_NVIDIA, BOTTLEROCKET_NVIDIA, NodeGpus
from better_compute.testing.kube.kubelet import KubeletSimulator
from better_compute.testing.kube.vendor_plugins import host_plugin

__all__ = ["bottlerocket_device_plugin", "gpu_node", "start_host_plugin"]


def gpu_node(itype: InstanceType, ami_type: str) -> NodeGpus | None:
    if itype.gpu is None or itype.gpu.manufacturer != "NVIDIA":
        return None
    if ami_type.startswith("AL2023_") and ami_type.endswith("_NVIDIA"):
        return NodeGpus(count=itype.gpu.count, model=itype.gpu.name, runtime=AL2023_NVIDIA)
    if ami_type.startswith("BOTTLEROCKET_") and ami_type.endswith("_NVIDIA"):
        return NodeGpus(count=itype.gpu.count, model=itype.gpu.name, runtime=BOTTLEROCKET_NVIDIA)
    return NodeGpus(count=itype.gpu.count, model=itype.gpu.name, runtime=AL2023_NVIDIA, driver_ready=False)


def start_host_plugin(kubelet: KubeletSimulator, node: str, ami_type: str, user_data: str = "") -> None:
    """Bottlerocket NVIDIA starts NVIDIA's device plugin with the node, unless its settings turn it off."""
    bottlerocket = ami_type.startswith("BOTTLEROCKET_") and ami_type.endswith("_NVIDIA")
    if bottlerocket and kubelet.gpus(node) is not None and bottlerocket_device_plugin(user_data):
        kubelet.start_host_plugin(node, lambda: host_plugin(kubelet, node, "volume-mounts", "nvidia-gpu.sock"))


def bottlerocket_device_plugin(user_data: str) -> bool:
    """Whether Bottlerocket's settings (TOML user data) leave its NVIDIA device plugin on (the default)."""
    try:
        settings = tomllib.loads(user_data).get("settings", {})
    except tomllib.TOMLDecodeError:
        return True
    plugin = settings.get("kubelet-device-plugins", {}).get("nvidia", {})
    return plugin.get("enabled", True) is not False
