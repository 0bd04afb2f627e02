"""What GKE puts on a GPU node, against the emulator, and what the driver asks of it for the substrate.

GKE's own device plugin runs on GPU nodes unless their pool carries
`gke-no-default-nvidia-gpu-device-plugin=true`; the driver is installed by GKE (its plugin's pod)
for gpuDriverVersion DEFAULT or LATEST and not at all for INSTALLATION_DISABLED or no setting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gke_world import PROJECT, Gke
from test_gke_rules import ready_cluster, ready_pool

from better_compute.kubernetes.provider import Accelerators, NodePoolSpec
from better_compute.testing.gke.gpu_nodes import GKE_PLUGIN, NO_DEFAULT_PLUGIN_LABEL
from better_compute.testing.kube import KubeCluster
from better_compute.testing.kube.vendor_plugins import DRIVER_INSTALL_SECONDS


def gpu_pool(name: str, driver_version: str | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    accelerator: dict[str, Any] = {"acceleratorType": "nvidia-h100-80gb", "acceleratorCount": "8"}
    if driver_version is not None:
        accelerator["gpuDriverInstallationConfig"] = {"gpuDriverVersion": driver_version}
    config = {"machineType": "a3-highgpu-8g", "labels": labels or {}, "accelerators": [accelerator]}
    return {"nodePool": {"name": name, "initialNodeCount": 1, "config": config}}


async def node_of(gke: Gke, pool: str) -> tuple[KubeCluster, str]:
    kube = gke.emulator.kube_cluster("us-central1-a", "rules")
    await asyncio.sleep(0.01)  # the operation's task starts its wait on the clock
    await gke.advance(120)
    (node,) = kube.objects("Node", labels={"cloud.google.com/gke-nodepool": pool})
    return kube, node["metadata"]["name"]


async def advertised_after(gke: Gke, kube: KubeCluster, node: str, seconds: float) -> list[str]:
    await gke.advance(seconds)
    for _ in range(300):
        if kube.kubelet.advertised(node):
            break
        await asyncio.sleep(0.01)
    return kube.kubelet.advertised(node)


def plugin_pods(kube: KubeCluster, node: str) -> list[str]:
    pods = kube.objects("Pod", namespace="kube-system")
    return [
        p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node and GKE_PLUGIN in p["metadata"]["name"]
    ]


async def test_a_default_gpu_pool_gets_gkes_plugin_and_driver_and_every_gpu_is_advertised(gke: Gke) -> None:
    await ready_cluster(gke, "us-central1-a")
    gke.emulator.create_node_pool(PROJECT, "us-central1-a", "rules", gpu_pool("managed", "DEFAULT"))
    kube, node = await node_of(gke, "managed")
    labels = kube.objects("Node", labels={"cloud.google.com/gke-nodepool": "managed"})[0]["metadata"]["labels"]
    assert labels["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    taints = kube.objects("Node", labels={"cloud.google.com/gke-nodepool": "managed"})[0]["spec"]["taints"]
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in taints
    assert plugin_pods(kube, node), "GKE runs its plugin on the GPU node"
    assert await advertised_after(gke, kube, node, 0) == [], "no devices before the driver is installed"
    gpus = await advertised_after(gke, kube, node, DRIVER_INSTALL_SECONDS + 1)
    assert len(gpus) == 8 and kube.kubelet.registered(node) == "nvidiaGPU.sock"


async def test_a_pool_without_a_driver_setting_has_no_driver_and_the_label_keeps_gkes_plugin_off(gke: Gke) -> None:
    await ready_cluster(gke, "us-central1-a")
    gke.emulator.create_node_pool(PROJECT, "us-central1-a", "rules", gpu_pool("bare", None))
    kube, bare = await node_of(gke, "bare")
    assert plugin_pods(kube, bare)
    assert await advertised_after(gke, kube, bare, DRIVER_INSTALL_SECONDS + 1) == []
    assert kube.kubelet.gpus(bare) is not None and not kube.kubelet.gpus(bare).driver_ready  # type: ignore[union-attr]

    labelled = gpu_pool("labelled", "DEFAULT", {NO_DEFAULT_PLUGIN_LABEL: "true"})
    gke.emulator.create_node_pool(PROJECT, "us-central1-a", "rules", labelled)
    kube, node = await node_of(gke, "labelled")
    assert plugin_pods(kube, node) == []
    assert await advertised_after(gke, kube, node, DRIVER_INSTALL_SECONDS + 1) == []
    assert not kube.kubelet.gpus(node).driver_ready, "GKE's managed install runs in its plugin's pod"  # type: ignore[union-attr]


async def test_the_drivers_gpu_pools_keep_gkes_plugin_off_and_disable_its_driver_install(gke: Gke) -> None:
    cluster_id = await ready_cluster(gke, "us-central1-a")
    spec = NodePoolSpec("h100", "a3-highgpu-8g", 1, accelerators=Accelerators("nvidia-h100-80gb", 8))
    await ready_pool(gke, cluster_id, spec)
    pool = gke.emulator.cluster(PROJECT, "us-central1-a", "rules").node_pools["h100"].to_json()
    assert pool["config"]["labels"][NO_DEFAULT_PLUGIN_LABEL] == "true"
    assert pool["config"]["accelerators"][0]["gpuDriverInstallationConfig"] == {
        "gpuDriverVersion": "INSTALLATION_DISABLED"
    }
    kube, node = await node_of(gke, "h100")
    assert plugin_pods(kube, node) == []
