"""bcd is the only way to a GPU on a substrate's node, on GKE, EKS and DOKS as they build GPU nodes.

Through the public doors (a FleetConfig document, then a reservation), with the real bcd in every
Node's pod: a tenant pod holding the reservation's GPUs sees exactly those; a pod without a GPU
request sees none, and so does one that sets NVIDIA_VISIBLE_DEVICES=all itself (as CUDA images do);
the provider's own device plugin does not run on the substrate's nodes (testing/kube/gpus.py
models what each provider's node gives a container). A device plugin an operator starts by hand
next to bcd holds its Node out of booking, and doctor names it.
"""

from __future__ import annotations

from typing import Any

import pytest
from e2e_world import World

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.testing import KubeCluster
from better_compute.testing.doks.gpu_nodes import PLUGIN_DAEMONSET, PLUGIN_NAMESPACE
from better_compute.testing.gke.gpu_nodes import GKE_PLUGIN
from better_compute.testing.kube.vendor_plugins import host_plugin

PROVIDERS = ["gke", "eks", "doks"]
NODES = {"gke": 2, "eks": 4, "doks": 2}
"""The examples' Nodes: GKE's pins one zone, EKS' account has subnets in two zones."""
JOIN_EVERY = 30.0
"""How often a world being built looks whether its Nodes joined: no bound is asserted on how long it took."""


async def joined(world: World, count: int) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


async def up(world: World, provider: str) -> Any:
    await world.compute.fleet.apply(world.document(provider), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, NODES[provider]), minutes=60, what="every Node joined", every=JOIN_EVERY)
    return await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")


