"""A node group whose creation failed (CREATE_FAILED, a stockout) is deleted and made again once capacity returns."""

from __future__ import annotations

from e2e_world import World

from better_compute.core.errors import ComputeError


async def joined(world: World, count: int) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


async def test_a_node_group_that_failed_to_create_is_made_again_once_capacity_returns(world: World) -> None:
    world.cloud.eks.faults.stockout("p5.48xlarge")
    document = world.document("eks")
    document["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = 1
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)

    async def failed() -> bool:
        clusters = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
        groups = world.cloud.eks.cluster(clusters[0].name, clusters[0].location) if clusters else None
        return groups is not None and any(g.status == "CREATE_FAILED" for g in groups.nodegroups.values())

    await world.until(failed, minutes=60, what="the node group CREATE_FAILED")

    async def reported() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
        return view.state == "error" and "InsufficientInstanceCapacity" in (view.message or "")

    await world.until(reported, minutes=30, what="the stockout reported")
    world.cloud.eks.faults.stockouts.clear()  # capacity is back
    await world.until(lambda: joined(world, 2), minutes=60, what="the node group made again and its Nodes joined")
