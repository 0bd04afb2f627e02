"""The plan tells what a change does to booked Nodes, before apply, through the CLI and HTTP (GKE, EKS, DOKS).

Every Node of the flavor runs the real bcd and is booked through the public doors; the plan of a
document that lowers `nodes` (and one that tears the substrate down) lists the Nodes concerned
with their bookings, what happens to those, and the Nodes per zone (per Availability Zone on EKS,
in total on DOKS) before and after, the same over `fleet plan --json` and `POST /v1/fleet/plan`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from adopt_world import cli, plan_over_cli, plan_over_http, ready_and_joined
from e2e_world import World

ZONES = {"gke": ["us-central1-a"], "eks": ["us-east-1a", "us-east-1b"], "doks": [None]}
"""Where each example's Nodes are: GKE's account pins one zone, EKS' subnets span two AZs, DOKS has none."""


STEP = 30.0
"""Simulated seconds a step while waiting for what no assertion times (the engine still runs every event
in between): provisioning, whose check is the end state."""


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_the_plan_shows_the_booked_nodes_a_shrink_and_a_teardown_disrupt(
    world: World, provider: str, tmp_path: Path
) -> None:
    document = world.document(provider)
    zones = ZONES[provider]
    total = 2 * len(zones)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, total), minutes=60, what=f"{total} Nodes joined", every=STEP)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    await world.compute.quotas.set(world.tenant_id, "H100", 8 * total)
    booked = [await world.compute.reservations.create(world.tenant_id, pool.id, 8) for _ in range(total)]
    assert len({r.node_id for r in booked}) == total, "every Node is booked whole"
    _, key = await world.compute.iam.create_api_key(world.tenant_id)

    shrunk = copy.deepcopy(document)
    shrunk["pools"][0]["policy"]["substrate"]["flavors"][0]["nodes"] = 1
    over_http = await plan_over_http(world, key, shrunk)
    over_cli = await plan_over_cli(world, tmp_path, shrunk)
    for body in (over_http, over_cli):
        (entry,) = body["disruption"]
        assert (entry["pool"], entry["flavor"], entry["change"]) == ("gpu-fleet", "h100", "shrink")
        assert entry["bookings"] == "wait", "every Node is booked: the shrink waits (the default bookedNodes)"
        assert [(z["zone"], z["before"], z["after"]) for z in entry["zones"]] == [(z, 2, 1) for z in zones]
        assert entry["booked"] == {
            "nodes": len(zones),
            "reservations": len(zones),
            "gpus": 8 * len(zones),
            "tenants": [world.tenant_id],
        }
        assert sorted(str(n["zone"]) for n in entry["nodes"]) == sorted(str(z) for z in zones), "one Node a zone goes"
    assert over_http["disruption"] == over_cli["disruption"]

    taken_out = copy.deepcopy(document)
    del taken_out["pools"][0]["policy"]["substrate"]
    torn = await plan_over_cli(world, tmp_path, taken_out, "--prune")
    (teardown,) = torn["disruption"]
    assert (teardown["flavor"], teardown["change"], teardown["bookings"]) == (None, "teardown", "wait")
    assert [(z["zone"], z["before"], z["after"]) for z in teardown["zones"]] == [(z, 2, 0) for z in zones]
    assert teardown["booked"]["reservations"] == total

    text = await cli(world, "fleet", "plan", str(tmp_path / "fleet.json"), "--prune")
    assert "gpu-fleet (teardown)" in text.stdout and "nothing is force-released" in text.stdout, text.output
