"""Sites: where a tenant's pools live (a region, a kind of place)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.iam import require_tenant
from better_compute.store import Database

from .models import Site
from .tables import PoolRow, SiteRow
from .validation import check_name, check_text

__all__ = ["Sites", "create_site", "delete_site", "get_site", "list_sites", "update_site"]


def site_of(row: SiteRow) -> Site:
    return Site(id=row.id, tenant_id=row.tenant_id, name=row.name, kind=row.kind, region=row.region)


async def _row(session: AsyncSession, tenant_id: str, site_id: str) -> SiteRow:
    row = await session.get(SiteRow, site_id)
    if row is None or row.tenant_id != tenant_id:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no site {site_id!r}", "/siteId")
    return row


async def get_site(session: AsyncSession, *, tenant_id: str, site_id: str) -> Site:
    return site_of(await _row(session, tenant_id, site_id))


async def list_sites(session: AsyncSession, *, tenant_id: str) -> list[Site]:
    rows = await session.scalars(select(SiteRow).where(SiteRow.tenant_id == tenant_id).order_by(SiteRow.name))
    return [site_of(r) for r in rows]


async def create_site(
    session: AsyncSession, *, now: datetime, tenant_id: str, name: str, kind: str, region: str | None = None
) -> Site:
    """A new site, inside the caller's transaction; names are unique per tenant."""
    check_name(name, "/name")
    check_text(kind, "/kind", max_length=32)
    check_text(region, "/region", optional=True)
    await require_tenant(session, tenant_id)
    taken = await session.scalar(select(SiteRow.id).where(SiteRow.tenant_id == tenant_id, SiteRow.name == name))
    if taken is not None:
        raise ComputeError(ErrorCode.CONFLICT, f"a site named {name!r} exists already", "/name")
    row = SiteRow(
        id=new_id("site"), tenant_id=tenant_id, name=name, kind=kind, region=region, created_at=now, updated_at=now
    )
    session.add(row)
    await session.flush()
    return site_of(row)


async def update_site(
    session: AsyncSession, *, now: datetime, tenant_id: str, site_id: str, kind: str, region: str | None
) -> Site:
    check_text(kind, "/kind", max_length=32)
    check_text(region, "/region", optional=True)
    row = await _row(session, tenant_id, site_id)
    if (row.kind, row.region) != (kind, region):
        row.kind, row.region, row.updated_at = kind, region, now
        await session.flush()
    return site_of(row)


async def delete_site(session: AsyncSession, *, tenant_id: str, site_id: str) -> None:
    """Remove a site that no live pool uses (archived pools keep their history, and so block it too)."""
    row = await _row(session, tenant_id, site_id)
    used = await session.scalar(select(func.count()).select_from(PoolRow).where(PoolRow.site_id == site_id))
    if used:
        raise ComputeError(ErrorCode.INVALID_STATE, f"site {row.name!r} still has {used} pool(s)", "/siteId")
    await session.delete(row)
    await session.flush()


class Sites:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def create(self, tenant_id: str, name: str, kind: str, region: str | None = None) -> Site:
        async with self.db.transaction() as session:
            return await create_site(
                session, now=self.clock.now(), tenant_id=tenant_id, name=name, kind=kind, region=region
            )

    async def get(self, tenant_id: str, site_id: str) -> Site:
        async with self.db.session() as session:
            return await get_site(session, tenant_id=tenant_id, site_id=site_id)

    async def list(self, tenant_id: str) -> list[Site]:
        async with self.db.session() as session:
            return await list_sites(session, tenant_id=tenant_id)

    async def delete(self, tenant_id: str, site_id: str) -> None:
        async with self.db.transaction() as session:
            await delete_site(session, tenant_id=tenant_id, site_id=site_id)
