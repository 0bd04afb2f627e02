"""The spec's story on GKE, EKS and DOKS: apply, the cluster appears, bcd joins, book, scale, reclaim, prune."""

from __future__ import annotations

from typing import Any

import pytest
from e2e_world import World

from better_compute.core.errors import ComputeError

SUBSTRATE = "/pools/0/policy/substrate"
COARSE = 30.0
"""How often (simulated seconds) a wait with no time bound on what it waits for looks again (a look costs a step)."""


async def substrate(world: World) -> Any:
    return await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")


async def ready_and_joined(world: World, count: int) -> bool:
    try:
        view = await substrate(world)
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_listed) == count and len(view.nodes_joined) == count


SPOT_FLAVOR = {
    "gke": {
        "name": "spot",
        "machineType": "a3-highgpu-8g",
        "nodes": 1,
        "spot": True,
        "gpus": {"type": "nvidia-h100-80gb", "count": 8},
    },
    "eks": {
        "name": "spot",
        "machineType": "p5.48xlarge",
        "nodes": 1,
        "spot": True,
        "gpus": {"type": "nvidia-h100", "count": 8},
    },
    "doks": {
        "name": "spot",
        "machineType": "gpu-h100x8-640gb",
        "nodes": 1,
        "spot": True,
        "gpus": {"type": "nvidia-h100", "count": 8},
    },
}
PER_ZONE = {"gke": 1, "eks": 2, "doks": 1}
"""How many Nodes one `nodes` makes: GKE's example pins one zone, EKS' account has subnets in two."""


def with_spot(world: World, provider: str, h100_nodes: int) -> dict[str, Any]:
    document = world.document(provider)
    substrate = document["pools"][0]["policy"]["substrate"]
    substrate["flavors"][0]["nodes"] = h100_nodes
    substrate["flavors"].append(SPOT_FLAVOR[provider])
    if provider == "doks":
        document["providerAccounts"][0]["config"].update({"allowSpot": True, "previews": True})
    return document


async def reclaim_one_spot_node(world: World, provider: str) -> str:
    view = await substrate(world)
    records = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    (cluster,) = [c for c in records if c.id == (view.cluster.id if view.cluster else "")]
    spot_pool = next(p for p in cluster.node_pools if p.spot)
    spot_nodes = [n for n in view.nodes_joined if spot_pool.name in n or provider == "eks"]
    if provider == "gke":
        return await world.cloud.gke.reclaim_spot(cluster.location, cluster.name, spot_pool.name)
    if provider == "doks":
        return await world.cloud.doks.faults.reclaim_spot(cluster.provider_cluster_id or "")
    members = await world.compute.nodes.list(world.tenant_id)
    name = next(n.kubernetes_node_name for n in members if n.spot and n.kubernetes_node_name in spot_nodes)
    assert name is not None
    await world.cloud.eks.faults.reclaim_spot(name)
    return name


async def nothing_left(world: World, provider: str, provider_cluster_id: str) -> None:
    k = world.compute.module("kubernetes").context  # type: ignore[attr-defined]
    account, driver = await k.account(world.tenant_id, "managed-k8s")
    assert await driver.get_cluster(account, provider_cluster_id) is None, "the cluster is gone at the provider"
    assert await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id) == []
    assert await world.compute.nodes.list(world.tenant_id) == []
    assert [r for r in await world.compute.reservations.list(world.tenant_id) if r.state == "active"] == []


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_the_whole_story(world: World, provider: str) -> None:
    per_zone = PER_ZONE[provider]
    document = with_spot(world, provider, h100_nodes=2)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    on_demand, spot = 2 * per_zone, per_zone
    await world.until(
        lambda: ready_and_joined(world, on_demand + spot), minutes=90, what="every Node joined", every=COARSE
    )
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    members = await world.compute.nodes.list(world.tenant_id, pool_id=pool.id)
    assert sum(1 for n in members if n.spot) == spot, "a Spot flavor's nodes carry bc.dev/capacity=spot"
    conditions = (await substrate(world)).conditions  # each step's, as the last run (ready) left it
    assert [(c.name, c.status) for c in conditions] == [
        (name, "ok") for name in ("nodes", "shrink", "replace", "bcd", "join", "upgrade")
    ]
    assert next(c.message for c in conditions if c.name == "bcd") == "applied"

    # Book: the device plugin on the node advertises exactly the reservation's GPUs.
    booked = [await world.compute.reservations.create(world.tenant_id, pool.id, 8) for _ in range(on_demand)]
    preemptible = await world.compute.reservations.create(world.tenant_id, pool.id, 8, spot=True)
    for reservation in [*booked, preemptible]:
        node = await world.compute.nodes.get(world.tenant_id, reservation.node_id)
        held = sorted(d.uuid for d in node.devices if d.id in reservation.device_ids)
        kube = world.kube_cluster_of(node.kubernetes_node_name or "")

        async def advertised(kube: Any = kube, node: Any = node, held: list[str] = held) -> bool:
            return kube.kubelet.advertised(node.kubernetes_node_name) == held

        await world.until(advertised, minutes=5, what="the device plugin advertises the booked GPUs")
    spot_node = await world.compute.nodes.get(world.tenant_id, preemptible.node_id)
    assert spot_node.spot, "a spot reservation prefers a Spot node"
    for reservation in booked:
        assert not (await world.compute.nodes.get(world.tenant_id, reservation.node_id)).spot

    # A Spot reclaim at the provider preempts the spot reservation and retires its node.
    await reclaim_one_spot_node(world, provider)

    async def preempted() -> bool:
        return (await world.compute.reservations.get(world.tenant_id, preemptible.id)).state == "preempted"

    await world.until(preempted, minutes=10, what="the spot reservation is preempted", every=COARSE)
    assert (await world.compute.nodes.get(world.tenant_id, spot_node.id)).state == "retired"

    # Scale the on-demand flavor up, then down (after its bookings end).
    for reservation in booked:
        await world.compute.reservations.release(world.tenant_id, reservation.id)
    bigger = with_spot(world, provider, h100_nodes=3)
    await world.compute.fleet.apply(bigger, tenant_id=world.tenant_id)

    async def on_demand_nodes(count: int) -> bool:
        """Every listed Node joined, and `count` of them on-demand (a reclaimed Spot VM may come back or not)."""
        view = await substrate(world)
        live = [n for n in await world.compute.nodes.list(world.tenant_id, pool_id=pool.id) if not n.spot]
        return view.nodes_listed == view.nodes_joined and len(live) == count

    await world.until(lambda: on_demand_nodes(3 * per_zone), minutes=60, what="scaled up", every=COARSE)
    smaller = with_spot(world, provider, h100_nodes=1)
    await world.compute.fleet.apply(smaller, tenant_id=world.tenant_id)
    await world.until(
        lambda: on_demand_nodes(per_zone), minutes=60, what="scaled down: gone Nodes' nodes retired", every=COARSE
    )

    # Prune: nothing is left at the provider or in compute.
    view = await substrate(world)
    provider_cluster_id = view.cluster.provider_cluster_id if view.cluster else None
    assert provider_cluster_id is not None
    empty = {"version": 1, "sites": [], "providerAccounts": [], "pools": []}
    await world.compute.fleet.apply(empty, tenant_id=world.tenant_id, prune=True)

    async def deleted() -> bool:
        return (await world.compute.pools.list(world.tenant_id)) == []

    await world.until(deleted, minutes=120, what="the pool is archived", every=COARSE)
    await nothing_left(world, provider, provider_cluster_id)
