"""How bcd reaches the GPUs of the substrate's nodes, and GKE's NVIDIA driver installer.

`gpu_access` fits bcd's objects to the node image. Where the node has no NVIDIA container
runtime (GKE's Container-Optimized OS), bcd's Allocate mounts the host's driver directory
and names the device nodes (`BCD_HOST_DRIVER_DIR`). Where it has one (EKS AL2023 NVIDIA,
DOKS), bcd's run container mounts the runtime's config directory and bcd turns off the
runtime's reading of unprivileged containers' own NVIDIA_VISIBLE_DEVICES there
(`BCD_NVIDIA_RUNTIME_CONFIG`, bcd/runtime_config.py), so a container gets only what
Allocate gives it. bcd's own containers then reach every GPU (NVML) through `/dev/null` mounted at
/var/run/nvidia-container-devices/all, which the runtime honours once it takes volume mounts, as
NVIDIA's device plugin asks for its own.

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
from better_compute.kubernetes.provider import GpuNode
from better_compute.kubernetes.substrates.manifests import NAMESPACE, substrate_labels

__all__ = ["INSTALLER", "INSTALLER_IMAGE", "RUNTIME_CONFIG_DIR", "driver_installer", "gpu_access"]

INSTALLER = "nvidia-driver-installer"
INSTALLER_IMAGE = "cos-nvidia-installer:fixed"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
RUNTIME_CONFIG_DIR = "/etc/nvidia-container-runtime"
RUNTIME_CONFIG_MOUNT = "/host/etc/nvidia-container-runtime"


def gpu_access(objects: list[dict[str, Any]], gpu_node: GpuNode) -> list[dict[str, Any]]:
    """bcd's objects (`bcd_objects`) fitted to the node image, with the installer where the node has no NVIDIA
    runtime (see the docstring)."""
    by_kind = {o["kind"]: o for o in objects}
    config, daemon_set = by_kind["ConfigMap"], by_kind["DaemonSet"]
    if gpu_node.driver_dir is not None:
        config["data"]["BCD_HOST_DRIVER_DIR"] = gpu_node.driver_dir
        pool_id = daemon_set["metadata"]["labels"][SUBSTRATE_POOL_LABEL]
        return [*objects, driver_installer(pool_id, gpu_node.driver_dir)]
    config["data"]["BCD_NVIDIA_RUNTIME_CONFIG"] = f"{RUNTIME_CONFIG_MOUNT}/config.toml"
    spec = daemon_set["spec"]["template"]["spec"]
    spec["volumes"].append(
        {"name": "nvidia-runtime", "hostPath": {"path": RUNTIME_CONFIG_DIR, "type": "DirectoryOrCreate"}}
    )
    for container in spec["containers"]:
        container["volumeMounts"].append({"name": "nvidia-runtime", "mountPath": RUNTIME_CONFIG_MOUNT})
    # bcd's own NVML (both containers ask for every GPU by volume mount, which the runtime still takes once it
    # ignores unprivileged containers' NVIDIA_VISIBLE_DEVICES) is manifests._nvml's, not added a second time here
    return objects


def driver_installer(pool_id: str, driver_dir: str) -> dict[str, Any]:
    """The installer's DaemonSet for the substrate of `pool_id`, installing into the host's `driver_dir`."""
    labels = {**substrate_labels(pool_id), "app.kubernetes.io/name": INSTALLER}
    host = [("dev", "/dev"), ("nvidia-install-dir-host", driver_dir), ("root-mount", "/")]
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
                                {"name": "NVIDIA_INSTALL_DIR_HOST", "value": driver_dir},
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
