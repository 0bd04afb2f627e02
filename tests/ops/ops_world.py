"""A small operator's world in a database: a tenant, a pool with two nodes (one connected), a join token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import event

from better_compute.compute import mark_ready, register_node, set_connected
from better_compute.server import Compute, better_compute

SECRET = "an-operator-test-secret-of-32-chars-or-more"


def point_the_cli_at(monkeypatch: pytest.MonkeyPatch, database_url: str) -> None:
    """The environment `better-compute` reads, for a CLI run in-process against this database as tenant acme."""
    monkeypatch.setenv("BC_DATABASE_URL", database_url)
    monkeypatch.setenv("BC_SECRET", SECRET)
    monkeypatch.setenv("BC_TENANT", "acme")
    monkeypatch.delenv("BC_APP", raising=False)


@dataclass(frozen=True)
class Seeded:
    tenant_id: str
    pool_id: str
    node_ids: tuple[str, str]
    token_id: str
    token_value: str


async def seed(compute: Compute) -> Seeded:
    tenant = await compute.iam.create_tenant("acme")
    site = await compute.sites.create(tenant.id, "k8s", "shared", "tor1")
    pool = await compute.pools.create(tenant.id, "gpu-fleet", site.id, "metal-host", "H100", {"kubernetes": {}})
    ids = []
    for name, connected in (("node-a", True), ("node-b", False)):
        inventory = {
            "os": {"hostname": name, "kubernetesNodeName": name},
            "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 80GB HBM3"} for i in range(2)],
        }
        async with compute.reservations.transaction() as session:
            now = compute.clock.now()
            node = await register_node(
                session, now=now, pool_id=pool.id, name=name, inventory=inventory, labels={"zone": "tor1-a"}
            )
            await mark_ready(session, node.id, now)
            await set_connected(session, node.id, connected, now)
        ids.append(node.id)
    token, value = await compute.join_tokens.create(tenant.id, pool.id, uses=3)
    return Seeded(tenant.id, pool.id, (ids[0], ids[1]), token.id, value)


async def seeded(url: str) -> Seeded:
    compute = better_compute(database=url, secret=SECRET)
    try:
        return await seed(compute)
    finally:
        await compute.close()


@dataclass
class Reads:
    """What some requests did to the database: connections checked out, and their SELECT statements."""

    checkouts: int = 0
    selects: list[str] = field(default_factory=list)
    begins: int = 0


@contextmanager
def reads(compute: Compute) -> Iterator[Reads]:
    """Count what `compute`'s database is asked while the block runs."""
    engine = compute.db.engine.sync_engine
    seen = Reads()

    def checkout(*_: Any) -> None:
        seen.checkouts += 1

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            seen.selects.append(sql)
        seen.begins += sql.lstrip().upper().startswith("BEGIN")  # SQLite's; asyncpg sends its own

    event.listen(engine, "checkout", checkout)
    event.listen(engine, "before_cursor_execute", statement)
    try:
        yield seen
    finally:
        event.remove(engine, "checkout", checkout)
        event.remove(engine, "before_cursor_execute", statement)


async def cache_keys(compute: Compute, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL verified keys are cached while the revoke listener listens (iam.VerifiedKeys): start
    it and wait until it does, so that a request's reads are the route's own."""
    if not compute.db.is_postgres:
        return
    listening = asyncio.Event()
    verified = compute.iam.verified
    connected = verified.connected

    def now_listening() -> None:
        connected()
        listening.set()

    monkeypatch.setattr(verified, "connected", now_listening)
    await compute.iam.start()
    await asyncio.wait_for(listening.wait(), 30)
