"""Kept list answers (ops.list_answers) are never stale: a write committed on any replica, by any code path,
is in the very next list on every replica; a tenant's writes leave other tenants' kept answers alone; and
PostgreSQL's version moves cannot deadlock writers (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ops_world import SECRET, Seeded, cache_keys, reads, seed
from pydantic_core import to_json
from sqlalchemy import text

from better_compute.api import create_app
from better_compute.ops import list_answers, nodes, pools, reservations
from better_compute.server import Compute, better_compute
from better_compute.store import Database

LISTS = ("/v1/pools", "/v1/nodes", "/v1/reservations")


@dataclass
class Replica:
    compute: Compute
    client: httpx.AsyncClient

    async def list(self, path: str, key: str) -> bytes:
        answer = await self.client.get(path, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        return answer.content


@dataclass
class World:
    a: Replica
    b: Replica
    seeded: Seeded
    key: str
    booking: str

    async def fresh(self, path: str, tenant_id: str | None = None) -> bytes:
        """The list as the services read it now, nothing kept: what every replica must answer."""
        compute, tenant = self.a.compute, tenant_id or self.seeded.tenant_id
        read: dict[str, Callable[[Compute, str], Awaitable[list[Any]]]] = {
            "/v1/pools": pools.list_pools,
            "/v1/nodes": nodes.list_nodes,
            "/v1/reservations": reservations.list_reservations,
        }
        return to_json(await read[path](compute, tenant))

    async def raw(self, sql: str, **params: Any) -> None:
        """A write on replica A around every service: straight SQL in a transaction of its own."""
        async with self.a.compute.db.engine.begin() as conn:
            await conn.execute(text(sql), params)


@pytest.fixture
async def world(database: Database, database_url: str) -> AsyncIterator[World]:
    """Two replicas of one database (A and B, each its own Compute and app): tenant acme with a pool of two
    ready nodes (node-a connected) and a booking on node-a."""
    a = better_compute(database=database_url, secret=SECRET)
    b = better_compute(database=database_url, secret=SECRET)
    seeded = await seed(a)
    booking = await a.reservations.create(seeded.tenant_id, seeded.pool_id, 1)
    _, key = await a.iam.create_api_key(seeded.tenant_id)
    try:
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(a)), base_url="http://a") as on_a,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(b)), base_url="http://b") as on_b,
        ):
            yield World(Replica(a, on_a), Replica(b, on_b), seeded, key, booking.id)
    finally:
        await a.close()
        await b.close()


async def _kept(world: World) -> dict[str, bytes]:
    """Each list as both replicas answer it, asked twice so that it is kept."""
    answers = {}
    for path in LISTS:
        for _ in range(2):
            answers[path] = await world.b.list(path, world.key)
            assert await world.a.list(path, world.key) == answers[path] == await world.fresh(path)
    return answers


async def test_a_write_through_the_services_on_one_replica_is_in_the_next_list_on_the_other(world: World) -> None:
    compute, tenant = world.a.compute, world.seeded.tenant_id
    site = (await compute.sites.list(tenant))[0]
    writes: list[Callable[[], Awaitable[Any]]] = [
        lambda: compute.pools.create(tenant, "more", site.id, "metal-host", "H100", {}),
        lambda: compute.reservations.create(tenant, world.seeded.pool_id, 1),
        lambda: compute.reservations.release(tenant, world.booking),
        lambda: compute.nodes.cordon(tenant, world.seeded.node_ids[1]),
    ]
    for write in writes:
        before = await _kept(world)
        await write()
        after = {path: await world.b.list(path, world.key) for path in LISTS}
        assert after != before
        assert after == {path: await world.fresh(path) for path in LISTS}


RAW_WRITES = [
    ("UPDATE compute_pools SET name = 'renamed' WHERE id = :pool", "/v1/pools"),
    ("UPDATE compute_nodes SET connected = NOT connected WHERE id = :node", "/v1/pools"),
    ("UPDATE compute_nodes SET last_seen_at = NULL WHERE id = :node", "/v1/nodes"),
    ("UPDATE compute_devices SET present = NOT present WHERE node_id = :other", "/v1/nodes"),
    ("UPDATE compute_devices SET health_reason = 'lost' WHERE reservation_id = :booking", "/v1/reservations"),
    ("UPDATE compute_reservations SET state = 'ended' WHERE id = :booking", "/v1/reservations"),
    (
        "INSERT INTO compute_devices (id, node_id, idx, uuid, model, present) "
        "SELECT 'dev-raw', id, 9, 'GPU-raw', 'H100', true FROM compute_nodes WHERE id = :other",
        "/v1/nodes",
    ),
    ("DELETE FROM compute_devices WHERE id = 'dev-raw'", "/v1/nodes"),
]


async def test_a_raw_write_to_each_listed_table_on_one_replica_is_in_the_next_list_on_the_other(world: World) -> None:
    """The version is the database's own (triggers): a write of any code path, even plain SQL, moves it."""
    params = {
        "pool": world.seeded.pool_id,
        "node": world.seeded.node_ids[0],
        "other": world.seeded.node_ids[1],
        "booking": world.booking,
    }
    for sql, changed in RAW_WRITES:
        before = await _kept(world)
        await world.raw(sql, **{k: v for k, v in params.items() if f":{k}" in sql})
        after = {path: await world.b.list(path, world.key) for path in LISTS}
        assert after[changed] != before[changed], sql
        assert after == {path: await world.fresh(path) for path in LISTS}, sql


