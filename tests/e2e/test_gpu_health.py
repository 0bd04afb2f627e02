"""GPU health end to end (DOKS world, the real bcd on every Node): an XID 79 injected into one GPU of a
booked Node takes that GPU off the market, the kubelet sees it Unhealthy, the reservation reads
degraded over HTTP and the CLI, and the Node's other GPUs stay booked or bookable; operators read the
GPU `reset-needed` with its reason and XID in `nodes get` and `reservations get` (HTTP and CLI), in
doctor and in /metrics; a transient fault reads `rechecking` until the clean period ends, then healthy."""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from adopt_world import sized
from e2e_world import SECRET, World
from typer.testing import CliRunner

from better_compute.cli.main import app
from better_compute.compute import Reservation
from better_compute.core.errors import ComputeError

JOIN_EVERY = 30.0
"""How often a world being built looks whether its Nodes joined: no bound is asserted on how long it took."""


async def joined(world: World, count: int) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except Exception:
        return False
    return view.state == "ready" and len(view.nodes_joined) == count == len(view.nodes_listed)


async def api_get(world: World, key: str, path: str) -> Any:
    plane = world.cloud.control_plane
    async with httpx.AsyncClient(base_url=plane.url, verify=ssl.create_default_context(cadata=plane.ca_pem)) as http:
        answer = await http.get(path, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return answer.json() if path != "/metrics" else answer.text


async def reservations(world: World, key: str) -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = await api_get(world, key, "/v1/reservations")
    return body


def health_of(view: dict[str, Any], uuid: str) -> dict[str, Any]:
    """One GPU's health in a `nodes get` or `reservations get` view."""
    (device,) = [d for d in view["devices"] if d["uuid"] == uuid]
    health: dict[str, Any] = device["health"]
    return health


async def test_an_xid_79_on_one_gpu_of_a_booked_node_quarantines_that_gpu_only(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="both Nodes joined", every=JOIN_EVERY)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    _, key = await world.compute.iam.create_api_key(world.tenant_id)
    plane = world.cloud.control_plane
    async with httpx.AsyncClient(base_url=plane.url, verify=ssl.create_default_context(cadata=plane.ca_pem)) as http:
        made = await http.post(
            "/v1/reservations", json={"pool": "gpu-fleet", "gpus": 4}, headers={"Authorization": f"Bearer {key}"}
        )
    assert made.status_code == 201, made.text
    booking = made.json()
    node = await world.compute.nodes.get(world.tenant_id, booking["nodeId"])
    name = node.kubernetes_node_name
    assert name is not None
    held = [d for d in node.devices if d.reservation_id == booking["id"]]
    sick = held[1]
    kube = world.kube_cluster_of(name)

    async def advertised_all() -> bool:
        return len(kube.kubelet.advertised(name)) == 4

    await world.until(advertised_all, minutes=5, what="bcd advertises the booking's 4 GPUs", every=1)
    kube.kubelet.gpu_fault(name, sick.index, xid=79)  # the emulator's door to the node's NVML

    async def degraded() -> bool:
        (view,) = await reservations(world, key)
        return view["health"] == "degraded"

    await world.until(degraded, minutes=2, what="the reservation reads degraded", every=1)
    (view,) = await reservations(world, key)
    assert view["state"] == "active", "the tenant keeps the rest of its GPUs"
    assert view["degradedGpus"] == [{"uuid": sick.uuid, "index": sick.index, "reason": "xid", "xid": 79}]
    assert sorted(kube.kubelet.advertised(name)) == sorted(d.uuid for d in held if d.uuid != sick.uuid), (
        "the kubelet sees the sick GPU Unhealthy; the others stay Healthy"
    )
    after = await world.compute.nodes.get(world.tenant_id, node.id)
    assert [(d.uuid, d.health_reason, d.health_xid) for d in after.devices if not d.healthy] == [(sick.uuid, "xid", 79)]

    # The Node's 4 free GPUs and the other Node's 8 are still bookable: 12 in all, and not one more.
    await world.compute.quotas.set(world.tenant_id, "H100", 64)
    more = [await world.compute.reservations.create(world.tenant_id, pool.id, 4) for _ in range(3)]
    assert sorted(r.node_id for r in more).count(node.id) == 1
    with pytest.raises(ComputeError) as refused:
        await world.compute.reservations.create(world.tenant_id, pool.id, 1)
    assert refused.value.reason == "no-capacity"
    assert all(r.health == "healthy" for r in more)

    # The CLI reads it the same way.
    ca = tmp_path / "ca.pem"
    ca.write_text(plane.ca_pem)
    for var, value in {
        "BC_DATABASE_URL": world.compute.db.url,
        "BC_SECRET": SECRET,
        "BC_BASE_URL": plane.url,
        "BC_CONTROL_PLANE_CA_FILE": str(ca),
        "BC_SQLITE_SHARED": "1",
        "BC_API_KEY": key,
    }.items():
        monkeypatch.setenv(var, value)
    for var in ("BC_APP", "BC_BCD_IMAGE", "BC_TENANT", "BC_DATA_DIR"):
        monkeypatch.delenv(var, raising=False)
    listed = await asyncio.to_thread(CliRunner().invoke, app, ["reservations", "list", "--tenant", "acme", "--json"])
    assert listed.exit_code == 0, listed.output
    by_id = {r["id"]: r for r in json.loads(listed.stdout)}
    assert by_id[booking["id"]]["health"] == "degraded"
    assert by_id[booking["id"]]["degradedGpus"][0]["xid"] == 79

    # Operators see the GPU reset-needed, with its reason and XID, in nodes get and reservations get.
    node_view = await api_get(world, key, f"/v1/nodes/{node.id}")
    held_out = health_of(node_view, sick.uuid)
    assert (held_out["state"], held_out["reason"], held_out["xid"]) == ("reset-needed", "xid", 79)
    assert held_out["since"] is not None and held_out["until"] is None
    assert {health_of(node_view, d.uuid)["state"] for d in node.devices if d.uuid != sick.uuid} == {"healthy"}
    booked_view = await api_get(world, key, f"/v1/reservations/{booking['id']}")
    assert health_of(booked_view, sick.uuid) == held_out
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["nodes", "get", name, "--tenant", "acme", "--json"])
    assert shown.exit_code == 0, shown.output
    assert health_of(json.loads(shown.stdout), sick.uuid) == held_out
    table = await asyncio.to_thread(
        CliRunner(env={"COLUMNS": "220"}).invoke, app, ["reservations", "get", booking["id"], "--tenant", "acme"]
    )
    assert table.exit_code == 0, table.output
    (line,) = [row for row in table.stdout.splitlines() if sick.uuid in row]
    assert "reset-needed" in line and "xid" in line and "79" in line

    # Doctor (HTTP, and the CLI asking the server) names the node, the GPU and the reason; /metrics counts it.
    doctor = await api_get(world, key, "/v1/doctor")
    (finding,) = [f for f in doctor["findings"] if f["code"] == "compute.gpu-quarantined"]
    assert name in finding["message"] and f"GPU {sick.index} ({sick.uuid})" in finding["message"]
    assert "reset-needed: xid 79" in finding["message"]
    told = await asyncio.to_thread(CliRunner(env={"COLUMNS": "400"}).invoke, app, ["doctor"])
    assert "compute.gpu-quarantined" in told.stdout and sick.uuid in told.stdout, told.output
    metrics = await api_get(world, key, "/metrics")
    assert 'better_compute_gpus_quarantined{state="reset-needed"} 1.0' in metrics
    assert 'better_compute_gpus_unhealthy{reason="xid"} 1.0' in metrics


