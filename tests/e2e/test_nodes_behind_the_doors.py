"""Node matching, bookings on a gone Node, and taking policy.substrate out, through a FleetConfig
document and the real bcd on every Node (DOKS world): nothing is registered behind the product's back.
"""

from __future__ import annotations

import copy
from typing import Any

from e2e_world import World

from better_compute.kubernetes.substrates.manifests import DAEMON_SET, NAMESPACE

COARSE = 30.0
"""How often (simulated seconds) a wait with no time bound on what it waits for looks again (a look costs a step)."""


async def view(world: World) -> Any:
    return await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")


async def joined(world: World, count: int) -> bool:
    try:
        current = await view(world)
    except Exception:
        return False
    return current.state == "ready" and len(current.nodes_joined) == count == len(current.nodes_listed)


def with_nodes(document: dict[str, Any], nodes: int) -> dict[str, Any]:
    resized = copy.deepcopy(document)
    resized["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = nodes
    return resized


async def live_nodes(world: World, pool_id: str) -> list[Any]:
    return [n for n in await world.compute.nodes.list(world.tenant_id, pool_id=pool_id) if n.state != "retired"]


async def test_a_bcd_that_reports_no_node_name_is_matched_by_its_hostname(world: World) -> None:
    world.cloud.bcd.reports_node_name = False  # an older bcd: no NODE_NAME, only its hostname
    document = world.document("doks")
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="both Nodes joined, matched by hostname", every=COARSE)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    members = await live_nodes(world, pool.id)
    listed = set((await view(world)).nodes_listed)
    assert {n.inventory["os"].get("kubernetesNodeName") for n in members} == {None}, "bcd reported no Node name"
    assert {n.kubernetes_node_name for n in members} == listed == {n.inventory["os"]["hostname"] for n in members}

    await world.compute.fleet.apply(with_nodes(document, 1), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 1), minutes=60, what="one Node left", every=COARSE)

    async def retired() -> bool:
        return len(await live_nodes(world, pool.id)) == 1

    await world.until(retired, minutes=30, what="the gone Node's node retired", every=COARSE)
    (left,) = await live_nodes(world, pool.id)
    assert left.kubernetes_node_name in (await view(world)).nodes_listed


async def test_an_on_demand_booking_is_released_and_refunded_once_when_its_node_is_gone(world: World) -> None:
    document = world.document("doks")
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="both Nodes joined", every=COARSE)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 16)
    bookings = [await world.compute.reservations.create(world.tenant_id, pool.id, 8) for _ in range(2)]
    assert {b.node_id for b in bookings} == {n.id for n in await live_nodes(world, pool.id)}
    assert (await world.compute.quotas.usage(world.tenant_id, "H100"))[0].used == 16

    # Every Node is booked, so the shrink can only be met by taking a booked one: the document lets it
    # end that booking, and the Node's going (its node retired) must not refund the booking again.
    ending = with_nodes(document, 1)
    ending["pools"][0]["policy"]["substrate"]["disruption"] = {"bookedNodes": "end"}
    await world.compute.fleet.apply(ending, tenant_id=world.tenant_id)

    async def one_released() -> bool:
        states = [(await world.compute.reservations.get(world.tenant_id, b.id)).state for b in bookings]
        return sorted(states) == ["active", "released"]

    await world.until(one_released, minutes=60, what="the gone Node's booking released", every=COARSE)
    await world.step(600)  # more runs: nothing is refunded twice
    assert (await world.compute.quotas.usage(world.tenant_id, "H100"))[0].used == 8
    states = {b.id: (await world.compute.reservations.get(world.tenant_id, b.id)).state for b in bookings}
    assert sorted(states.values()) == ["active", "released"], "on-demand: released, never preempted"
    (left,) = await live_nodes(world, pool.id)
    kept = next(b for b in bookings if states[b.id] == "active")
    assert kept.node_id == left.id


async def test_taking_only_policy_substrate_out_with_prune_tears_the_substrate_down(world: World) -> None:
    document = world.document("doks")
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="both Nodes joined", every=COARSE)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    cluster_id = (await view(world)).cluster.provider_cluster_id
    bare = copy.deepcopy(document)
    del bare["pools"][0]["policy"]["substrate"]

    kept = await world.compute.fleet.apply(bare, tenant_id=world.tenant_id)  # without prune: kept
    assert kept.item("pool", "gpu-fleet").substrate.value == "keep"
    await world.step(300)
    assert (await view(world)).state == "ready"

    pruned = await world.compute.fleet.apply(bare, tenant_id=world.tenant_id, prune=True)
    assert pruned.item("pool", "gpu-fleet").substrate.value == "teardown"

    async def deleted() -> bool:
        return (await view(world)).state == "deleted"

    await world.until(deleted, minutes=120, what="the substrate deleted", every=COARSE)
    stays = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    assert (stays.id, stays.state) == (pool.id, "active") and "substrate" not in stays.policy
    assert await live_nodes(world, pool.id) == []
    assert world.cloud.kube.clusters == {} or all(
        c.get_object("DaemonSet", DAEMON_SET, NAMESPACE) is None for c in world.cloud.kube.clusters.values()
    )
    k = world.compute.module("kubernetes").context  # type: ignore[attr-defined]
    account, driver = await k.account(world.tenant_id, "managed-k8s")
    assert await driver.get_cluster(account, cluster_id) is None, "the created cluster is deleted at the provider"
    assert await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id) == []
