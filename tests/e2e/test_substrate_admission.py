"""bcd's pods are admitted where the providers' API servers refuse most DaemonSets: GKE's limit on the
critical priority classes, and a cluster whose namespaces default to Pod Security baseline or restricted.
Through the public door: a FleetConfig document, then every Node joins."""

from __future__ import annotations

from typing import Any

import pytest
from e2e_world import World

from better_compute.core.errors import ComputeError
from better_compute.kubernetes.substrates.manifests import CRITICAL_QUOTA, DAEMON_SET, NAMESPACE
from better_compute.testing import KubeCluster

COARSE = 30.0
"""How often (simulated seconds) a wait with no time bound on what it waits for looks again (a look costs a step)."""


async def _joined(world: World, count: int) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


def _kube(world: World) -> KubeCluster:
    (cluster,) = world.cloud.kube.clusters.values()
    return cluster


def _refusals(cluster: KubeCluster) -> list[str]:
    return [e["message"] for e in cluster.objects("Event", NAMESPACE) if e["reason"] == "FailedCreate"]


def _bcd_pods(cluster: KubeCluster) -> list[dict[str, Any]]:
    return [p for p in cluster.objects("Pod", NAMESPACE) if p["metadata"]["name"].startswith(f"{DAEMON_SET}-")]


async def test_on_gke_bcd_runs_at_system_node_critical_under_its_own_quota_and_every_node_joins(
    world: World,
) -> None:
    await world.compute.fleet.apply(world.document("gke"), tenant_id=world.tenant_id)
    await world.until(lambda: _joined(world, 2), minutes=60, what="every GKE Node joined", every=COARSE)
    cluster = _kube(world)
    assert cluster.get_object("ResourceQuota", "gcp-critical-pods", "kube-system") is not None
    assert _refusals(cluster) == []
    quota = cluster.get_object("ResourceQuota", CRITICAL_QUOTA, NAMESPACE)
    critical = [
        p for p in cluster.objects("Pod", NAMESPACE) if p["spec"]["priorityClassName"] == "system-node-critical"
    ]
    assert len(critical) == 4, "bcd and GKE's driver installer on each of the 2 Nodes"
    assert quota is not None and quota["status"]["used"] == {"pods": "4"}
    pods = _bcd_pods(cluster)
    assert len(pods) == 2 and all(p["spec"]["priorityClassName"] == "system-node-critical" for p in pods)
    assert all(p["status"]["phase"] == "Running" for p in pods)
    volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in pods[0]["spec"]["volumes"]}
    for container in (*pods[0]["spec"]["initContainers"], *pods[0]["spec"]["containers"]):
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
        assert volumes[mounts["/usr/local/nvidia"]] == "/home/kubernetes/bin/nvidia"
        assert volumes[mounts["/dev"]] == "/dev"


@pytest.mark.parametrize("level", ["baseline", "restricted"])
async def test_a_cluster_whose_namespaces_default_to_a_hardened_level_admits_bcd_and_every_node_joins(
    world: World, level: str
) -> None:
    world.cloud.kube.pod_security_default = level
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(
        lambda: _joined(world, 2), minutes=60, what=f"every Node joined on a {level} cluster", every=COARSE
    )
    cluster = _kube(world)
    namespace = cluster.get_object("Namespace", NAMESPACE)
    assert namespace is not None
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert _refusals(cluster) == []
    (pod, *_) = _bcd_pods(cluster)
    (bcd,) = pod["spec"]["containers"]
    (join,) = pod["spec"]["initContainers"]
    for container in (bcd, join):
        context = container["securityContext"]
        assert context == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    for container in (bcd, join):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "utility")
    assert not any(pod["spec"].get(h) for h in ("hostNetwork", "hostPID", "hostIPC"))
