"""What GKE puts on a GPU node: its labels and taint, its driver, and GKE's own device plugin.

- A GPU node carries `cloud.google.com/gke-accelerator=<type>` and, as every GPU pool here
  sits in a cluster that also has a CPU pool, the taint `nvidia.com/gpu=present:NoSchedule`.
- Container-Optimized OS has no NVIDIA container runtime (testing/kube/gpus.py, COS).
- The driver follows the pool's `accelerators[].gpuDriverInstallationConfig.gpuDriverVersion`:
  DEFAULT or LATEST ask GKE to install one (the node is labelled
  `cloud.google.com/gke-gpu-driver-version=default|latest`, and GKE's plugin pod installs it
  in its init container); INSTALLATION_DISABLED, or no setting, installs none: only a driver
  installer someone applies (GKE's `nvidia-driver-installer` DaemonSet) loads it.
- GKE runs `kube-system/nvidia-gpu-device-plugin` on every node with
  `cloud.google.com/gke-accelerator`, except on node pools labelled
  `gke-no-default-nvidia-gpu-device-plugin=true`; it advertises every GPU and answers
  Allocate with DeviceSpecs and the driver mount (testing/kube/vendor_plugins.py).

Sources in docs/providers.md (GKE).
"""

from __future__ import annotations

from typing import Any

from better_compute.testing.kube import KubeCluster
from better_compute.testing.kube.gpus import COS, NodeGpus
from better_compute.testing.kube.vendor_plugins import GKE_DRIVER_VERSION_LABEL, driver_installer, plugin_program

__all__ = [
    "DRIVER_VERSIONS",
    "GKE_PLUGIN",
    "GKE_PLUGIN_IMAGE",
    "INSTALLER_IMAGES",
    "NO_DEFAULT_PLUGIN_LABEL",
    "gpu_node",
    "install_gpu_addons",
]

DRIVER_VERSIONS = ("GPU_DRIVER_VERSION_UNSPECIFIED", "INSTALLATION_DISABLED", "DEFAULT", "LATEST")
NO_DEFAULT_PLUGIN_LABEL = "gke-no-default-nvidia-gpu-device-plugin"
GKE_PLUGIN = "nvidia-gpu-device-plugin"
GKE_PLUGIN_IMAGE = "gke.gcr.io/nvidia-gpu-device-plugin"
MANAGED_INSTALLER_IMAGE = "gke.gcr.io/cos-nvidia-installer"
INSTALLER_IMAGES = ("cos-nvidia-installer", "gcr.io/cos-cloud/cos-gpu-installer")
"""GKE's COS driver installer image as its DaemonSet names it (preloaded on the node) and as pulled."""


def _gpu_model(gpu_type: str) -> str:
    """`nvidia-h100-80gb` -> `H100`, `nvidia-tesla-a100` -> `A100`, `nvidia-l4` -> `L4`."""
    parts = [p for p in gpu_type.split("-") if p not in ("nvidia", "tesla")]
    return parts[0].upper() if parts else "GPU"


def gpu_node(
    gpu_type: str, gpu_count: int, driver_version: str | None, labels: dict[str, str], taints: list[dict[str, str]]
) -> NodeGpus:
    """The Node's GPUs (no driver yet), with GKE's GPU labels and taint added to `labels` and `taints`."""
    labels["cloud.google.com/gke-accelerator"] = gpu_type
    if driver_version in ("DEFAULT", "LATEST"):
        labels[GKE_DRIVER_VERSION_LABEL] = driver_version.lower()
    taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    return NodeGpus(count=gpu_count, model=_gpu_model(gpu_type), runtime=COS, driver_ready=False)


def _plugin_daemonset() -> dict[str, Any]:
    host = [
        ("dev", "/dev"),
        ("device-plugin", "/var/lib/kubelet/device-plugins"),
        ("nvidia", "/home/kubernetes/bin/nvidia"),
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": GKE_PLUGIN,
            "namespace": "kube-system",
            "labels": {"k8s-app": GKE_PLUGIN, "addonmanager.kubernetes.io/mode": "Reconcile"},
        },
        "spec": {
            "selector": {"matchLabels": {"k8s-app": GKE_PLUGIN}},
            "template": {
                "metadata": {"labels": {"k8s-app": GKE_PLUGIN}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"},
                                            {"key": NO_DEFAULT_PLUGIN_LABEL, "operator": "NotIn", "values": ["true"]},
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [{"operator": "Exists"}],
                    "volumes": [{"name": name, "hostPath": {"path": path}} for name, path in host],
                    "initContainers": [
                        {
                            "name": "nvidia-driver-installer",
                            "image": f"{MANAGED_INSTALLER_IMAGE}:fixed",
                            "securityContext": {"privileged": True},
                            "volumeMounts": [{"name": "nvidia", "mountPath": "/usr/local/nvidia"}],
                        }
                    ],
                    "containers": [
                        {
                            "name": "nvidia-gpu-device-plugin",
                            "image": f"{GKE_PLUGIN_IMAGE}:v1.0.0-gke.1",
                            "command": ["/usr/bin/nvidia-gpu-device-plugin", "-logtostderr"],
                            "securityContext": {"privileged": True},
                            "volumeMounts": [
                                {"name": "device-plugin", "mountPath": "/device-plugin"},
                                {"name": "dev", "mountPath": "/dev"},
                                {"name": "nvidia", "mountPath": "/usr/local/nvidia"},
                            ],
                        }
                    ],
                },
            },
        },
    }


def install_gpu_addons(kube: KubeCluster) -> None:
    """GKE's GPU add-on in a new cluster: the plugin's DaemonSet, and what its images and GKE's
    driver installer's do on a node (the kubelet simulator's programs)."""
    kubelet = kube.kubelet
    kubelet.programs[GKE_PLUGIN_IMAGE] = plugin_program(kubelet, "device-specs", "nvidiaGPU.sock")
    kubelet.programs[MANAGED_INSTALLER_IMAGE] = driver_installer(kubelet, managed=True)
    for image in INSTALLER_IMAGES:
        kubelet.programs[image] = driver_installer(kubelet, managed=False)
    kube.ops.create(kube.resource("apps/v1", "DaemonSet"), "kube-system", _plugin_daemonset(), manager="gke")