async def test_a_tenants_writes_leave_another_tenants_kept_lists_alone(world: World) -> None:
    compute = world.a.compute
    globex = await compute.iam.create_tenant("globex")
    _, their_key = await compute.iam.create_api_key(globex.id)
    site = await compute.sites.create(globex.id, "k8s", "shared", "tor1")
    await compute.pools.create(globex.id, "theirs", site.id, "metal-host", "H100", {})
    ours = await _kept(world)
    theirs = await world.b.list("/v1/pools", their_key)
    await world.b.list("/v1/pools", their_key)  # kept
    await compute.pools.create(globex.id, "theirs-too", site.id, "metal-host", "H100", {})
    with reads(world.b.compute) as seen:
        assert {path: await world.b.list(path, world.key) for path in LISTS} == ours
    listed = _lists_reads(seen.selects)
    assert len(listed) == len(LISTS) and all("compute_list_versions" in s for s in listed)
    now_theirs = await world.b.list("/v1/pools", their_key)
    assert now_theirs != theirs and now_theirs == await world.fresh("/v1/pools", globex.id)
    assert b"theirs" not in await world.b.list("/v1/pools", world.key)


async def test_an_answer_read_across_a_commit_is_read_again(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that commits between a request's version and its rows is in those rows, and the answer is kept
    under the version read before it: the next request finds the version moved and reads again. (Kept under the
    newer version, rows read before a write would be answered after it.)"""
    await _kept(world)
    pool = world.seeded.pool_id
    await world.raw("UPDATE compute_pools SET name = 'moved' WHERE id = :pool", pool=pool)  # the next read misses
    read_version = list_answers.list_version
    wrote: list[bool] = []

    async def then_a_write(session: Any, tenant_id: str) -> int | None:
        version = await read_version(session, tenant_id)
        if not wrote:
            wrote.append(True)
            await world.raw("UPDATE compute_pools SET name = 'between' WHERE id = :pool", pool=pool)
        return version

    monkeypatch.setattr(list_answers, "list_version", then_a_write)
    across = await world.b.list("/v1/pools", world.key)
    monkeypatch.undo()
    assert wrote and across == await world.fresh("/v1/pools") and b'"between"' in across
    with reads(world.b.compute) as seen:
        assert await world.b.list("/v1/pools", world.key) == across
    assert len(_lists_reads(seen.selects)) == 2  # the version had moved: the rows were read again


async def test_writers_of_two_tenants_in_opposite_orders_both_commit(world: World) -> None:
    """PostgreSQL: each of two transactions writes a row of tenant X and one of tenant Y, in opposite orders,
    while the other is open. Version rows taken at each write would deadlock them (X held, Y wanted, and the
    reverse); moved at COMMIT in tenant order, both commit and each moves both versions."""
    if not world.a.compute.db.is_postgres:
        pytest.skip("SQLite has one writer at a time")
    compute = world.a.compute
    globex = await compute.iam.create_tenant("globex")
    site = await compute.sites.create(globex.id, "k8s", "shared", "tor1")
    ours = world.seeded.tenant_id
    acme_site = (await compute.sites.list(ours))[0]
    pairs = []
    for tenant, site_id in ((ours, acme_site.id), (globex.id, site.id)):
        first = await compute.pools.create(tenant, "first", site_id, "metal-host", "H100", {})
        second = await compute.pools.create(tenant, "second", site_id, "metal-host", "H100", {})
        pairs.append((first.id, second.id))
    versions = await _versions(compute, ours, globex.id)
    engine = compute.db.engine
    rename = text("UPDATE compute_pools SET gpu_model = 'A100' WHERE id = :id")
    async with engine.connect() as one, engine.connect() as two:
        await one.begin()
        await two.begin()
        await one.execute(rename, {"id": pairs[0][0]})  # acme, then globex
        await two.execute(rename, {"id": pairs[1][1]})  # globex, then acme
        await asyncio.gather(one.execute(rename, {"id": pairs[1][0]}), two.execute(rename, {"id": pairs[0][1]}))
        await asyncio.gather(one.commit(), two.commit())
    assert await _versions(compute, ours, globex.id) == [v + 2 for v in versions]


def _lists_reads(selects: list[str]) -> list[str]:
    """The lists' own reads (on PostgreSQL a key is verified again while no revoke listener runs)."""
    return [s for s in selects if "iam_api_keys" not in s]


async def _versions(compute: Compute, *tenants: str) -> list[int]:
    async with compute.db.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT tenant_id, version FROM compute_list_versions WHERE tenant_id IN (:a, :b)"),
            {"a": tenants[0], "b": tenants[1]},
        )
        found = dict(rows.all())
    return [found[t] for t in tenants]


