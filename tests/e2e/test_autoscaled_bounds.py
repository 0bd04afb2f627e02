"""An autoscaled flavor: changing its bounds writes only the bounds, never the autoscaler's count (GKE, EKS, DOKS).

The autoscaler (played at each emulator) holds a count that is not what better-compute last asked for; raising
`maxNodes` keeps that count and every Node, and lowering it below the count moves the count to the new bound
(the provider's own rule) with the substrate still ready.
"""

from __future__ import annotations

from typing import Any

import pytest
from e2e_world import World

from better_compute.core.errors import ComputeError
from better_compute.kubernetes.clusters.records import ClusterRecord

ZONES = {"gke": 1, "eks": 2, "doks": 1}
"""GKE's example pins one zone; the EKS account's subnets span two, and each `nodes` counts per zone there."""
BUSY = {"gke": 2, "eks": 3, "doks": 2}
"""The count the autoscaler moves to: on EKS an odd total, which no per-zone count of ours would write."""


STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): provisioning and the bounds written, whose checks are the end state."""


def document(world: World, provider: str, max_nodes: int, min_nodes: int = 1) -> dict[str, Any]:
    doc = world.document(provider)
    flavor = doc["pools"][0]["policy"]["substrate"]["flavors"][0]
    flavor.update({"nodes": 1, "autoscaling": {"minNodes": min_nodes, "maxNodes": max_nodes}})
    return doc


async def cluster(world: World) -> ClusterRecord:
    (record,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    return record


async def at_provider(world: World, provider: str) -> tuple[int, int, int]:
    """The node pool's (min, max, count) in total, as the provider holds them."""
    record = await cluster(world)
    (pool,) = record.node_pools
    if provider == "eks":
        found = world.cloud.eks.cluster(record.name, record.location)
        assert found is not None
        group = found.nodegroups[pool.name]
        return group.min_size, group.max_size, group.desired_size
    if provider == "gke":
        (gke,) = [c for c in world.cloud.gke.clusters.values() if c.name == record.name]
        node_pool = gke.node_pools[pool.name]
        bounds = node_pool.autoscaling or {}
        zones = len(node_pool.locations)
        low, high = int(bounds.get("minNodeCount", 0)), int(bounds.get("maxNodeCount", 0))
        return low * zones, high * zones, sum(node_pool.targets.values())
    (doks,) = [p for p in world.cloud.doks.clusters[record.provider_cluster_id or ""].pools if p.name == pool.name]
    return doks.min_nodes, doks.max_nodes, doks.count


async def autoscale(world: World, provider: str, total: int) -> None:
    record = await cluster(world)
    (pool,) = record.node_pools
    if provider == "eks":
        await world.cloud.eks.autoscale(record.name, pool.name, total, region=record.location)
    elif provider == "gke":
        await world.cloud.gke.autoscale(record.location, record.name, pool.name, total)
    else:
        await world.cloud.doks.autoscale(record.provider_cluster_id or "", pool.name, total)


async def joined(world: World, count: int) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


async def settled(world: World, provider: str, bounds: tuple[int, int]) -> bool:
    (pool,) = (await cluster(world)).node_pools
    return pool.status == "ready" and (await at_provider(world, provider))[:2] == bounds


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_changing_the_bounds_keeps_the_autoscalers_count(world: World, provider: str) -> None:
    zones = ZONES[provider]
    await world.compute.fleet.apply(document(world, provider, 2), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, zones), minutes=60, what="the first Nodes joined", every=STEP)
    busy = BUSY[provider]
    await autoscale(world, provider, busy)
    await world.until(lambda: joined(world, busy), minutes=60, what="the autoscaled Nodes joined", every=STEP)
    view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    nodes = set(view.nodes_listed)

    await world.compute.fleet.apply(document(world, provider, 3), tenant_id=world.tenant_id)
    await world.until(
        lambda: settled(world, provider, (zones, 3 * zones)), minutes=30, what="maxNodes raised", every=STEP
    )
    await world.step(300)  # more runs: none of them writes the count
    assert (await at_provider(world, provider)) == (zones, 3 * zones, busy), "only the bounds were written"
    assert await joined(world, busy)
    view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    assert set(view.nodes_listed) == nodes, "no Node was terminated"

    # 0..1 per zone: below the autoscaler's count (an EKS group whose bounds are equal reads back as fixed)
    await world.compute.fleet.apply(document(world, provider, 1, min_nodes=0), tenant_id=world.tenant_id)
    await world.until(lambda: settled(world, provider, (0, zones)), minutes=30, what="maxNodes lowered", every=STEP)
    assert (await at_provider(world, provider)) == (0, zones, zones), "the count moved to the new maximum"
    await world.until(
        lambda: joined(world, zones), minutes=30, what="the substrate ready at the new maximum", every=STEP
    )
    (pool,) = (await cluster(world)).node_pools
    assert pool.status == "ready" and pool.message is None
