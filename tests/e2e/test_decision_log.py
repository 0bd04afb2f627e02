"""The demo's Spot story (GKE), asked of the decision log through its doors: why was this reservation
preempted, and why did this node go? `better-compute events --json` and `GET /v1/events`, filtered by
reservation and by node, answer with the Spot reclaim; another tenant reads none of it.

The fleet is applied and the GPUs booked over HTTP with the tenant's API key (so the log names it);
Google reclaims the Spot VM in the GKE emulator, as the demo's `spot_reclaim` step has it.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx
from adopt_world import cli, ready_and_joined
from e2e_world import World
from test_substrate_lifecycle import reclaim_one_spot_node, with_spot


def client(world: World, key: str) -> httpx.AsyncClient:
    plane = world.cloud.control_plane
    return httpx.AsyncClient(
        base_url=plane.url,
        verify=ssl.create_default_context(cadata=plane.ca_pem),
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


async def events_over_http(world: World, key: str, **query: str) -> list[dict[str, Any]]:
    async with client(world, key) as http:
        answer = await http.get("/v1/events", params=query)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["events"]
    return found


async def events_over_cli(world: World, *filters: str) -> list[dict[str, Any]]:
    result = await cli(world, "events", *filters, "--json")
    assert result.exit_code == 0, result.output
    found: list[dict[str, Any]] = json.loads(result.stdout)["events"]
    return found


async def test_the_log_says_why_a_spot_reservation_was_preempted_and_why_its_node_went(world: World) -> None:
    api_key, key = await world.compute.iam.create_api_key(world.tenant_id)
    key_id = api_key.id
    async with client(world, key) as http:
        applied = await http.post("/v1/fleet/apply", json={"document": with_spot(world, "gke", h100_nodes=1)})
        assert applied.status_code == 200, applied.text
    await world.until(lambda: ready_and_joined(world, 2), minutes=90, what="both Nodes joined")
    async with client(world, key) as http:
        booked = await http.post("/v1/reservations", json={"pool": "gpu-fleet", "gpus": 8, "spot": True})
    assert booked.status_code == 201, booked.text
    reservation = booked.json()
    node = await world.compute.nodes.get(world.tenant_id, reservation["nodeId"])
    assert node.spot and node.kubernetes_node_name is not None
    node_name = node.kubernetes_node_name

    await reclaim_one_spot_node(world, "gke")

    async def preempted() -> bool:
        return (await world.compute.reservations.get(world.tenant_id, reservation["id"])).state == "preempted"

    await world.until(preempted, minutes=10, what="the Spot reservation is preempted")

    # Why was this reservation preempted?
    by_reservation = await events_over_http(world, key, reservation=reservation["id"])
    assert by_reservation == await events_over_cli(world, "--reservation", reservation["id"])
    assert [e["kind"] for e in by_reservation] == ["reservation.booked", "reservation.preempted"]
    placed, ended = by_reservation
    assert placed["principal"] == key_id, "the key that booked"
    assert placed["nodeName"] == node_name and placed["pool"] == "gpu-fleet"
    assert placed["reason"].startswith(f"booked 8 GPU(s) on Spot node {node_name} of pool gpu-fleet: ")
    assert placed["gpuIds"] == [d.uuid for d in node.devices], "in index order"
    assert ended["principal"] is None, "the system decided"
    assert ended["reason"] == (
        f"its Spot node {node_name} went: the Kubernetes Node {node_name} is gone (Spot capacity the provider reclaimed)"
    )
    assert ended["gpuIds"] == placed["gpuIds"]

    # Why did this node go?
    by_node = await events_over_http(world, key, node=node_name)
    assert by_node == await events_over_cli(world, "--node", node_name)
    story = [e["kind"] for e in by_node if not e["kind"].startswith("join-token.")]  # the last join uses up the token
    assert story == ["reservation.booked", "reservation.preempted", "node.retired"]
    retired = by_node[-1]
    assert (retired["nodeId"], retired["reason"]) == (
        node.id,
        f"the Kubernetes Node {node_name} is gone (Spot capacity the provider reclaimed)",
    )
    (apply,) = await events_over_http(world, key, kind="fleet.applied")
    assert (apply["principal"], apply["reason"]) == (key_id, "FleetConfig revision 1 applied: 3 create")
    made = await events_over_http(world, key, kind="join-token.made")
    assert made and all(e["pool"] == "gpu-fleet" for e in made)

    # Another tenant reads none of it, by filter or by id.
    other = await world.compute.iam.create_tenant("globex")
    _, stranger = await world.compute.iam.create_api_key(other.id)
    assert await events_over_http(world, stranger, reservation=reservation["id"]) == []
    assert await events_over_http(world, stranger, node=node_name) == []
    assert await events_over_http(world, stranger) == []
    async with client(world, stranger) as http:
        refused = await http.get(f"/v1/events/{retired['id']}")
    assert refused.status_code == 404, refused.text
