"""A GPU node gives a container the GPUs its runtime would: through a plugin's Allocate, in the form
that runtime takes, and through the container's own NVIDIA_VISIBLE_DEVICES where the runtime honours it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from better_compute.testing.kube import KubeCluster
from better_compute.testing.kube.gpus import (
    AL2023_NVIDIA,
    BOTTLEROCKET_NVIDIA,
    COS,
    DOKS_NVIDIA,
    ENVVAR_WHEN_UNPRIVILEGED,
    RUNTIME_CONFIG,
    GpuRuntime,
    NodeGpus,
)
from better_compute.testing.kube.vendor_plugins import Form, host_plugin

RUNTIMES = {"cos": COS, "al2023": AL2023_NVIDIA, "bottlerocket": BOTTLEROCKET_NVIDIA, "doks": DOKS_NVIDIA}


async def gpu_node(cluster: KubeCluster, name: str, runtime: GpuRuntime, form: Form | None) -> list[str]:
    """A node with 4 GPUs and, unless `form` is None, a provider's plugin answering in `form`; its GPU UUIDs."""
    gpus = NodeGpus(count=4, model="H100", runtime=runtime)
    await cluster.kubelet.add_node(name, gpus=gpus)
    if form is not None:
        cluster.kubelet.start_host_plugin(name, lambda: host_plugin(cluster.kubelet, name, form, "vendor.sock"))
        for _ in range(500):
            if len(cluster.kubelet.advertised(name)) == 4:
                break
            await asyncio.sleep(0.01)
        assert len(cluster.kubelet.advertised(name)) == 4
    return gpus.uuids(name)


async def started(
    cluster: KubeCluster, node: str, name: str, *, gpus: int = 0, env: dict[str, str] | None = None
) -> tuple[str, ...] | None:
    """Bind a pod to `node` and return the GPUs its container was started with (None: it did not start)."""
    container: dict[str, Any] = {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    pod = {"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node, "containers": [container]}}
    cluster.ops.create(cluster.resource("v1", "Pod"), "default", pod, manager="test")
    cluster.settle()
    for _ in range(500):
        seen = cluster.kubelet.gpus_seen("default", name, "cuda")
        phase = (cluster.get_object("Pod", name, "default") or {}).get("status", {}).get("phase")
        if seen is not None or phase == "Failed":
            return seen
        await asyncio.sleep(0.01)
    raise AssertionError(f"pod {name} neither started nor failed")


@pytest.mark.parametrize(
    ("runtime", "form", "sees"),
    [
        ("cos", "device-specs", 2),
        ("cos", "envvar", 0),  # Container-Optimized OS has no NVIDIA runtime: the variable does nothing
        ("al2023", "envvar", 2),
        ("doks", "envvar", 2),
        ("bottlerocket", "envvar", 0),  # Bottlerocket ignores the variable from unprivileged containers
        ("bottlerocket", "volume-mounts", 2),
    ],
)
async def test_a_container_gets_its_allocated_gpus_only_in_the_form_its_nodes_runtime_takes(
    cluster: KubeCluster, runtime: str, form: Form, sees: int
) -> None:
    uuids = await gpu_node(cluster, "gpu-1", RUNTIMES[runtime], form)
    seen = await started(cluster, "gpu-1", "train", gpus=2)
    assert seen is not None and len(seen) == sees
    assert set(seen) <= set(uuids)
    second = await started(cluster, "gpu-1", "train-2", gpus=2)
    assert second is not None and not set(second) & set(seen), "two pods never share a device"


@pytest.mark.parametrize(("runtime", "sees"), [("al2023", 4), ("doks", 4), ("bottlerocket", 0), ("cos", 0)])
async def test_a_container_that_sets_nvidia_visible_devices_itself_sees_what_its_runtime_lets_it(
    cluster: KubeCluster, runtime: str, sees: int
) -> None:
    await gpu_node(cluster, "gpu-1", RUNTIMES[runtime], None)
    seen = await started(cluster, "gpu-1", "sneaky", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert seen is not None and len(seen) == sees


async def test_the_runtime_reads_its_config_at_each_container_start(cluster: KubeCluster) -> None:
    await gpu_node(cluster, "gpu-1", AL2023_NVIDIA, None)
    assert await started(cluster, "gpu-1", "before", env={"NVIDIA_VISIBLE_DEVICES": "all"}) != ()
    config = cluster.kubelet.host_root("gpu-1") / RUNTIME_CONFIG
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"{ENVVAR_WHEN_UNPRIVILEGED} = false\n")
    assert await started(cluster, "gpu-1", "after", env={"NVIDIA_VISIBLE_DEVICES": "all"}) == ()


async def test_a_node_without_its_driver_has_no_gpu_devices_until_it_is_loaded(cluster: KubeCluster) -> None:
    gpus = NodeGpus(count=4, model="H100", runtime=COS, driver_ready=False)
    await cluster.kubelet.add_node("gpu-1", gpus=gpus)
    cluster.kubelet.start_host_plugin("gpu-1", lambda: host_plugin(cluster.kubelet, "gpu-1", "device-specs", "v.sock"))
    await asyncio.sleep(0.2)
    assert cluster.kubelet.advertised("gpu-1") == []
    cluster.kubelet.install_driver("gpu-1")
    for _ in range(500):
        if len(cluster.kubelet.advertised("gpu-1")) == 4:
            break
        await asyncio.sleep(0.01)
    assert cluster.kubelet.advertised("gpu-1") == sorted(gpus.uuids("gpu-1"))


async def test_asking_for_more_gpus_than_are_free_or_advertised_fails_the_pod_as_the_kubelet_does(
    cluster: KubeCluster,
) -> None:
    await gpu_node(cluster, "gpu-1", AL2023_NVIDIA, "envvar")
    assert await started(cluster, "gpu-1", "big", gpus=5) is None
    pod = cluster.get_object("Pod", "big", "default")
    assert pod is not None and pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "UnexpectedAdmissionError"
    assert "Requested: 5, Available: 4" in pod["status"]["message"]
    await gpu_node(cluster, "gpu-2", AL2023_NVIDIA, None)
    assert await started(cluster, "gpu-2", "nowhere", gpus=1) is None
    pod = cluster.get_object("Pod", "nowhere", "default")
    assert pod is not None and pod["status"]["reason"] == "OutOfnvidia.com/gpu"


async def test_the_newest_registration_for_a_resource_wins(cluster: KubeCluster) -> None:
    await gpu_node(cluster, "gpu-1", COS, "envvar")
    assert cluster.kubelet.registered("gpu-1") == "vendor.sock"
    assert await started(cluster, "gpu-1", "before", gpus=1) == ()  # the envvar answer gives nothing on COS
    cluster.kubelet.start_host_plugin(
        "gpu-1", lambda: host_plugin(cluster.kubelet, "gpu-1", "device-specs", "new.sock")
    )
    for _ in range(500):
        if cluster.kubelet.registered("gpu-1") == "new.sock" and len(cluster.kubelet.advertised("gpu-1")) == 4:
            break
        await asyncio.sleep(0.01)
    assert cluster.kubelet.registered("gpu-1") == "new.sock"
    seen = await started(cluster, "gpu-1", "after", gpus=1)
    assert seen is not None and len(seen) == 1, "the newer plugin's Allocate answers now"
