"""What DOKS puts on a GPU node: its labels and taint, the NVIDIA runtime, and DigitalOcean's device plugin.

- A GPU node carries `doks.digitalocean.com/gpu-brand=<vendor>`, `doks.digitalocean.com/gpu-model=<model>`
  and the taint `<vendor>.com/gpu:NoSchedule`.
- Its driver is on the image and the NVIDIA container runtime is containerd's default, honouring
  `NVIDIA_VISIBLE_DEVICES` for unprivileged containers (testing/kube/gpus.py, DOKS_NVIDIA).
- While the cluster's `nvidia_gpu_device_plugin` is on, DigitalOcean runs NVIDIA's device plugin
  (`DEVICE_LIST_STRATEGY=envvar`) as a DaemonSet in `nvidia-device-plugin-system` on the NVIDIA nodes;
  turning it off removes the DaemonSet.

Sources in docs/providers.md (DOKS).
"""

from __future__ import annotations

import contextlib
from typing import Any

from better_compute.testing.doks.catalog import Size
from better_compute.testing.kube import KubeCluster
from better_compute.testing.kube.gpus import DOKS_NVIDIA, NodeGpus
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.vendor_plugins import plugin_program

__all__ = ["PLUGIN_DAEMONSET", "PLUGIN_IMAGE", "PLUGIN_NAMESPACE", "gpu_node", "sync_gpu_plugin"]

PLUGIN_NAMESPACE = "nvidia-device-plugin-system"
PLUGIN_DAEMONSET = "nvidia-device-plugin-daemonset"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
_MANAGER = "digitalocean"


def gpu_node(size: Size, labels: dict[str, str], taints: list[dict[str, str]]) -> NodeGpus | None:
    """The Node's GPUs (None for an AMD or CPU size), with DOKS' GPU labels and taint added."""
    if size.gpu_vendor is None:
        return None
    model = size.slug.removeprefix("gpu-").split("x", 1)[0]
    labels["doks.digitalocean.com/gpu-brand"] = size.gpu_vendor
    labels["doks.digitalocean.com/gpu-model"] = model
    taints.append({"key": f"{size.gpu_vendor}.com/gpu", "value": "", "effect": "NoSchedule"})
    if size.gpu_vendor != "nvidia":
        return None
    return NodeGpus(count=size.gpus, model=model.upper(), runtime=DOKS_NVIDIA)


def _daemonset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": PLUGIN_DAEMONSET,
            "namespace": PLUGIN_NAMESPACE,
            "labels": {"app": "nvidia-device-plugin"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "nvidia-device-plugin"}},
            "template": {
                "metadata": {"labels": {"app": "nvidia-device-plugin"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": {"doks.digitalocean.com/gpu-brand": "nvidia"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": f"{PLUGIN_IMAGE}:v0.17.0",
                            "env": [{"name": "DEVICE_LIST_STRATEGY", "value": "envvar"}],
                            "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
                        }
                    ],
                },
            },
        },
    }


def sync_gpu_plugin(kube: KubeCluster, enabled: bool) -> None:
    """DigitalOcean's managed plugin follows the cluster's `nvidia_gpu_device_plugin`."""
    kube.kubelet.programs[PLUGIN_IMAGE] = plugin_program(kube.kubelet, "envvar", "nvidia-gpu.sock")
    namespaces = kube.resource("v1", "Namespace")
    daemonsets = kube.resource("apps/v1", "DaemonSet")
    present = kube.store.peek(daemonsets, PLUGIN_NAMESPACE, PLUGIN_DAEMONSET) is not None
    if enabled and not present:
        if kube.store.peek(namespaces, "", PLUGIN_NAMESPACE) is None:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}}
            kube.ops.create(namespaces, "", namespace, manager=_MANAGER)
        kube.ops.create(daemonsets, PLUGIN_NAMESPACE, _daemonset(), manager=_MANAGER)
    elif not enabled and present:
        with contextlib.suppress(KubeError):
            kube.ops.delete(daemonsets, PLUGIN_NAMESPACE, PLUGIN_DAEMONSET)