def tenant_pod(kube: KubeCluster, node: str, name: str, *, gpus: int = 0, env: dict[str, str] | None = None) -> None:
    """What a tenant's kubectl apply makes: a CUDA container on `node`, asking for `gpus`."""
    container: dict[str, Any] = {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec = {"nodeName": node, "containers": [container], "tolerations": [{"operator": "Exists"}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}
    kube.ops.create(kube.resource("v1", "Pod"), "default", pod, manager="tenant")
    kube.settle()


async def seen(world: World, kube: KubeCluster, name: str) -> tuple[str, ...]:
    async def started() -> bool:
        return kube.kubelet.gpus_seen("default", name, "cuda") is not None

    await world.until(started, minutes=2, what=f"pod {name} started", every=1)
    gpus = kube.kubelet.gpus_seen("default", name, "cuda")
    assert gpus is not None
    return gpus


def provider_plugin_pods(kube: KubeCluster, nodes: list[str]) -> list[str]:
    pods = kube.objects("Pod", namespace="kube-system") + kube.objects("Pod", namespace=PLUGIN_NAMESPACE)
    return [
        p["metadata"]["name"]
        for p in pods
        if GKE_PLUGIN in p["metadata"]["name"] or PLUGIN_DAEMONSET in p["metadata"]["name"]
        if p["spec"].get("nodeName") in nodes
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_tenant_pod_sees_exactly_its_reservations_gpus_and_no_other_pod_sees_any(
    world: World, provider: str
) -> None:
    pool = await up(world, provider)
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 2)
    node = await world.compute.nodes.get(world.tenant_id, reservation.node_id)
    held = tuple(sorted(d.uuid for d in node.devices if d.id in reservation.device_ids))
    name = node.kubernetes_node_name
    assert name is not None and len(held) == 2
    kube = world.kube_cluster_of(name)

    listed = [n.kubernetes_node_name or "" for n in await world.compute.nodes.list(world.tenant_id)]
    assert provider_plugin_pods(kube, listed) == [], "the provider's own device plugin is off the substrate's nodes"
    assert {kube.kubelet.registered(n) for n in listed} == {"bcd.sock"}, "bcd alone registers nvidia.com/gpu"
    assert all(kube.kubelet.host_plugins(n) == [] for n in listed), "the node image runs no plugin of its own"

    async def advertised() -> bool:
        return tuple(kube.kubelet.advertised(name)) == held

    await world.until(advertised, minutes=5, what="bcd advertises the reservation's GPUs")

    tenant_pod(kube, name, "booked", gpus=2)
    assert tuple(sorted(await seen(world, kube, "booked"))) == held
    tenant_pod(kube, name, "plain")
    assert await seen(world, kube, "plain") == ()
    tenant_pod(kube, name, "sneaky", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert await seen(world, kube, "sneaky") == (), "a container's own NVIDIA_VISIBLE_DEVICES gives it nothing"


async def test_a_device_plugin_started_by_hand_holds_its_node_out_of_booking_and_doctor_names_it(world: World) -> None:
    pool = await up(world, "doks")
    first = await world.compute.nodes.list(world.tenant_id)
    rogue = first[0].kubernetes_node_name or ""
    kube = world.kube_cluster_of(rogue)
    # an operator runs NVIDIA's plugin on one Node by hand, next to bcd
    started = kube.kubelet.start_host_plugin(
        rogue, lambda: host_plugin(kube.kubelet, rogue, "envvar", "nvidia-gpu.sock")
    )

    async def reported() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=pool.id)
        return view.competing_device_plugins == {rogue: ("nvidia-gpu.sock",)}

    await world.until(reported, minutes=5, what="bcd reports the other plugin")
    findings = [f for f in await world.compute.doctor() if f.code == "kubernetes.substrate-competing-device-plugin"]
    assert len(findings) == 1 and rogue in findings[0].message and "nvidia-gpu.sock" in findings[0].message

    # every booking lands on the other Node, and once it is full there is no room at all
    other = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert (await world.compute.nodes.get(world.tenant_id, other.node_id)).kubernetes_node_name != rogue
    with pytest.raises(ComputeError) as refused:
        await world.compute.reservations.create(world.tenant_id, pool.id, 1)
    assert (refused.value.code, refused.value.reason) == (ErrorCode.UNAVAILABLE, "no-capacity")

    # once the operator stops it, bcd registers again: the kubelet keeps a gone plugin's devices, unhealthy, until then
    assert kube.kubelet.registered(rogue) == "nvidia-gpu.sock"
    started.cancel()

    async def taken_back() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=pool.id)
        return view.competing_device_plugins == {} and kube.kubelet.registered(rogue) == "bcd.sock"

    await world.until(taken_back, minutes=5, what="bcd registers again")
    booked = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert (await world.compute.nodes.get(world.tenant_id, booked.node_id)).kubernetes_node_name == rogue


async def test_a_plugin_that_replaces_bcds_registration_is_reported_and_bcd_takes_the_gpus_back_once_it_goes(
    world: World,
) -> None:
    """A plugin registering bcd's resource from a socket of its own directory (the kubelet dials
    <device-plugin dir>/<endpoint>) is no socket next to bcd's: bcd learns of it only because the kubelet
    closed bcd's ListAndWatch stream (the newest registration wins). Once it stops, bcd registers again."""
    pool = await up(world, "doks")
    first = await world.compute.nodes.list(world.tenant_id)
    rogue = first[0].kubernetes_node_name or ""
    kube = world.kube_cluster_of(rogue)
    assert kube.kubelet.registered(rogue) == "bcd.sock"
    started = kube.kubelet.start_host_plugin(
        rogue, lambda: host_plugin(kube.kubelet, rogue, "envvar", "vendor/nvidia-gpu.sock")
    )

    async def reported(plugins: dict[str, tuple[str, ...]]) -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id=pool.id)
        return view.competing_device_plugins == plugins

    await world.until(lambda: reported({rogue: ("vendor/nvidia-gpu.sock",)}), minutes=5, what="bcd reports it")
    assert kube.kubelet.registered(rogue) == "vendor/nvidia-gpu.sock", "the newest registration won"
    findings = [f for f in await world.compute.doctor() if f.code == "kubernetes.substrate-competing-device-plugin"]
    assert len(findings) == 1 and rogue in findings[0].message and "vendor/nvidia-gpu.sock" in findings[0].message
    other = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert (await world.compute.nodes.get(world.tenant_id, other.node_id)).kubernetes_node_name != rogue
    with pytest.raises(ComputeError) as refused:
        await world.compute.reservations.create(world.tenant_id, pool.id, 1)
    assert (refused.value.code, refused.value.reason) == (ErrorCode.UNAVAILABLE, "no-capacity")

    # the operator stops it: bcd registers again, the report clears, and the Node books and hands out its GPUs
    started.cancel()
    await world.until(lambda: reported({}), minutes=5, what="the report clears")
    assert kube.kubelet.registered(rogue) == "bcd.sock", "bcd took its resource back"
    booked = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    assert (await world.compute.nodes.get(world.tenant_id, booked.node_id)).kubernetes_node_name == rogue

    async def advertised() -> bool:
        return len(kube.kubelet.advertised(rogue)) == 8

    await world.until(advertised, minutes=2, what="bcd advertises the booked GPUs", every=1)
    tenant_pod(kube, rogue, "booked", gpus=8)
    assert len(await seen(world, kube, "booked")) == 8
