"""A node group whose creation failed (CREATE_FAILED, a stockout) is deleted and made again once capacity returns."""

from __future__ import annotations

from e2e_world import World

from better_compute.core.errors import ComputeError

STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): the cluster's provisioning, and the Nodes joining, whose check is the end state."""


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

    async def groups() -> list[str]:
        clusters = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
        found = world.cloud.eks.cluster(clusters[0].name, clusters[0].location) if clusters else None
        return [g.status for g in found.nodegroups.values()] if found is not None else []

    async def asked() -> bool:
        return bool({"CREATING", "CREATE_FAILED"} & set(await groups()))

    async def failed() -> bool:
        return "CREATE_FAILED" in await groups()

    # the cluster's provisioning is stepped through coarsely; the failed group, which the next run deletes, finely
    await world.until(asked, minutes=60, what="the node group asked for", every=STEP)
    await world.until(failed, minutes=60, what="the node group CREATE_FAILED")

    async def reported() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
        return view.state == "error" and "InsufficientInstanceCapacity" in (view.message or "")

    await world.until(reported, minutes=30, what="the stockout reported")
    world.cloud.eks.faults.stockouts.clear()  # capacity is back
    await world.until(
        lambda: joined(world, 2), minutes=60, what="the node group made again and its Nodes joined", every=STEP
    )
