"""A pool node is one machine: a Node re-created under its name (GKE recreates a preempted Spot VM so) is a new node."""

from __future__ import annotations

from typing import Any

from e2e_world import World

from better_compute.core.errors import ComputeError

COARSE = 30.0
"""How often (simulated seconds) a wait with no time bound on what it waits for looks again (a look costs a step)."""

SPOT = {
    "name": "spot",
    "machineType": "a3-highgpu-8g",
    "nodes": 1,
    "spot": True,
    "gpus": {"type": "nvidia-h100-80gb", "count": 8},
}


async def substrate(world: World) -> Any:
    return await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")


async def joined(world: World, count: int) -> bool:
    try:
        view = await substrate(world)
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


async def test_a_spot_vm_recreated_under_its_name_preempts_the_old_nodes_reservation(world: World) -> None:
    document = world.document("gke")
    document["pools"][0]["policy"]["substrate"]["flavors"] = [SPOT]
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 1), minutes=60, what="the Spot Node joined", every=COARSE)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 16)
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8, spot=True)
    old = await world.compute.nodes.get(world.tenant_id, reservation.node_id)
    (cluster,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    (node_pool,) = cluster.node_pools
    kube = world.kube_cluster_of(old.kubernetes_node_name or "")
    uid = kube.get_object("Node", old.kubernetes_node_name or "")["metadata"]["uid"]  # type: ignore[index]

    name = await world.cloud.gke.reclaim_spot(cluster.location, cluster.name, node_pool.name, recreate=True)
    assert name == old.kubernetes_node_name
    assert kube.get_object("Node", name)["metadata"]["uid"] != uid  # type: ignore[index]

    async def preempted() -> bool:
        return (await world.compute.reservations.get(world.tenant_id, reservation.id)).state == "preempted"

    await world.until(preempted, minutes=15, what="the old node's reservation preempted", every=COARSE)

    async def a_new_node_joined() -> bool:
        live = [n for n in await world.compute.nodes.list(world.tenant_id, pool_id=pool.id) if n.state != "retired"]
        return len(live) == 1 and live[0].id != old.id and live[0].connected and await joined(world, 1)

    await world.until(a_new_node_joined, minutes=30, what="the recreated VM joined as a new node", every=COARSE)
    assert (await world.compute.nodes.get(world.tenant_id, old.id)).state == "retired"
    await world.step(300)  # more runs: nothing refunds twice
    assert (await world.compute.quotas.usage(world.tenant_id, "H100"))[0].used == 0
    again = await world.compute.reservations.create(world.tenant_id, pool.id, 8, spot=True)
    assert again.state == "active" and again.node_id != old.id


async def test_a_recreated_node_that_has_not_joined_yet_is_waiting_from_its_recreation(world: World) -> None:
    """Its bcd cannot start (the image pull fails): the old node is still taken for gone, and the
    15-minute warning counts from the new Node, not from the old one's first sight."""
    document = world.document("gke")
    document["pools"][0]["policy"]["substrate"]["flavors"] = [SPOT]
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 1), minutes=60, what="the Spot Node joined", every=COARSE)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    reservation = await world.compute.reservations.create(world.tenant_id, pool.id, 8, spot=True)
    (cluster,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    (node_pool,) = cluster.node_pools
    old = await world.compute.nodes.get(world.tenant_id, reservation.node_id)
    await world.step(20 * 60)  # the Node has been known for long past the warning's 15 minutes
    world.kube_cluster_of(old.kubernetes_node_name or "").kubelet.image_pull_failures.add("*/bcd:*")
    recreated_at = world.cloud.clock.now()
    await world.cloud.gke.reclaim_spot(cluster.location, cluster.name, node_pool.name, recreate=True)

    async def preempted() -> bool:
        return (await world.compute.reservations.get(world.tenant_id, reservation.id)).state == "preempted"

    await world.step(130)  # two runs have listed the new Node
    view = await substrate(world)
    assert view.waiting_to_join.count == 1
    assert view.waiting_to_join.since is not None and view.waiting_to_join.since >= recreated_at
    assert "kubernetes.substrate-nodes-not-joining" not in {f.code for f in await world.compute.doctor()}
    await world.until(preempted, minutes=5, what="the old node's reservation preempted", every=COARSE)
    assert (await world.compute.nodes.get(world.tenant_id, old.id)).state == "retired"
