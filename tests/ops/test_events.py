"""`better-compute events` and GET /v1/events: one tenant's decision log, by filter and page, and no other's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from ops_world import SECRET, Seeded, point_the_cli_at, seed, seeded
from typer.testing import CliRunner

from better_compute.api import create_app
from better_compute.cli.main import app
from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.decisions import Decision, Kind, record
from better_compute.ops import events
from better_compute.server import Compute, better_compute
from better_compute.store import Database

runner = CliRunner()


async def story(compute: Compute, world: Seeded) -> None:
    """The events of a Spot reclaim, recorded as the deciders do (node-a's reservation preempted, node-a retired)."""
    node_a, node_b = world.node_ids
    async with compute.db.transaction() as session:
        now = compute.clock.now()
        await record(
            session, now,
            Decision(Kind.BOOKED, world.tenant_id, "node-a: best fit", pool_id=world.pool_id, node_id=node_a,
                     node_name="node-a", reservation_id="res_a", gpu_ids=("GPU-node-a-0",)),
            Decision(Kind.BOOKED, world.tenant_id, "node-b: best fit", pool_id=world.pool_id, node_id=node_b,
                     node_name="node-b", reservation_id="res_b", gpu_ids=("GPU-node-b-0",)),
        )  # fmt: skip
    async with compute.db.transaction() as session:
        now = compute.clock.now() + timedelta(minutes=5)
        await record(
            session, now,
            Decision(Kind.PREEMPTED, world.tenant_id, "the provider reclaimed the Spot machine", pool_id=world.pool_id,
                     node_id=node_a, node_name="node-a", reservation_id="res_a"),
            Decision(Kind.RETIRED, world.tenant_id, "the provider reclaimed the Spot machine", pool_id=world.pool_id,
                     node_id=node_a, node_name="node-a"),
        )  # fmt: skip


@pytest.fixture
async def api(
    database: Database, database_url: str, clock: SimClock
) -> AsyncIterator[tuple[httpx.AsyncClient, Compute, Seeded]]:
    compute = better_compute(database=database_url, secret=SECRET, clock=clock)
    application = create_app(compute)
    async with application.router.lifespan_context(application):
        world = await seed(compute)
        await story(compute, world)
        clock.advance(timedelta(minutes=5).total_seconds())
        _, key = await compute.iam.create_api_key(world.tenant_id)
        transport = httpx.ASGITransport(app=application)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            yield client, compute, world


async def get(client: httpx.AsyncClient, path: str, status: int = 200, **params: Any) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == status, response.text
    return response.json()


async def test_the_api_answers_why_a_reservation_was_preempted_and_why_a_node_went(
    api: tuple[httpx.AsyncClient, Compute, Seeded],
) -> None:
    client, _, world = api
    why = await get(client, "/v1/events", reservation="res_a")
    assert [(e["kind"], e["reason"]) for e in why["events"]] == [
        ("reservation.booked", "node-a: best fit"),
        ("reservation.preempted", "the provider reclaimed the Spot machine"),
    ]
    assert why["next"] is None
    assert why["events"][0] | {"id": None, "at": None} == {
        "id": None, "at": None, "kind": "reservation.booked", "reason": "node-a: best fit", "pool": "gpu-fleet",
        "poolId": world.pool_id, "nodeId": world.node_ids[0], "nodeName": "node-a", "reservationId": "res_a",
        "gpuIds": ["GPU-node-a-0"], "principal": None, "details": {},
    }  # fmt: skip
    gone = await get(client, "/v1/events", node="node-a", kind="node.retired")
    assert [e["reason"] for e in gone["events"]] == ["the provider reclaimed the Spot machine"]
    lately = await get(client, "/v1/events", pool="gpu-fleet", since="2m")
    assert [e["kind"] for e in lately["events"]] == ["reservation.preempted", "node.retired"], "in recorded order"
    first = await get(client, "/v1/events", limit=3)
    rest = await get(client, "/v1/events", limit=3, cursor=first["next"])
    assert [e["kind"] for e in first["events"] + rest["events"]] == [
        "join-token.made",
        "reservation.booked",
        "reservation.booked",
        "reservation.preempted",
        "node.retired",
    ]  # fmt: skip (the seed's join token first)
    assert rest["next"] is None
    one = first["events"][2]
    assert await get(client, f"/v1/events/{one['id']}") == one


async def test_another_tenant_reads_none_of_them_by_id_or_by_filter(
    api: tuple[httpx.AsyncClient, Compute, Seeded],
) -> None:
    client, compute, _ = api
    mine = (await get(client, "/v1/events"))["events"]
    other = await compute.iam.create_tenant("globex")
    _, key = await compute.iam.create_api_key(other.id)
    client.headers["Authorization"] = f"Bearer {key}"
    assert (await get(client, "/v1/events"))["events"] == []
    assert (await get(client, "/v1/events", reservation="res_a"))["events"] == []
    assert (await get(client, "/v1/events", node=mine[0]["nodeId"]))["events"] == []
    refused = await get(client, f"/v1/events/{mine[0]['id']}", status=404)
    assert refused["error"] == {"code": "NOT_FOUND", "message": f"no event {mine[0]['id']!r}", "path": "/eventId"}
    await get(client, "/v1/events", status=404, pool="gpu-fleet")  # not its pool's name


async def test_another_tenant_reads_none_of_a_real_booking_and_release(
    api: tuple[httpx.AsyncClient, Compute, Seeded],
) -> None:
    client, compute, _ = api
    booked = await client.post("/v1/reservations", json={"pool": "gpu-fleet", "gpus": 1})
    assert booked.status_code == 201, booked.text
    reservation = booked.json()["id"]
    assert (await client.post(f"/v1/reservations/{reservation}/release")).status_code == 200
    mine = (await get(client, "/v1/events", reservation=reservation))["events"]
    assert [e["kind"] for e in mine] == ["reservation.booked", "reservation.released"]
    other = await compute.iam.create_tenant("globex")
    _, key = await compute.iam.create_api_key(other.id)
    client.headers["Authorization"] = f"Bearer {key}"
    assert (await get(client, "/v1/events", reservation=reservation))["events"] == []
    assert (await get(client, "/v1/events", node=mine[0]["nodeName"]))["events"] == []
    for event in mine:
        await get(client, f"/v1/events/{event['id']}", status=404)


@pytest.mark.parametrize(
    ("params", "path"),
    [({"limit": 0}, "/limit"), ({"limit": "x"}, "/limit"), ({"cursor": "nope"}, "/cursor"),
     ({"kind": "node.gone"}, "/kind"), ({"since": "yesterday"}, "/since")],
)  # fmt: skip
async def test_bad_filters_are_refused_naming_the_field(
    api: tuple[httpx.AsyncClient, Compute, Seeded], params: dict[str, Any], path: str
) -> None:
    client, _, _ = api
    refused = await get(client, "/v1/events", status=400, **params)
    assert refused["error"]["code"] == "INVALID_INPUT"
    assert path in {refused["error"].get("path"), *(p["path"] for p in refused["error"].get("problems", []))}


async def test_the_route_is_documented_with_its_filters(api: tuple[httpx.AsyncClient, Compute, Seeded]) -> None:
    client, _, _ = api
    operation = (await get(client, "/openapi.json"))["paths"]["/v1/events"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {
        "pool", "node", "reservation", "kind", "since", "limit", "cursor",
    }  # fmt: skip
    assert "EventPage" in json.dumps(operation["responses"]["200"])


@pytest.fixture
def world(database: Database, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    point_the_cli_at(monkeypatch, database_url)

    async def seed_story() -> Seeded:
        made = await seeded(database_url)
        compute = better_compute(database=database_url, secret=SECRET)
        try:
            await story(compute, made)
        finally:
            await compute.close()
        return made

    return asyncio.run(seed_story())


def cli(*args: str) -> str:
    result = runner.invoke(app, ["events", *args], env={"COLUMNS": "200"})  # a table wraps at the width it is given
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_cli_prints_the_log_as_a_table_and_as_the_apis_json(world: Seeded) -> None:
    table = cli("--reservation", "res_a")
    assert "reservation.preempted" in table and "the provider reclaimed the Spot machine" in table
    assert "node.retired" not in table
    page = json.loads(cli("--node", "node-a", "--limit", "2", "--json"))
    assert [e["kind"] for e in page["events"]] == ["reservation.booked", "reservation.preempted"]
    assert f"more: --cursor {page['next']}" in cli("--node", "node-a", "--limit", "2")
    rest = json.loads(cli("--node", "node-a", "--limit", "2", "--cursor", page["next"], "--json"))
    assert [e["kind"] for e in rest["events"]] == ["node.retired"] and rest["next"] is None
    one = json.loads(cli(rest["events"][0]["id"], "--json"))
    assert one == rest["events"][0]
    assert cli("--kind", "join-token.revoked").strip() == "No events."


def test_the_cli_refuses_a_bad_filter_in_one_line(world: Seeded) -> None:
    result = runner.invoke(app, ["events", "--kind", "node.gone"])
    assert result.exit_code == 1
    assert "INVALID_INPUT at /kind" in result.output and "Traceback" not in result.output


def test_the_retention_is_a_server_setting_refused_when_not_positive(
    world: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BC_EVENT_RETENTION_DAYS", "0")
    result = runner.invoke(app, ["events"])
    assert result.exit_code == 1 and "/BC_EVENT_RETENTION_DAYS" in result.output
    with pytest.raises(ComputeError) as refused:
        better_compute(secret=SECRET, event_retention=timedelta(0))
    assert refused.value.path == "/eventRetention"


async def test_the_compute_compacts_what_its_retention_lets_go(database: Database, database_url: str) -> None:
    clock = SimClock()
    compute = better_compute(database=database_url, secret=SECRET, clock=clock, event_retention=timedelta(days=2))
    try:
        world = await seed(compute)
        await story(compute, world)
        older = await compute.compact_events(clock.now() + timedelta(days=2, minutes=1))
        assert older == 3, "the seed's join token's and the two 5 min older"
        page = await events.list_events(compute, world.tenant_id)
        assert [e["kind"] for e in page["events"]] == ["reservation.preempted", "node.retired"]
    finally:
        await compute.close()