async def test_requests_that_arrive_during_a_version_read_share_the_next_one(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version read in flight began before a request that arrives during it, so it may miss a write that
    request's client saw commit: such requests wait for the next read, and share it (one per tenant at a time)."""
    await cache_keys(world.b.compute, monkeypatch)  # the requests reach their lists in the same turns
    await _kept(world)
    read_version = list_answers.list_version
    held, reads = asyncio.Event(), []

    async def gated(session: Any, tenant_id: str) -> int | None:
        reads.append(tenant_id)
        if len(reads) == 1:
            await held.wait()  # the first read is in flight until the write below has committed
        return await read_version(session, tenant_id)

    monkeypatch.setattr(list_answers, "list_version", gated)
    first = asyncio.create_task(world.b.list("/v1/pools", world.key))
    while not reads:
        await asyncio.sleep(0)
    await world.raw("UPDATE compute_pools SET name = 'renamed' WHERE id = :pool", pool=world.seeded.pool_id)
    later = [asyncio.create_task(world.b.list(path, world.key)) for path in LISTS]
    waiting = list_answers.ListAnswers.of(world.b.compute.db)._next
    while world.seeded.tenant_id not in waiting:  # a later request waits for the next read
        await asyncio.sleep(0)
    for _ in range(100):
        await asyncio.sleep(0)
    assert len(reads) == 1, "the later requests wait for the first read to end"
    held.set()
    answers = await asyncio.gather(first, *later)
    assert len(reads) == 2, "one read for all three"
    assert [b'"renamed"' in answer for answer in answers[1:]] == [True] * len(LISTS)
    monkeypatch.undo()
    assert answers[1:] == [await world.fresh(path) for path in LISTS]
