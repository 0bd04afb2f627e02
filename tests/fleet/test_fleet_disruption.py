"""The plan's disruption lines, a pure function of the items and the snapshot's Nodes and bookings."""

from __future__ import annotations

import dataclasses
from typing import Any

from fleet_documents import DELETE, SUBSTRATE, TENANT, applied, edit, example

from better_compute.fleet.plan import Plan, make_plan
from better_compute.fleet.render import render_plan
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.sizes import FlavorNodes
from better_compute.fleet.snapshot import NodeState, Snapshot

FREE = NodeState("node-a", "h100", "us-central1-a", joined=True)
BOOKED = NodeState("node-b", "h100", "us-central1-a", joined=True, reservations=2, gpus=6, tenants=("ten_x",))
OTHER_ZONE = NodeState("node-c", "h100", "us-central1-b", joined=True, reservations=1, gpus=8, tenants=("ten_y",))


def with_nodes(document: dict[str, Any], *nodes: NodeState) -> Snapshot:
    return dataclasses.replace(applied(document), nodes={"gpu-fleet": tuple(nodes)})


def plan_of(document: dict[str, Any], state: Snapshot, *, prune: bool = False, zones: int | None = 2) -> Plan:
    parsed = FleetDocument.model_validate(document)
    sizes = tuple(
        FlavorNodes(p.name, f.name, "gcp", f.nodes, zones)
        for p in parsed.pools
        if p.policy.substrate is not None
        for f in p.policy.substrate.flavors
    )
    return make_plan(parsed, state, tenant_id=TENANT, prune=prune, node_counts=sizes)


def test_a_per_zone_shrink_names_the_free_node_of_the_zone_that_loses_one_and_the_nodes_after() -> None:
    before = edit(example("gke"), f"{SUBSTRATE}/flavors/0/nodes", 2)
    state = with_nodes(before, BOOKED, FREE, OTHER_ZONE)
    plan = plan_of(edit(before, f"{SUBSTRATE}/flavors/0/nodes", 1), state)
    (entry,) = plan.disruption
    assert (entry.pool, entry.flavor, entry.change, entry.bookings) == ("gpu-fleet", "h100", "shrink", "none")
    assert [n.name for n in entry.nodes] == ["node-a"], "us-central1-a loses its free Node, not the booked one"
    assert "removes node-a" in entry.note
    assert [(z.zone, z.before, z.after) for z in entry.zones] == [("us-central1-a", 2, 1), ("us-central1-b", 1, 1)]
    body = entry.to_dict()
    assert body["booked"] == {"nodes": 0, "reservations": 0, "gpus": 0, "tenants": []}
    assert Plan.from_dict(plan.to_dict()).disruption == plan.disruption


def test_a_shrink_that_must_take_a_booked_node_says_what_the_document_does_with_it() -> None:
    before = edit(example("gke"), f"{SUBSTRATE}/flavors/0/nodes", 2)
    state = with_nodes(before, FREE, BOOKED)
    lowered = edit(before, f"{SUBSTRATE}/flavors/0/nodes", 0)
    (waits,) = plan_of(lowered, state).disruption
    assert waits.bookings == "wait" and [n.name for n in waits.nodes] == ["node-a", "node-b"]
    for how in ("refuse", "end"):
        (entry,) = plan_of(edit(lowered, f"{SUBSTRATE}/disruption", {"bookedNodes": how}), state).disruption
        assert entry.bookings == how
    still = plan_of(lowered, with_nodes(lowered, FREE, BOOKED)).disruption
    assert still == (waits,), "a shrink still waiting is shown again, though the document's nodes did not change"


def test_taking_autoscaling_off_lets_the_provider_pick_so_every_node_of_a_shrinking_zone_is_listed() -> None:
    before = edit(example("gke"), f"{SUBSTRATE}/flavors/0/autoscaling", {"minNodes": 1, "maxNodes": 3})
    state = with_nodes(before, FREE, BOOKED)
    fixed = edit(edit(before, f"{SUBSTRATE}/flavors/0/autoscaling", DELETE), f"{SUBSTRATE}/flavors/0/nodes", 1)
    (entry,) = plan_of(fixed, state).disruption
    assert entry.bookings == "end" and [n.name for n in entry.nodes] == ["node-a", "node-b"]
    assert "the provider picks" in entry.note


