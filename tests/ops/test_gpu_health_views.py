"""Per-GPU health as operators read it: the views (ops.health), `nodes get` and `reservations get` over
HTTP and the CLI (text and --json), tenant-scoped, and the GPU gauges and doctor code over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from ops_world import SECRET, Seeded, point_the_cli_at, seed
from typer.testing import CliRunner

from better_compute.api import create_app
from better_compute.cli.main import app
from better_compute.compute.models import Device
from better_compute.compute.reservations import report_inventory
from better_compute.core.clock import SimClock
from better_compute.ops.health import device_view, gpu_health_view
from better_compute.server import Compute, better_compute
from better_compute.store import Database

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
XID_79 = {"healthy": False, "reason": "xid", "xid": 79, "resetNeeded": True}


def device(**health: Any) -> Device:
    return Device(
        id="dev-1", node_id="node-1", index=3, uuid="GPU-3", model="H100", present=False, reservation_id=None, **health
    )


def test_each_state_reads_its_reason_xid_since_and_until() -> None:
    assert gpu_health_view(device(health_since=T0)) == {
        "state": "healthy",
        "reason": None,
        "xid": None,
        "since": "2026-12-02T09:00:00+00:00",
        "until": None,
    }
    unhealthy = device(health_state="unhealthy", health_reason="double-bit-ecc", health_since=T0)
    assert gpu_health_view(unhealthy)["state"] == "unhealthy"
    assert gpu_health_view(unhealthy)["reason"] == "double-bit-ecc"
    held = device(health_state="reset-needed", health_reason="xid", health_xid=79, health_since=T0)
    assert (gpu_health_view(held)["state"], gpu_health_view(held)["xid"]) == ("reset-needed", 79)
    back_at = T0 + timedelta(minutes=10)
    rechecking = device(
        health_state="rechecking", health_reason="xid", health_xid=13, health_since=T0, health_until=back_at
    )
    assert gpu_health_view(rechecking)["until"] == "2026-12-02T09:10:00+00:00"
    assert gpu_health_view(device())["since"] is None, "a state from before the control plane kept it"
    assert device_view(held) == {
        "index": 3,
        "uuid": "GPU-3",
        "model": "H100",
        "present": False,
        "reservationId": None,
        "health": gpu_health_view(held),
    }


async def make_sick(compute: Compute, world: Seeded, node_id: str, index: int, health: dict[str, Any]) -> None:
    """bcd on the node reports GPU `index` with this health (the gateway's own call)."""
    inventory = (await compute.nodes.get(world.tenant_id, node_id)).inventory
    gpus = [dict(g) for g in inventory["gpus"]]
    gpus[index]["health"] = health
    async with compute.reservations.transaction() as session:
        await report_inventory(session, node_id, {**inventory, "gpus": gpus}, compute.clock.now())


@dataclass
class Api:
    compute: Compute
    clock: SimClock
    client: httpx.AsyncClient
    world: Seeded

    async def get(self, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = await self.client.get(path, **kwargs)
        assert response.status_code == status, response.text
        return response.json() if path != "/metrics" else response.text


@pytest.fixture
async def api(database: Database, database_url: str, clock: SimClock) -> AsyncIterator[Api]:
    compute = better_compute(database=database_url, secret=SECRET, clock=clock)
    application = create_app(compute)
    async with application.router.lifespan_context(application):
        world = await seed(compute)
        _, key = await compute.iam.create_api_key(world.tenant_id)
        transport = httpx.ASGITransport(app=application)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            yield Api(compute, clock, client, world)


async def test_nodes_get_and_reservations_get_show_each_gpus_health_over_http(api: Api) -> None:
    booked = await api.compute.reservations.create(api.world.tenant_id, api.world.pool_id, 2)
    node_id = booked.node_id
    api.clock.advance(30)
    sick_at = api.clock.now()
    await make_sick(api.compute, api.world, node_id, 1, XID_79)

    node = await api.get(f"/v1/nodes/{node_id}")
    listed = {n["id"]: n for n in await api.get("/v1/nodes")}[node_id]
    assert {k: v for k, v in node.items() if k != "devices"} == listed, "the list's keys, and the GPUs"
    assert [(d["index"], d["reservationId"], d["present"], d["health"]) for d in node["devices"]] == [
        (
            0,
            booked.id,
            True,
            {
                "state": "healthy",
                "reason": None,
                "xid": None,
                "since": node["devices"][0]["health"]["since"],
                "until": None,
            },
        ),
        (
            1,
            booked.id,
            False,
            {"state": "reset-needed", "reason": "xid", "xid": 79, "since": sick_at.isoformat(), "until": None},
        ),
    ]
    by_name = await api.get(f"/v1/nodes/{node['name']}")
    assert by_name == node, "a live node is found by its name too"

    reservation = await api.get(f"/v1/reservations/{booked.id}")
    assert (reservation["health"], reservation["state"]) == ("degraded", "active")
    assert [(d["uuid"], d["health"]["state"]) for d in reservation["devices"]] == [
        (node["devices"][0]["uuid"], "healthy"),
        (node["devices"][1]["uuid"], "reset-needed"),
    ]

    other = await api.compute.iam.create_tenant("globex")
    _, other_key = await api.compute.iam.create_api_key(other.id)
    theirs = {"Authorization": f"Bearer {other_key}"}
    assert (await api.get(f"/v1/nodes/{node_id}", 404, headers=theirs))["error"]["code"] == "NOT_FOUND"
    assert (await api.get(f"/v1/nodes/{node['name']}", 404, headers=theirs))["error"]["path"] == "/node"
    assert (await api.get(f"/v1/reservations/{booked.id}", 404, headers=theirs))["error"]["code"] == "NOT_FOUND"


async def test_metrics_count_the_quarantined_gpus_and_doctor_names_them(api: Api) -> None:
    node_id = api.world.node_ids[0]
    await make_sick(api.compute, api.world, node_id, 0, XID_79)
    metrics = await api.get("/metrics")
    assert 'better_compute_gpus_quarantined{state="reset-needed"} 1.0' in metrics
    assert 'better_compute_gpus_unhealthy{reason="xid"} 1.0' in metrics
    assert 'better_compute_gpu_quarantines_total{reason="xid"}' in metrics
    doctor = await api.get("/v1/doctor")
    (finding,) = [f for f in doctor["findings"] if f["code"] == "compute.gpu-quarantined"]
    assert "node node-a" in finding["message"] and "GPU 0 (GPU-node-a-0)" in finding["message"]
    assert "reset-needed: xid 79" in finding["message"]

    other = await api.compute.iam.create_tenant("globex")
    _, other_key = await api.compute.iam.create_api_key(other.id)
    theirs = await api.get("/v1/doctor", headers={"Authorization": f"Bearer {other_key}"})
    assert not [f for f in theirs["findings"] if f["code"] == "compute.gpu-quarantined"], "another tenant's GPU"

    await make_sick(api.compute, api.world, node_id, 0, {"healthy": True})
    assert 'better_compute_gpus_quarantined{state="reset-needed"} 0.0' in await api.get("/metrics")


def test_nodes_get_and_reservations_get_in_the_cli(
    database: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_the_cli_at(monkeypatch, database_url)

    async def world() -> tuple[Seeded, str]:
        compute = better_compute(database=database_url, secret=SECRET)
        try:
            seeded = await seed(compute)
            booked = await compute.reservations.create(seeded.tenant_id, seeded.pool_id, 2)
            await make_sick(compute, seeded, booked.node_id, 1, XID_79)
            return seeded, booked.id
        finally:
            await compute.close()

    _, reservation_id = asyncio.run(world())
    runner = CliRunner(env={"COLUMNS": "200"})
    shown = runner.invoke(app, ["nodes", "get", "node-a", "--json"])
    assert shown.exit_code == 0, shown.output
    node = json.loads(shown.stdout)
    assert [d["health"]["state"] for d in node["devices"]] == ["healthy", "reset-needed"]
    assert node["devices"][1]["health"]["xid"] == 79
    text = runner.invoke(app, ["nodes", "get", node["id"]])
    assert text.exit_code == 0, text.output
    assert "reset-needed" in text.stdout and "xid" in text.stdout and "79" in text.stdout
    assert "UNTIL" in text.stdout

    got = runner.invoke(app, ["reservations", "get", reservation_id, "--json"])
    assert got.exit_code == 0, got.output
    assert [d["health"]["state"] for d in json.loads(got.stdout)["devices"]] == ["healthy", "reset-needed"]
    table = runner.invoke(app, ["reservations", "get", reservation_id])
    assert table.exit_code == 0 and "degraded" in table.stdout and "reset-needed" in table.stdout

    missing = runner.invoke(app, ["nodes", "get", "no-such-node"])
    assert missing.exit_code == 1 and "no node 'no-such-node'" in missing.output and "Traceback" not in missing.output