COARSE = 30.0
NEAR = 15.0
"""How `WatchedGpu.until_health` steps towards a bound: COARSE seconds at a time up to NEAR seconds short of it."""


@dataclass
class WatchedGpu:
    """The first GPU of the first Node of a joined DOKS pool, and its health as the control plane reads it."""

    world: World
    pool_id: str
    node_id: str
    name: str
    index: int
    uuid: str

    def fault(self, **faults: Any) -> None:
        """Inject into the GPU through its machine's NVML (the kubelet simulator's door)."""
        self.world.kube_cluster_of(self.name).kubelet.gpu_fault(self.name, self.index, **faults)

    def clear(self) -> None:
        self.world.kube_cluster_of(self.name).kubelet.clear_gpu_fault(self.name, self.index)

    async def health(self) -> str | None:
        devices = (await self.world.compute.nodes.get(self.world.tenant_id, self.node_id)).devices
        return next(d.health_reason for d in devices if d.uuid == self.uuid)

    async def until_health(
        self, reason: str | None, *, minutes: float, what: str, not_before: float = 0.0, since: datetime | None = None
    ) -> float:
        """Step until the GPU reads `reason`; the simulated seconds it took, counted from `since` (default now).

        Where it must not read `reason` before `not_before` seconds, the steps are COARSE seconds long,
        looking at the GPU after each, up to NEAR seconds short of that bound, and 1 second long from
        there: a GPU back early is seen at the first look after it (and the caller's bound fails on the
        time answered), one back on time is seen within a second of it."""
        clock = self.world.cloud.clock
        called = clock.now()
        start = since or called

        def elapsed() -> float:
            return (clock.now() - start).total_seconds()

        async def reached() -> bool:
            return await self.health() == reason

        while elapsed() < not_before - NEAR:
            if await reached():
                return elapsed()
            await self.world.step(min(COARSE, not_before - NEAR - elapsed()))
        taken = (clock.now() - called).total_seconds() / 60
        await self.world.until(reached, minutes=minutes - taken, what=what, every=1)
        return elapsed()

    async def both_nodes_book(self) -> list[Reservation]:
        """Both Nodes take an 8-GPU booking: every GPU is on sale again."""
        await self.world.compute.quotas.set(self.world.tenant_id, "H100", 64)
        both = [await self.world.compute.reservations.create(self.world.tenant_id, self.pool_id, 8) for _ in range(2)]
        assert {r.node_id for r in both} == {n.id for n in await self.world.compute.nodes.list(self.world.tenant_id)}
        return both


