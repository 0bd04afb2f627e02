"""A machine whose GPU needs a reset is replaced at the provider (GKE, EKS, DOKS), never while booked.

The real bcd runs on every Node. A GPU of a booked Node falls off the bus (XID 79, NVML: lost):
bcd holds it `reset-needed`, the reservation is degraded and the Node is cordoned, but nothing is
force-released and nothing is replaced while the booking holds. Once it is released, the
substrate asks the provider to replace that one machine (GKE: recreateInstances; EKS: terminate
in the Auto Scaling group without lowering the desired size; DOKS: delete the node with
replacement), the old pool node is retired, the new machine's Node joins as a new node and takes
bookings, and the decision log says why. A pool of one node has its node replaced too.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import pytest
from adopt_world import ready_and_joined, sized, view
from e2e_world import World
from prometheus_client import REGISTRY

from better_compute.compute import Node
from better_compute.decisions import Filters, read

ACCOUNT = {"gke": "gcp", "eks": "aws", "doks": "digitalocean"}
"""The provider each world's account is of (the metric's label)."""
JOIN_EVERY = 30.0
"""How often a wait for Nodes to join looks (a world's, a new machine's): no bound is asserted on how long it took."""


async def live_nodes(world: World, pool_id: str) -> list[Node]:
    return [n for n in await world.compute.nodes.list(world.tenant_id, pool_id=pool_id) if n.state != "retired"]


async def lose_a_gpu(world: World, node: Node) -> str:
    """GPU 1 of the node falls off the bus; answers its UUID once the control plane holds it for a reset."""
    assert node.kubernetes_node_name is not None
    gpu = node.devices[1]
    world.kube_cluster_of(node.kubernetes_node_name).kubelet.gpu_fault(
        node.kubernetes_node_name, gpu.index, xid=79, lost=True
    )

    async def held() -> bool:
        devices = (await world.compute.nodes.get(world.tenant_id, node.id)).devices
        return next(d.health_state for d in devices if d.uuid == gpu.uuid) == "reset-needed"

    await world.until(held, minutes=2, what="the lost GPU held for a reset", every=1)
    return gpu.uuid


async def replaced(world: World, pool_id: str, old: Node, count: int) -> Node:
    """Step until the old node is retired and `count` Nodes are joined again; answers the new node."""
    before = {n.id for n in await live_nodes(world, pool_id)}

    async def done() -> bool:
        retired = (await world.compute.nodes.get(world.tenant_id, old.id)).state == "retired"
        return retired and await ready_and_joined(world, count)

    await world.until(done, minutes=30, what="the machine replaced and its new Node joined", every=JOIN_EVERY)
    (new,) = [n for n in await live_nodes(world, pool_id) if n.id not in before]
    return new


async def machine_replaced_events(world: World, pool_id: str) -> list[Any]:
    async with world.compute.db.session() as session:
        page = await read(
            session, tenant_id=world.tenant_id, filters=Filters(pool_id=pool_id, kind="node.machine-replaced")
        )
    return list(page.events)


def tenant_http(world: World, key: str) -> httpx.AsyncClient:
    """The tenant's HTTP client of the control plane (the API key's door)."""
    plane = world.cloud.control_plane
    return httpx.AsyncClient(
        base_url=plane.url,
        verify=ssl.create_default_context(cadata=plane.ca_pem),
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_booked_node_with_a_lost_gpu_is_replaced_once_its_booking_ends(world: World, provider: str) -> None:
    await world.compute.fleet.apply(sized(world.document(provider), provider, 2), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 2), minutes=60, what="2 Nodes joined", every=JOIN_EVERY)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 64)
    _, key = await world.compute.iam.create_api_key(world.tenant_id)
    async with tenant_http(world, key) as http:
        made = await http.post("/v1/reservations", json={"pool": "gpu-fleet", "gpus": 4})
    assert made.status_code == 201, made.text
    booking = await world.compute.reservations.get(world.tenant_id, made.json()["id"])
    sick = await world.compute.nodes.get(world.tenant_id, booking.node_id)
    lost = await lose_a_gpu(world, sick)
    async with tenant_http(world, key) as http:
        read = (await http.get(f"/v1/reservations/{booking.id}")).json()
    assert read["health"] == "degraded" and [g["uuid"] for g in read["degradedGpus"]] == [lost], read
    assert lost not in {d.uuid for d in (await world.compute.nodes.get(world.tenant_id, sick.id)).devices if d.healthy}

    async def waits() -> bool:
        return "waits to be replaced until its 1 booking(s) end" in ((await view(world)).message or "")

    await world.until(waits, minutes=5, what="the replacement waiting for the booking")
    (finding,) = [f for f in await world.compute.doctor() if f.code == "kubernetes.substrate-node-replacing"]
    assert sick.kubernetes_node_name in finding.message and lost in finding.message
    before = REGISTRY.get_sample_value("better_compute_substrate_replacements_total", {"provider": ACCOUNT[provider]})
    await world.step(600)
    assert (await world.compute.nodes.get(world.tenant_id, sick.id)).state == "cordoned", "no new booking lands"
    assert (await world.compute.reservations.get(world.tenant_id, booking.id)).state == "active", "none forced"
    assert await machine_replaced_events(world, pool.id) == [], "not replaced while booked"

    async with tenant_http(world, key) as http:
        assert (await http.post(f"/v1/reservations/{booking.id}/release")).status_code == 200
    new = await replaced(world, pool.id, sick, 2)
    after = REGISTRY.get_sample_value("better_compute_substrate_replacements_total", {"provider": ACCOUNT[provider]})
    assert (after or 0) == (before or 0) + 1, "counted once"
    assert "kubernetes.substrate-node-replacing" not in {f.code for f in await world.compute.doctor()}
    assert all(d.health_state == "healthy" for d in new.devices), "a new machine, new GPUs"
    (event,) = await machine_replaced_events(world, pool.id)
    assert event.node_id == sick.id and event.gpu_ids == (lost,)
    assert "(gpu-lost) needs a reset" in event.reason and "replaces its machine" in event.reason
    async with tenant_http(world, key) as http:
        both = [(await http.post("/v1/reservations", json={"pool": "gpu-fleet", "gpus": 8})).json() for _ in range(2)]
    assert {r["nodeId"] for r in both} == {n.id for n in await live_nodes(world, pool.id)}, "the new node books"


async def test_a_pool_of_one_node_has_its_node_replaced(world: World) -> None:
    await world.compute.fleet.apply(sized(world.document("doks"), "doks", 1), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 1), minutes=60, what="the Node joined", every=JOIN_EVERY)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    (only,) = await live_nodes(world, pool.id)
    await lose_a_gpu(world, only)
    new = await replaced(world, pool.id, only, 1)
    assert new.kubernetes_node_name != only.kubernetes_node_name, "DOKS: a new droplet, a new Node"
    assert len(await machine_replaced_events(world, pool.id)) == 1


async def test_a_gpu_reset_before_the_booking_ends_keeps_the_machine(world: World) -> None:
    await world.compute.fleet.apply(sized(world.document("doks"), "doks", 2), tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 2), minutes=60, what="2 Nodes joined", every=JOIN_EVERY)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 64)
    booking = await world.compute.reservations.create(world.tenant_id, pool.id, 4)
    sick = await world.compute.nodes.get(world.tenant_id, booking.node_id)
    assert sick.kubernetes_node_name is not None
    await lose_a_gpu(world, sick)

    async def cordoned() -> bool:
        return (await world.compute.nodes.get(world.tenant_id, sick.id)).state == "cordoned"

    await world.until(cordoned, minutes=5, what="the failing Node cordoned")
    world.kube_cluster_of(sick.kubernetes_node_name).kubelet.clear_gpu_fault(sick.kubernetes_node_name, 1)

    async def kept() -> bool:
        return (await world.compute.nodes.get(world.tenant_id, sick.id)).state == "ready"

    await world.until(kept, minutes=5, what="the reset Node uncordoned")
    node = world.kube_cluster_of(sick.kubernetes_node_name).get_object("Node", sick.kubernetes_node_name)
    assert node is not None and not (node.get("spec") or {}).get("unschedulable")
    await world.compute.reservations.release(world.tenant_id, booking.id)
    await world.step(900)
    assert (await world.compute.nodes.get(world.tenant_id, sick.id)).state == "ready", "its machine stays"
    assert await machine_replaced_events(world, pool.id) == []
