"""A node group whose creation failed (CREATE_FAILED, a stockout) is deleted and made again, the substrate
in `error` with the stockout as its message all the while, until capacity returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from e2e_world import World

from better_compute.core.errors import ComputeError

STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): the cluster's provisioning, and the Nodes joining, whose check is the end state."""
FINE = 5.0
"""Simulated seconds a step where what is looked for lasts one run: a failed group (the next run deletes
it) and the error that run reports."""


async def looking_finely_near_each_launch(
    world: World,
    check: Callable[[], Awaitable[bool]],
    groups: Callable[[], Awaitable[list[str]]],
    *,
    minutes: float,
    what: str,
) -> None:
    """`world.until(check, every=FINE)`, on the same 5-second grid, but STEP at a time while no group can
    fail within the step: while nothing is there, while a group is DELETING after the first look at it
    (the error of the run that deleted it is read at that look), and while a group is CREATING until
    shortly before its launch (nodegroup_create after it was made, so after the look before it was seen)."""
    create = timedelta(seconds=world.cloud.eks.world.timings.nodegroup_create)
    clock = world.cloud.clock
    deadline = clock.now() + timedelta(minutes=minutes)
    creating_since: datetime | None = None  # the look before the one that saw the group CREATING
    deleting_seen = False
    looked = clock.now()
    while not await check():
        assert clock.now() <= deadline, f"not reached within {minutes} simulated minutes: {what}"
        states = await groups()
        creating_since = (creating_since or looked) if "CREATING" in states else None
        quiet = not states or (states == ["DELETING"] and deleting_seen)
        deleting_seen = "DELETING" in states
        launch = creating_since + create if creating_since is not None else None
        coarse = quiet or (launch is not None and clock.now() + timedelta(seconds=STEP + FINE) <= launch)
        looked = clock.now()
        await world.step(STEP if coarse else FINE)


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

    async def failed() -> bool:
        return "CREATE_FAILED" in await groups()

    async def reported() -> bool:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
        return view.state == "error" and "InsufficientInstanceCapacity" in (view.message or "")

    await looking_finely_near_each_launch(world, failed, groups, minutes=60, what="the node group CREATE_FAILED")
    await world.until(reported, minutes=5, every=FINE, what="the first failure's stockout reported")
    # While the group is deleted, made again and fails again, the substrate stays in error with the reason.
    seen: set[str] = set()
    for _ in range(int(15 * 60 / FINE)):
        await world.step(FINE)
        seen.update(await groups())
        assert await reported(), f"the substrate left error while the stockout lasts (groups: {await groups()})"
    assert {"DELETING", "CREATING", "CREATE_FAILED"} <= seen, seen
    world.cloud.eks.faults.stockouts.clear()  # capacity is back
    await world.until(
        lambda: joined(world, 2), minutes=60, what="the node group made again and its Nodes joined", every=STEP
    )
