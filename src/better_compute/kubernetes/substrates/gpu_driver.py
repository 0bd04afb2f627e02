"""GKE's NVIDIA driver installer for the substrate's nodes, where the substrate installs the driver itself.

GKE installs a node pool's driver from the pods of its own device plugin, which the
substrate's node pools turn off (`gke-no-default-nvidia-gpu-device-plugin=true`), so those
pools ask for no managed install (`INSTALLATION_DISABLED`) and the substrate runs GKE's
Container-Optimized OS installer instead: the DaemonSet of GoogleCloudPlatform/
container-engine-accelerators (nvidia-driver-installer/cos/daemonset-preloaded.yaml), whose
image GKE preloads on GPU nodes. Its privileged init container loads the driver and puts
it, libnvidia-ml included, in `/home/kubernetes/bin/nvidia`; then a pause container holds
the pod. Here it lives in bcd's namespace, selects exactly the substrate's Nodes, and
carries the substrate's label, so teardown removes it with the rest of bcd.
"""

from __future__ import annotations

from typing import Any

from better_compute.kubernetes.names import SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.substrates.manifests import NAMESPACE, substrate_labels

__all__ = ["DRIVER_DIR", "INSTALLER", "INSTALLER_IMAGE", "driver_installer"]

INSTALLER = "nvidia-driver-installer"
INSTALLER_IMAGE = "cos-nvidia-installer:fixed"
DRIVER_DIR = "/home/kubernetes/bin/nvidia"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def driver_installer(pool_id: str) -> dict[str, Any]:
    """The installer's DaemonSet for the substrate of `pool_id`."""
    labels = {**substrate_labels(pool_id), "app.kubernetes.io/name": INSTALLER}
    host = [("dev", "/dev"), ("nvidia-install-dir-host", DRIVER_DIR), ("root-mount", "/")]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": INSTALLER, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {SUBSTRATE_POOL_LABEL: pool_id, "app.kubernetes.io/name": INSTALLER}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {SUBSTRATE_POOL_LABEL: pool_id},
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    "hostNetwork": True,
                    "hostPID": True,
                    "automountServiceAccountToken": False,
                    "volumes": [{"name": name, "hostPath": {"path": path}} for name, path in host],
                    "initContainers": [
                        {
                            "name": INSTALLER,
                            "image": INSTALLER_IMAGE,
                            "imagePullPolicy": "Never",
                            "securityContext": {"privileged": True},
                            "env": [
                                {"name": "NVIDIA_INSTALL_DIR_HOST", "value": DRIVER_DIR},
                                {"name": "NVIDIA_INSTALL_DIR_CONTAINER", "value": "/usr/local/nvidia"},
                                {"name": "ROOT_MOUNT_DIR", "value": "/root"},
                            ],
                            "volumeMounts": [
                                {"name": "nvidia-install-dir-host", "mountPath": "/usr/local/nvidia"},
                                {"name": "dev", "mountPath": "/dev"},
                                {"name": "root-mount", "mountPath": "/root"},
                            ],
                        }
                    ],
                    "containers": [{"name": "pause", "image": PAUSE_IMAGE}],
                },
            },
        },
    }
