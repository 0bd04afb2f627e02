"""bcd's own containers keep reaching NVML after bcd has made the node's NVIDIA runtime ignore
unprivileged containers' NVIDIA_VISIBLE_DEVICES (the next pod, a restart), on the node model of testing/kube/gpus.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from better_compute.bcd.runtime_config import refuse_unprivileged_env
from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.kubernetes.substrates.gpu_driver import gpu_access
from better_compute.kubernetes.substrates.manifests import bcd_objects
from better_compute.providers.aws.vocabulary import VOCABULARY as EKS
from better_compute.providers.digitalocean.vocabulary import VOCABULARY as DOKS
from better_compute.providers.gcp.vocabulary import VOCABULARY as GKE
from better_compute.testing.kube.allocation import host_mounts
from better_compute.testing.kube.gpus import (
    AL2023_NVIDIA,
    RUNTIME_CONFIG,
    ContainerDevices,
    NodeGpus,
    runtime_config_text,
    visible_gpus,
)

AGENT = SubstrateAgent(
    image="ghcr.io/better-compute/bcd:dev",
    gateway_url="wss://gw.example:8443",
    control_plane_url="https://cp.example",
    pins=("sha256/" + "A" * 43 + "=",),
)


def bcd_sees(pod: dict[str, Any], name: str, host: Path) -> int:
    containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    container = next(c for c in containers if c["name"] == name)
    asked = ContainerDevices(mounts=host_mounts(pod, container), env={"NVIDIA_VISIBLE_DEVICES": "all"})
    return len(visible_gpus(NodeGpus(8, "H100", AL2023_NVIDIA), "ip-10-0-0-1.ec2.internal", host, asked))


def test_bcds_containers_still_see_every_gpu_once_the_runtime_takes_only_volume_mounts(tmp_path: Path) -> None:
    config = tmp_path / RUNTIME_CONFIG
    config.parent.mkdir(parents=True)
    config.write_text(runtime_config_text(AL2023_NVIDIA))
    objects = gpu_access(bcd_objects("pool_1", AGENT, EKS.gpu_node), EKS.gpu_node)
    (daemon_set,) = [o for o in objects if o["kind"] == "DaemonSet"]
    pod = {"metadata": {"name": "bcd-x"}, "spec": daemon_set["spec"]["template"]["spec"]}
    names = [c["name"] for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]]
    assert all(bcd_sees(pod, name, tmp_path) == 8 for name in names)
    assert refuse_unprivileged_env(config)
    assert all(bcd_sees(pod, name, tmp_path) == 8 for name in names), "bcd's next start still reaches NVML"


def test_one_description_of_the_gpu_node_decides_the_driver_installer_and_bcds_way_to_the_gpus() -> None:
    """GKE's GpuNode (a host driver directory, no NVIDIA runtime) alone brings the COS driver installer and
    Allocate's driver mount; EKS's and DOKS' (NVIDIA's runtime) bring the runtime's config instead."""
    assert not hasattr(GKE, "gpu_runtime"), "the vocabulary has one description of the GPU node: gpu_node"
    for vocabulary in (GKE, EKS, DOKS):
        node = vocabulary.gpu_node
        objects = gpu_access(bcd_objects("pool_1", AGENT, node), node)
        (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
        daemon_sets = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "DaemonSet")
        if vocabulary is GKE:
            assert not node.nvidia_runtime
            assert config["data"]["BCD_HOST_DRIVER_DIR"] == node.driver_dir == "/home/kubernetes/bin/nvidia"
            assert "BCD_NVIDIA_RUNTIME_CONFIG" not in config["data"]
            assert daemon_sets == ["bcd", "nvidia-driver-installer"]
        else:
            assert node.nvidia_runtime
            assert "BCD_HOST_DRIVER_DIR" not in config["data"]
            assert config["data"]["BCD_NVIDIA_RUNTIME_CONFIG"].endswith("/config.toml")
            assert daemon_sets == ["bcd"]


def test_no_two_mounts_of_a_container_share_a_path_nor_two_volumes_a_name() -> None:
    """The API server refuses a pod template whose container mounts one path twice, or that names a volume
    twice (`must be unique`, kubernetes pkg/apis/core/validation); and a server-side apply keys volumeMounts
    by mountPath, so two at one path are one there and the DaemonSet never matches what the substrate applies
    (substrates/applied.py): it would be written on every run."""
    for vocabulary in (GKE, EKS, DOKS):
        objects = gpu_access(bcd_objects("pool_1", AGENT, vocabulary.gpu_node), vocabulary.gpu_node)
        for daemon_set in (o for o in objects if o["kind"] == "DaemonSet"):
            spec = daemon_set["spec"]["template"]["spec"]
            volumes = [v["name"] for v in spec["volumes"]]
            assert len(volumes) == len(set(volumes)), volumes
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
                assert len(paths) == len(set(paths)), (vocabulary, container["name"], paths)
                assert {m["name"] for m in container.get("volumeMounts", [])} <= set(volumes)
