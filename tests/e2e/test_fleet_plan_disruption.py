"""The plan tells what a change does to booked Nodes, before apply, through the CLI and HTTP (GKE, EKS, DOKS).

Every Node of the flavor runs the real bcd and is booked through the public doors; the plan of a
document that lowers `nodes` (and one that tears the substrate down) lists the Nodes concerned
with their bookings, what happens to those, and the Nodes per zone (per Availability Zone on EKS,
in total on DOKS) before and after, the same over `fleet plan --json` and `POST /v1/fleet/plan`.
"""

from __future__ import annotations

import copy
import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from adopt_world import cli, ready_and_joined
from e2e_world import World

ZONES = {"gke": ["us-central1-a"], "eks": ["us-east-1a", "us-east-1b"], "doks": [None]}
"""Where each example's Nodes are: GKE's account pins one zone, EKS' subnets span two AZs, DOKS has none."""


async def plan_over_http(world: World, key: str, document: dict[str, Any], prune: bool = False) -> dict[str, Any]:
    plane = world.cloud.control_plane
    async with httpx.AsyncClient(base_url=plane.url, verify=ssl.create_default_context(cadata=plane.ca_pem)) as http:
        answer = await http.post(
            "/v1/fleet/plan",
            json={"document": document, "prune": prune},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def plan_over_cli(world: World, tmp_path: Path, document: dict[str, Any], *flags: str) -> dict[str, Any]:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(document))
    result = await cli(world, "fleet", "plan", str(path), "--json", *flags)
    assert result.exit_code == 2, result.output  # 2: changes pending
    body: dict[str, Any] = json.loads(result.stdout)
    return body


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_the_plan_shows_the_booked_nodes_a_shrink_and_a_teardown_disrupt(
    world: World, provider: str, tmp_path: Path
) -> None:
    document = world.document(provider)
    zones = ZONES[provider]
    total = 2 * len(zones)
    await world.compute.fleet.apply(document, tenant_id=world.tenant_id)
    await world.until(lambda: ready_and_joined(world, total), minutes=60, what=f"{total} Nodes joined")
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
        assert entry["bookings"] == "end", "the provider picks which Nodes go, so their bookings end"
        assert [(z["zone"], z["before"], z["after"]) for z in entry["zones"]] == [(z, 2, 1) for z in zones]
        assert entry["booked"] == {
            "nodes": total,
            "reservations": total,
            "gpus": 8 * total,
            "tenants": [world.tenant_id],
        }
        assert sorted(str(n["zone"]) for n in entry["nodes"]) == sorted(str(z) for z in zones for _ in range(2))
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