async def watched_gpu(world: World, provider: str = "doks") -> WatchedGpu:
    await world.compute.fleet.apply(sized(world.document(provider), provider, 2), tenant_id=world.tenant_id)
    await world.until(lambda: joined(world, 2), minutes=60, what="both Nodes joined", every=JOIN_EVERY)
    pool = await world.compute.pools.get_by_name(world.tenant_id, "gpu-fleet")
    node = (await world.compute.nodes.list(world.tenant_id, pool_id=pool.id))[0]
    assert node.kubernetes_node_name is not None
    gpu = node.devices[0]
    return WatchedGpu(world, pool.id, node.id, node.kubernetes_node_name, gpu.index, gpu.uuid)


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
async def test_a_transient_fault_returns_the_gpu_after_the_clean_period_and_not_before(
    world: World, provider: str
) -> None:
    gpu = await watched_gpu(world, provider)
    _, key = await world.compute.iam.create_api_key(world.tenant_id)

    async def state() -> dict[str, Any]:
        return health_of(await api_get(world, key, f"/v1/nodes/{gpu.node_id}"), gpu.uuid)

    gpu.fault(ecc=2)
    await gpu.until_health("double-bit-ecc", minutes=1, what="the ECC fault reaches the control plane")
    assert (await state())["state"] == "unhealthy"
    gpu.clear()
    cleared = world.cloud.clock.now()

    async def rechecking() -> bool:
        return (await state())["state"] == "rechecking"

    await world.until(rechecking, minutes=1, what="the GPU reads rechecking", every=1)
    until = datetime.fromisoformat((await state())["until"])
    assert timedelta(seconds=600) <= until - cleared <= timedelta(seconds=615), "back 10 clean minutes on"
    waited = await gpu.until_health(None, minutes=15, what="the GPU back on sale", not_before=600, since=cleared)
    assert 600 <= waited <= 615, f"back after {waited} s: the clean period is 10 minutes of healthy readings"
    assert world.cloud.clock.now() >= until, "not before the time it said"
    returned = await state()
    assert (returned["state"], returned["reason"], returned["until"]) == ("healthy", None, None)
    await gpu.both_nodes_book()


async def test_a_lost_gpu_stays_out_until_it_is_reset_then_returns_after_the_clean_period(world: World) -> None:
    """A GPU that fell off the bus does not come back by itself; reset (`nvidia-smi -r`: it answers NVML
    again, no reboot), it returns after the clean period, not before, and takes bookings. The Node is
    booked meanwhile, so the substrate waits to replace its machine and keeps it once the GPU is reset."""
    gpu = await watched_gpu(world)
    held = await gpu.both_nodes_book()
    gpu.fault(xid=79, lost=True)
    await gpu.until_health("gpu-lost", minutes=1, what="the lost GPU reaches the control plane")
    start = world.cloud.clock.now()

    async def an_hour_on() -> bool:
        return (world.cloud.clock.now() - start).total_seconds() >= 3600

    await world.until(an_hour_on, minutes=61, what="an hour passes", every=60)
    assert await gpu.health() == "gpu-lost", "held: a lost GPU does not come back by itself"
    gpu.clear()  # the GPU was reset
    waited = await gpu.until_health(None, minutes=15, what="the GPU back on sale", not_before=600)
    assert 600 <= waited <= 615, f"back after {waited} s: after a reset, 10 minutes of healthy readings"

    async def kept() -> bool:
        return (await world.compute.nodes.get(world.tenant_id, gpu.node_id)).state == "ready"

    await world.until(kept, minutes=2, what="the Node uncordoned: its machine stays")
    for booking in held:
        await world.compute.reservations.release(world.tenant_id, booking.id)
    await gpu.both_nodes_book()
