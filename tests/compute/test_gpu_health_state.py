"""Each GPU's health state as the control plane keeps it (unhealthy, rechecking until a time, reset-needed),
since when on its clock, the quarantines and returns counted, and the quarantined GPUs doctor names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import REGISTRY

from better_compute.compute import Node, retire
from better_compute.compute.health import quarantine_findings, refresh_gauges
from better_compute.compute.reservations import report_inventory

from .conftest import World


def with_health(node: Node, index: int, health: dict[str, Any] | None) -> dict[str, Any]:
    gpus = [dict(g) for g in node.inventory["gpus"]]
    gpus[index]["health"] = health or {"healthy": True}
    return {**node.inventory, "gpus": gpus}


async def report(world: World, node: Node, inventory: dict[str, Any]) -> Node:
    async with world.compute.nodes.transaction() as session:
        return await report_inventory(session, node.id, inventory, world.clock.now())


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_gpu_keeps_its_state_since_the_change_and_the_moves_are_counted(world: World) -> None:
    node = await world.node("n1", 2)
    first = (await world.compute.nodes.get(world.tenant.id, node.id)).devices[0]
    assert (first.health_state, first.health_since, first.health_until) == ("healthy", world.clock.now(), None)
    quarantines = sample("better_compute_gpu_quarantines_total", reason="xid")
    returns = sample("better_compute_gpu_returns_total")

    world.clock.advance(60)
    held_at = world.clock.now()
    held = {"healthy": False, "reason": "xid", "xid": 79, "resetNeeded": True}
    gpu = (await report(world, node, with_health(node, 0, held))).devices[0]
    assert (gpu.health_state, gpu.health_reason, gpu.health_xid, gpu.health_since) == (
        "reset-needed",
        "xid",
        79,
        held_at,
    )
    world.clock.advance(60)
    gpu = (await report(world, node, with_health(node, 0, held))).devices[0]
    assert gpu.health_since == held_at, "the same state again keeps its since"
    assert sample("better_compute_gpu_quarantines_total", reason="xid") == quarantines + 1

    until = datetime(2026, 12, 2, 10, 10, tzinfo=UTC)
    rechecking = {"healthy": False, "reason": "xid", "xid": 79, "recheckingUntil": "2026-12-02T11:10:00+01:00"}
    gpu = (await report(world, node, with_health(node, 0, rechecking))).devices[0]
    assert (gpu.health_state, gpu.health_since, gpu.health_until) == ("rechecking", world.clock.now(), until)
    assert not gpu.present, "a rechecking GPU is still off sale"

    world.clock.advance(600)
    gpu = (await report(world, node, with_health(node, 0, None))).devices[0]
    assert (gpu.health_state, gpu.health_since, gpu.health_until, gpu.present) == (
        "healthy",
        world.clock.now(),
        None,
        True,
    )
    assert sample("better_compute_gpu_returns_total") == returns + 1
    assert sample("better_compute_gpu_quarantines_total", reason="xid") == quarantines + 1


async def test_doctor_and_the_gauges_name_the_quarantined_gpus_of_live_nodes(world: World) -> None:
    node = await world.node("n1", 3)
    inventory = with_health(node, 0, {"healthy": False, "reason": "xid", "xid": 79, "resetNeeded": True})
    inventory["gpus"][1]["health"] = {"healthy": False, "reason": "double-bit-ecc"}
    inventory["gpus"][2]["health"] = {
        "healthy": False,
        "reason": "hw-slowdown",
        "recheckingUntil": (world.clock.now() + timedelta(minutes=7)).isoformat(),
    }
    await report(world, node, inventory)

    (mine,) = {g.node_id for g in await world.compute.nodes.quarantined(tenant_id=world.tenant.id)}
    assert mine == node.id
    assert await world.compute.nodes.quarantined(tenant_id="another-tenant") == []
    findings = quarantine_findings(await world.compute.nodes.quarantined(tenant_id=world.tenant.id))
    assert [f.code for f in findings] == ["compute.gpu-quarantined"] * 3
    held = findings[0].message
    assert "node n1" in held and "GPU 0 (GPU-n1-0)" in held and "reset-needed: xid 79" in held and "reset" in held
    assert "unhealthy: double-bit-ecc" in findings[1].message
    assert "rechecking: hw-slowdown" in findings[2].message and "returns at" in findings[2].message

    async with world.db.session() as session:
        await refresh_gauges(session)
    assert [
        sample("better_compute_gpus_quarantined", state=s) for s in ("unhealthy", "rechecking", "reset-needed")
    ] == [
        1,
        1,
        1,
    ]
    assert sample("better_compute_gpus_unhealthy", reason="xid") == 1
    assert sample("better_compute_gpus_unhealthy", reason="double-bit-ecc") == 1
    assert sample("better_compute_gpus_unhealthy", reason="hw-slowdown") == 0, "rechecking: the fault cleared"

    await world.compute.nodes.cordon(world.tenant.id, node.id)
    async with world.compute.reservations.transaction() as session:
        await retire(session, node.id, world.clock.now(), reason="its machine was replaced")
    assert await world.compute.nodes.quarantined(tenant_id=world.tenant.id) == [], "a retired node's GPUs are gone"
    async with world.db.session() as session:
        await refresh_gauges(session)
    assert sample("better_compute_gpus_quarantined", state="reset-needed") == 0
    assert sample("better_compute_gpus_unhealthy", reason="xid") == 0
