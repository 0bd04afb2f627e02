"""A Fleet service on a real database, with stub provider hooks, and row counts to prove what was written."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet_stub import stub_providers
from sqlalchemy import text

from better_compute.compute.changes import ChangeFeed
from better_compute.core.clock import SimClock
from better_compute.fleet.service import Fleet
from better_compute.iam import create_tenant
from better_compute.store import Database
from better_compute.vps.provider import ProviderImpl

TABLES = ("compute_sites", "vps_provider_accounts", "compute_pools", "work_items", "fleet_states")


@dataclass
class Harness:
    db: Database
    fleet: Fleet
    tenant_id: str
    wakes: list[int] = field(default_factory=list)

    async def counts(self) -> dict[str, int]:
        out = {}
        async with self.db.session() as session:
            for table in TABLES:
                out[table] = int((await session.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())
        return out

    async def snapshot_rows(self) -> list[tuple[object, ...]]:
        """Every row of the tables apply writes, to compare before and after a refused apply."""
        rows: list[tuple[object, ...]] = []
        async with self.db.session() as session:
            for table in TABLES:
                result = await session.execute(text(f"SELECT * FROM {table} ORDER BY 1"))
                rows.extend((table, *r) for r in result)
        return rows

    async def work_keys(self) -> list[str]:
        async with self.db.session() as session:
            result = await session.execute(text("SELECT key FROM work_items WHERE kind = 'kubernetes.substrate'"))
            return sorted(r[0] for r in result)


async def harness(
    db: Database,
    clock: SimClock,
    name: str = "acme",
    tenant_id: str | None = None,
    providers: dict[str, ProviderImpl] | None = None,
) -> Harness:
    """A Fleet for tenant `tenant_id`, or for a new tenant called `name`."""
    if tenant_id is None:
        async with db.transaction() as session:
            tenant_id = (await create_tenant(session, now=clock.now(), name=name)).id
    wakes: list[int] = []
    fleet = Fleet(
        db,
        clock,
        providers=providers if providers is not None else stub_providers(),
        wake=lambda: wakes.append(1),
        transaction=ChangeFeed(db).transaction,
    )
    return Harness(db, fleet, tenant_id, wakes)