def test_a_shrink_of_free_nodes_only_touches_no_booking_and_a_growth_is_no_disruption() -> None:
    before = edit(example("gke"), f"{SUBSTRATE}/flavors/0/nodes", 2)
    state = with_nodes(before, FREE, dataclasses.replace(FREE, name="node-d"))
    (entry,) = plan_of(edit(before, f"{SUBSTRATE}/flavors/0/nodes", 1), state).disruption
    assert entry.bookings == "none" and not entry.booked
    assert plan_of(edit(before, f"{SUBSTRATE}/flavors/0/nodes", 3), state).disruption == ()
    assert plan_of(before, state).disruption == (), "an unchanged flavor disrupts nothing"


def test_doks_counts_nodes_in_total() -> None:
    before = edit(example("doks"), f"{SUBSTRATE}/flavors/0/nodes", 3)
    nodes = [NodeState(f"n-{i}", "h100", None, joined=True, reservations=i % 2, gpus=8 * (i % 2)) for i in range(3)]
    (entry,) = plan_of(
        edit(before, f"{SUBSTRATE}/flavors/0/nodes", 2), with_nodes(before, *nodes), zones=None
    ).disruption
    assert [(z.zone, z.before, z.after) for z in entry.zones] == [(None, 3, 2)]
    assert [n.name for n in entry.nodes] == ["n-0"], "a free Node goes, in total"


def test_a_removed_flavor_ends_its_bookings_and_a_teardown_waits_for_them() -> None:
    before = example("gke")
    cpu = {**before["pools"][0]["policy"]["substrate"]["flavors"][0], "name": "cpu"}
    cpu.pop("gpus")
    two = edit(before, f"{SUBSTRATE}/flavors/1", cpu)
    state = with_nodes(two, FREE, BOOKED, dataclasses.replace(OTHER_ZONE, flavor="cpu"))
    (removed,) = plan_of(before, state).disruption
    assert (removed.flavor, removed.change, removed.bookings) == ("cpu", "flavor-removed", "end")
    assert [n.name for n in removed.nodes] == ["node-c"]
    assert [(z.zone, z.before, z.after) for z in removed.zones] == [("us-central1-b", 1, 0)]

    taken_out = edit(two, SUBSTRATE, DELETE)
    (teardown,) = plan_of(taken_out, state, prune=True).disruption
    assert (teardown.flavor, teardown.change, teardown.bookings) == (None, "teardown", "wait")
    assert len(teardown.nodes) == 3 and len(teardown.booked) == 2
    assert plan_of(taken_out, state).disruption == (), "without --prune the substrate is kept"
    archived = edit(two, "/pools", [])
    assert [d.change for d in plan_of(archived, state, prune=True).disruption] == ["teardown"]


def test_the_text_plan_shows_each_entry_with_its_nodes_and_bookings() -> None:
    from rich.console import Console

    before = edit(example("gke"), f"{SUBSTRATE}/flavors/0/nodes", 2)
    plan = plan_of(edit(before, f"{SUBSTRATE}/flavors/0/nodes", 0), with_nodes(before, FREE, BOOKED))
    console = Console(width=200, record=True)
    console.print(render_plan(plan))
    text = console.export_text()
    assert "gpu-fleet/h100 (shrink): 1 of 2 Node(s) booked: 2 booking(s), 6 GPU(s)" in text
    assert "waits for every booking to end" in text and "removes node-a, node-b" in text
    assert "Nodes: us-central1-a 2 → 0" in text
    assert "node-b (us-central1-a): 2 booking(s), 6 GPU(s), tenant(s) ten_x" in text
    assert "node-a (us-central1-a): free" in text
