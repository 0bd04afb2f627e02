"""The list routes read in one session with one statement (after the tenant's list version, ops.list_answers),
whatever the fleet's size, and answer what the domain services say: every field, in order, the tenant's
objects only (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ops_world import SECRET, Reads, Seeded, cache_keys, reads, seed

from better_compute.api import create_app
from better_compute.compute import (
    SPOT_LABEL,
    Node,
    Pool,
    Reservation,
    mark_ready,
    register_node,
    retire,
    set_connected,
    set_system_label,
)
from better_compute.compute.reservations import report_inventory
from better_compute.fleet import fleet_module
from better_compute.server import Compute, better_compute
from better_compute.store import Database


@dataclass
class World:
    compute: Compute
    client: httpx.AsyncClient
    seeded: Seeded

    def reads(self) -> AbstractContextManager[Reads]:
        return reads(self.compute)

    async def get(self, path: str, **params: str) -> httpx.Response:
        response = await self.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response


async def _node(compute: Compute, pool_id: str, name: str, inventory: dict[str, Any], *, connected: bool) -> str:
    async with compute.reservations.transaction() as session:
        now = compute.clock.now()
        node = await register_node(session, now=now, pool_id=pool_id, name=name, inventory=inventory, labels={})
        await set_connected(session, node.id, connected, now)
    return node.id


@pytest.fixture
async def world(database: Database, database_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    """acme: gpu-fleet (node-a connected and ready, node-b ready, node-c retired, an active and a released
    booking), 6 more pools of one joining node each, an empty one and an archived one; globex: its own pool,
    node and booking, which acme never sees. No lifespan: no engine worker reads beside the requests."""
    compute = better_compute(database=database_url, secret=SECRET, modules=[fleet_module()])
    seeded = await seed(compute)
    tenant = seeded.tenant_id
    site = (await compute.sites.list(tenant))[0]
    retired = await _node(compute, seeded.pool_id, "node-c", {"os": {"hostname": "host-c"}}, connected=False)
    async with compute.reservations.transaction() as session:
        await retire(session, retired, compute.clock.now(), reason="test")
    booked = await compute.reservations.create(tenant, seeded.pool_id, 1)
    released = await compute.reservations.create(tenant, seeded.pool_id, 2)
    await compute.reservations.release(tenant, released.id)
    for index in range(6):
        pool = await compute.pools.create(tenant, f"more-{index}", site.id, "metal-host", "H100", {"n": index})
        await _node(compute, pool.id, f"more-{index}-node", {}, connected=index % 2 == 0)
    await compute.pools.create(tenant, "empty", site.id, "metal-host", None, {"note": "ünïcode"})
    old = await compute.pools.create(tenant, "old", site.id, "metal-host", "A100", {})
    await compute.pools.archive(tenant, old.id)
    globex = await compute.iam.create_tenant("globex")
    their_site = await compute.sites.create(globex.id, "k8s", "shared", "tor1")
    theirs = await compute.pools.create(globex.id, "gpu-fleet", their_site.id, "metal-host", "H100", {})
    await _node(compute, theirs.id, "node-a", {"os": {"kubernetesNodeName": "theirs"}}, connected=True)
    assert booked.state == "active"
    _, key = await compute.iam.create_api_key(tenant)
    await cache_keys(compute, monkeypatch)
    transport = httpx.ASGITransport(app=create_app(compute))
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            await client.get("/v1/whoami")  # the key is verified once; later requests use the cache
            yield World(compute, client, seeded)
    finally:
        await compute.close()


LISTS = [
    ("/v1/pools", {}),
    ("/v1/pools", {"archived": "true"}),
    ("/v1/nodes", {}),
    ("/v1/nodes", {"retired": "true"}),
    ("/v1/reservations", {}),
    ("/v1/reservations", {"state": "active"}),
]
BY_POOL = [("/v1/nodes", {"pool": "gpu-fleet"}), ("/v1/reservations", {"pool": "gpu-fleet"})]


@pytest.mark.parametrize(("path", "params"), LISTS)
async def test_a_list_request_is_its_version_and_one_statement_with_no_begin_then_its_version_alone(
    world: World, path: str, params: dict[str, str]
) -> None:
    with world.reads() as first:
        listed = await world.get(path, **params)
    with world.reads() as again:
        assert (await world.get(path, **params)).content == listed.content
    assert (first.checkouts, len(first.selects), first.begins) == (2, 2, 0), first.selects  # the version, the rows
    assert "compute_list_versions" in first.selects[0]
    assert (again.checkouts, again.selects, again.begins) == (1, first.selects[:1], 0)


async def test_a_pool_by_name_is_one_statement_with_no_begin(world: World) -> None:
    with world.reads() as reads:
        await world.get("/v1/pools/gpu-fleet")
    assert (reads.checkouts, len(reads.selects), reads.begins) == (1, 1, 0), reads.selects


@pytest.mark.parametrize(("path", "params"), BY_POOL)
async def test_a_list_by_pool_name_reads_the_pool_in_the_same_session(
    world: World, path: str, params: dict[str, str]
) -> None:
    with world.reads() as first:
        listed = await world.get(path, **params)
    with world.reads() as again:
        assert (await world.get(path, **params)).content == listed.content
    begins = 0 if world.compute.db.is_postgres else 1  # the pool and its rows read one snapshot
    assert (first.checkouts, len(first.selects), first.begins) == (2, 3, begins), first.selects
    assert (again.checkouts, again.selects, again.begins) == (1, first.selects[:1], 0)


def _pool(pool: Pool, nodes: list[Node]) -> dict[str, Any]:
    live = [n for n in nodes if n.pool_id == pool.id and n.state != "retired"]
    return {
        "id": pool.id,
        "name": pool.name,
        "state": pool.state,
        "class": pool.pool_class,
        "gpuModel": pool.gpu_model,
        "siteId": pool.site_id,
        "nodes": len(live),
        "connectedNodes": sum(n.connected for n in live),
        "readyNodes": sum(n.state == "ready" for n in live),
        "policy": pool.policy,
        "createdAt": pool.created_at.isoformat(),
        "updatedAt": pool.updated_at.isoformat(),
    }


def _node_view(node: Node, names: dict[str, str]) -> dict[str, Any]:
    return {
        "id": node.id,
        "name": node.name,
        "pool": names[node.pool_id],
        "poolId": node.pool_id,
        "state": node.state,
        "connected": node.connected,
        "lastSeenAt": node.last_seen_at.isoformat() if node.last_seen_at else None,
        "labels": node.labels,
        "systemLabels": node.system_labels,
        "gpus": sum(d.present for d in node.devices),
        "kubernetesNodeName": node.kubernetes_node_name,
    }


def _reservation(r: Reservation, names: dict[str, str]) -> dict[str, Any]:
    return {
        "id": r.id,
        "pool": names[r.pool_id],
        "poolId": r.pool_id,
        "nodeId": r.node_id,
        "gpuModel": r.gpu_model,
        "gpuCount": r.gpu_count,
        "binding": r.binding,
        "spot": r.spot,
        "state": r.state,
        "health": r.health,
        "degradedGpus": [],
        "createdAt": r.created_at.isoformat(),
        "endedAt": r.ended_at.isoformat() if r.ended_at else None,
    }


def _body(views: list[dict[str, Any]] | dict[str, Any]) -> str:
    return json.dumps(views, ensure_ascii=False, separators=(",", ":"))


async def test_the_lists_answer_every_field_of_the_tenants_objects_in_order(world: World) -> None:
    compute, tenant = world.compute, world.seeded.tenant_id
    pools = await compute.pools.list(tenant, include_archived=True)
    every_node = await compute.nodes.list(tenant, include_retired=True)
    names = {p.id: p.name for p in pools}
    live_pools = [p for p in pools if p.state != "archived"]
    assert len(live_pools) == 8 and len(pools) == 9

    assert (await world.get("/v1/pools")).text == _body([_pool(p, every_node) for p in live_pools])
    assert (await world.get("/v1/pools", archived="true")).text == _body([_pool(p, every_node) for p in pools])
    fleet = next(p for p in pools if p.name == "gpu-fleet")
    assert (await world.get("/v1/pools/gpu-fleet")).text == _body(_pool(fleet, every_node))

    live_nodes = [n for n in every_node if n.state != "retired"]
    assert (await world.get("/v1/nodes")).text == _body([_node_view(n, names) for n in live_nodes])
    assert (await world.get("/v1/nodes", retired="true")).text == _body([_node_view(n, names) for n in every_node])
    in_fleet = [_node_view(n, names) for n in live_nodes if n.pool_id == fleet.id]
    assert (await world.get("/v1/nodes", pool="gpu-fleet")).text == _body(in_fleet)
    assert {n["kubernetesNodeName"] for n in json.loads((await world.get("/v1/nodes", retired="true")).text)} == {
        "node-a",
        "node-b",
        "host-c",
        None,
    }

    bookings = await compute.reservations.list(tenant)
    assert [r.state for r in bookings] == ["active", "released"]
    assert (await world.get("/v1/reservations")).text == _body([_reservation(r, names) for r in bookings])
    active = [_reservation(r, names) for r in bookings if r.state == "active"]
    assert (await world.get("/v1/reservations", state="active")).text == _body(active)
    in_pool = (await world.get("/v1/reservations", pool="gpu-fleet")).text
    assert in_pool == _body([_reservation(r, names) for r in bookings])


async def test_a_list_by_a_pool_that_is_not_the_tenants_is_not_found(world: World) -> None:
    other = await world.compute.iam.create_tenant("initech")
    _, key = await world.compute.iam.create_api_key(other.id)
    for path in ("/v1/nodes", "/v1/reservations"):
        answer = await world.client.get(path, params={"pool": "gpu-fleet"}, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 404
        assert answer.json()["error"] == {"code": "NOT_FOUND", "message": "no pool named 'gpu-fleet'", "path": "/name"}
    missing = await world.client.get("/v1/pools/nope")
    assert missing.json()["error"] == {"code": "NOT_FOUND", "message": "no pool named 'nope'", "path": "/name"}


def _degraded(r: Reservation) -> list[dict[str, Any]]:
    return [{"uuid": g.uuid, "index": g.index, "reason": g.reason, "xid": g.xid} for g in r.degraded_gpus]


async def test_every_optional_field_reads_byte_for_byte_as_the_domain_says(world: World) -> None:
    """Labels and system labels, a policy of nested values, floats and non-ASCII text, a pool with no GPU
    model, a Spot booking, a released one (endedAt), degraded GPUs with and without an XID, nodes seen and
    never seen, with and without a Kubernetes Node name: each list answers what the services say, in order."""
    compute, tenant = world.compute, world.seeded.tenant_id
    site = (await compute.sites.list(tenant))[0]
    policy = {"kubernetes": {"taints": [{"k": "ü", "v": 1.5e16}]}, "n": [1, 2.25, None, True], "s": '\u2028"<'}
    spotty = await compute.pools.create(tenant, "spotty", site.id, "metal-host", None, policy)
    gpus = [{"index": i, "uuid": f"GPU-s-{i}", "model": "NVIDIA H100 80GB HBM3"} for i in range(4)]
    inventory = {"os": {"hostname": "host-s"}, "gpus": gpus}
    async with compute.reservations.transaction() as session:
        now = compute.clock.now()
        node = await register_node(
            session, now=now, pool_id=spotty.id, name="spot-1", inventory=inventory, labels={"rack": "ä-1"}
        )
        await mark_ready(session, node.id, now)
        await set_connected(session, node.id, True, now)
        await set_system_label(session, node.id, SPOT_LABEL, "spot", now)
    booked = await compute.reservations.create(tenant, spotty.id, 2, spot=True)
    sick = {**inventory, "gpus": [dict(g) for g in gpus]}
    held = sorted(d.index for d in (await compute.nodes.get(tenant, node.id)).devices if d.reservation_id)
    sick["gpus"][held[0]]["health"] = {"healthy": False, "reason": "xid", "xid": 79}
    sick["gpus"][held[1]]["health"] = {"healthy": False, "reason": "lost"}
    async with compute.nodes.transaction() as session:
        await report_inventory(session, node.id, sick, compute.clock.now())

    pools = await compute.pools.list(tenant, include_archived=True)
    every_node = await compute.nodes.list(tenant, include_retired=True)
    names = {p.id: p.name for p in pools}
    live = [p for p in pools if p.state != "archived"]
    assert (await world.get("/v1/pools")).text == _body([_pool(p, every_node) for p in live])
    assert (await world.get("/v1/pools/spotty")).text == _body(_pool(spotty, every_node))
    assert (await world.get("/v1/nodes", retired="true")).text == _body([_node_view(n, names) for n in every_node])
    spot_node = json.loads((await world.get("/v1/nodes", pool="spotty")).text)
    assert spot_node[0]["systemLabels"] == {SPOT_LABEL: "spot"} and spot_node[0]["labels"] == {"rack": "ä-1"}

    bookings = await compute.reservations.list(tenant)
    got = next(r for r in bookings if r.id == booked.id)
    assert got.spot and [g.xid for g in got.degraded_gpus] == [79, None]
    assert any(r.ended_at is not None for r in bookings)
    expected = [{**_reservation(r, names), "degradedGpus": _degraded(r)} for r in bookings]
    assert (await world.get("/v1/reservations")).text == _body(expected)
