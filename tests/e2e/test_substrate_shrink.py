"""A fixed flavor's shrink takes the Nodes the substrate picks, free ones first (GKE, EKS, DOKS).

Three Nodes run the real bcd, two of them booked through the public doors. Lowering `nodes` to 2
removes the free one and ends no booking; lowering it to 1 can only be met by taking a booked
Node, which the document refuses (nothing is cordoned or removed) or waits for (the Node is
cordoned in Kubernetes and in the pool, and goes once its booking is released), or ends (the
booking is released, its quota refunded, and the decision log says why). The plan, over the CLI
and HTTP, named the Node that goes and said what happens to its booking beforehand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from adopt_world import cli, plan_over_cli, plan_over_http, ready_and_joined, sized, view
from e2e_world import World


async def the_shrink(world: World, key: str, tmp_path: Path, document: dict[str, Any]) -> dict[str, Any]:
    """The plan's one disruption entry, the same over HTTP and the CLI."""
    over_http = await plan_over_http(world, key, document)
    over_cli = await plan_over_cli(world, tmp_path, document)
    assert over_http["disruption"] == over_cli["disruption"]
    (entry,) = over_cli["disruption"]
    assert (entry["flavor"], entry["change"]) == ("h100", "shrink")
    entry_: dict[str, Any] = entry
    return entry_


STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): provisioning, and a removal, whose checks are the end state, not when it came."""


async def listed(world: World) -> list[str]:
    return sorted((await view(world)).nodes_listed)


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_shrink_removes_the_free_node_and_waits_for_or_refuses_a_booked_one(
    world: World, provider: str, tmp_path: Path
) -> None:
    document = sized(world.document(provider), provider, 3)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 3), minutes=60, what="3 Nodes joined", every=STEP)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 24)
    booked = [await world.compute.reservations.create(world.tenant_id, pool.id, 8) for _ in range(2)]
    on = {r.id: (await world.compute.nodes.get(world.tenant_id, r.node_id)).kubernetes_node_name for r in booked}
    (free,) = set(await listed(world)) - set(on.values())
    _, key = await world.compute.iam.create_api_key(world.tenant_id)

    to_two = sized(document, provider, 2)
    entry = await the_shrink(world, key, tmp_path, to_two)
    assert entry["bookings"] == "none" and [n["name"] for n in entry["nodes"]] == [free], entry
    await world.compute.fleet.apply(to_two, tenant_id=world.tenant_id)

    async def two_left() -> bool:
        return await listed(world) == sorted(on.values()) and await ready_and_joined(world, 2)

    await world.until(two_left, minutes=30, what="the free Node removed", every=STEP)
    for reservation in booked:
        assert (await world.compute.reservations.get(world.tenant_id, reservation.id)).state == "active"

    refused = sized(document, provider, 1, "refuse")
    entry = await the_shrink(world, key, tmp_path, refused)
    (going,) = entry["nodes"]
    assert entry["bookings"] == "refuse" and going["reservations"] == 1, entry
    await world.compute.fleet.apply(refused, tenant_id=world.tenant_id)

    async def says_refused() -> bool:
        current = await view(world)
        return current.state == "error" and "bookedNodes is refuse" in (current.message or "")

    await world.until(says_refused, minutes=10, what="the shrink refused")
    await world.step(120)
    assert await listed(world) == sorted(on.values()), "a refused shrink removes nothing"
    kube = world.kube_cluster_of(going["name"])
    node = kube.get_object("Node", going["name"])
    assert node is not None and not (node.get("spec") or {}).get("unschedulable"), "nor cordons anything"

    waits = sized(document, provider, 1)
    entry = await the_shrink(world, key, tmp_path, waits)
    assert entry["bookings"] == "wait" and [n["name"] for n in entry["nodes"]] == [going["name"]], entry
    await world.compute.fleet.apply(waits, tenant_id=world.tenant_id)

    async def says_waiting() -> bool:
        return "waits for the bookings on Node(s)" in ((await view(world)).message or "")

    await world.until(says_waiting, minutes=10, what="the shrink waiting for the booking")
    await world.step(120)
    assert await listed(world) == sorted(on.values()), "nothing goes while its booking holds"
    node = kube.get_object("Node", going["name"])
    assert node is not None and (node.get("spec") or {}).get("unschedulable") is True
    (leaving,) = [r for r in booked if on[r.id] == going["name"]]
    member = await world.compute.nodes.get(world.tenant_id, leaving.node_id)
    assert member.state == "cordoned", "no new booking lands on the Node that goes"

    await world.compute.reservations.release(world.tenant_id, leaving.id)
    (staying,) = [r for r in booked if r is not leaving]

    async def one_left() -> bool:
        return await listed(world) == [on[staying.id]] and await ready_and_joined(world, 1)

    await world.until(one_left, minutes=30, what="the released Node removed", every=STEP)
    assert (await world.compute.reservations.get(world.tenant_id, staying.id)).state == "active"
    (cluster,) = await world.compute.kubernetes_clusters.list(tenant_id=world.tenant_id)
    assert [p.node_count for p in cluster.node_pools] == [1], "the count is recorded once the machine went"


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_shrink_whose_document_says_end_releases_the_booking_on_the_node_that_goes(
    world: World, provider: str, tmp_path: Path
) -> None:
    document = sized(world.document(provider), provider, 2)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 2), minutes=60, what="2 Nodes joined", every=STEP)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 16)
    big = await world.compute.reservations.create(world.tenant_id, pool.id, 8)
    small = await world.compute.reservations.create(world.tenant_id, pool.id, 2)
    assert big.node_id != small.node_id
    small_node = (await world.compute.nodes.get(world.tenant_id, small.node_id)).kubernetes_node_name
    _, key = await world.compute.iam.create_api_key(world.tenant_id)

    ends = sized(document, provider, 1, "end")
    entry = await the_shrink(world, key, tmp_path, ends)
    assert entry["bookings"] == "end" and [n["name"] for n in entry["nodes"]] == [small_node], "the least booked"
    await world.compute.fleet.apply(ends, tenant_id=world.tenant_id)

    async def one_left() -> bool:
        return await listed(world) == [big_node] and await ready_and_joined(world, 1)

    big_node = (await world.compute.nodes.get(world.tenant_id, big.node_id)).kubernetes_node_name
    await world.until(one_left, minutes=30, what="the least booked Node removed", every=STEP)
    assert (await world.compute.reservations.get(world.tenant_id, small.id)).state == "released"
    assert (await world.compute.reservations.get(world.tenant_id, big.id)).state == "active"
    (quota,) = await world.compute.quotas.usage(world.tenant_id, "H100")
    assert quota.used == 8, "the ended booking's GPUs are refunded"
    why = await cli(world, "events", "--reservation", small.id, "--json")
    assert why.exit_code == 0, why.output
    kinds = [(e["kind"], e["reason"]) for e in json.loads(why.stdout)["events"]]
    shrink = "shrink of flavor h100 to 1 Node(s): the substrate removes this Node"
    assert (
        "reservation.released",
        f"its node {small_node} went: {shrink} (policy.substrate.disruption.bookedNodes is end)",
    ) in kinds, kinds
    cordoned = await cli(world, "events", "--node", str(small_node), "--kind", "node.cordoned", "--json")
    assert [e["reason"] for e in json.loads(cordoned.stdout)["events"]] == [shrink], cordoned.output


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_waiting_shrink_given_up_uncordons_the_node_it_had_cordoned(
    world: World, provider: str, tmp_path: Path
) -> None:
    document = sized(world.document(provider), provider, 2)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, 2), minutes=60, what="2 Nodes joined", every=STEP)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 16)
    booked = [await world.compute.reservations.create(world.tenant_id, pool.id, 8) for _ in range(2)]
    await world.compute.fleet.apply(sized(document, provider, 1), tenant_id=world.tenant_id)

    async def says_waiting() -> bool:
        return "waits for the bookings on Node(s)" in ((await view(world)).message or "")

    await world.until(says_waiting, minutes=10, what="the shrink waiting for a booking")
    members = [await world.compute.nodes.get(world.tenant_id, r.node_id) for r in booked]
    (cordoned,) = [m for m in members if m.state == "cordoned"]
    name = str(cordoned.kubernetes_node_name)
    kube = world.kube_cluster_of(name)
    node = kube.get_object("Node", name)
    assert node is not None and node["spec"].get("unschedulable") is True

    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)  # two Nodes again: nothing goes

    async def uncordoned() -> bool:
        node = kube.get_object("Node", name)
        member = await world.compute.nodes.get(world.tenant_id, cordoned.id)
        return node is not None and not node["spec"].get("unschedulable") and member.state == "ready"

    await world.until(uncordoned, minutes=10, what="the Node the shrink cordoned uncordoned")
    node = kube.get_object("Node", name)
    assert node is not None and "better-compute.dev/leaving" not in (node["metadata"].get("annotations") or {})
    assert not await says_waiting() and await listed(world) == sorted(str(m.kubernetes_node_name) for m in members)
