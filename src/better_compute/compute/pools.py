"""Pools: a tenant's group of nodes of one GPU model, and their life (active, archiving, archived).

Archiving stops new bookings at once and cordons the pool's nodes. A pool with nothing
left to tear down (no live node and no `policy.substrate`) is archived straight away;
otherwise it stays `archiving` until the module that tears its substrate down (or the
retirement of its last node) calls `finish_archive`. Existing bookings are never
force-released by an archive.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.iam import require_tenant
from better_compute.store import Database

from .changes import ChangeFeed, mark_changed
from .models import Pool, PoolState
from .tables import NodeRow, PoolRow, SiteRow
from .validation import check_name, check_text, invalid

__all__ = [
    "Pools",
    "archive_pool",
    "create_pool",
    "finish_archive",
    "get_pool",
    "get_pool_by_name",
    "list_pools",
    "no_pool_named",
    "pool_row",
    "update_pool",
]

MAX_POLICY_BYTES = 256 * 1024


def pool_of(row: PoolRow) -> Pool:
    return Pool(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        site_id=row.site_id,
        pool_class=row.pool_class,
        gpu_model=row.gpu_model,
        policy=dict(row.policy),
        state=cast(PoolState, row.state),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


DEGRADED_POLICIES = ("keep", "end")
"""A pool's `policy.health.degraded`: keep a degraded reservation (the default) or end it, refunding its quota."""


def _check_policy(policy: object) -> dict[str, Any]:
    if not isinstance(policy, dict):
        raise invalid("/policy", "a policy is a JSON object")
    try:
        encoded = json.dumps(policy)
    except (TypeError, ValueError) as exc:
        raise invalid("/policy", "a policy holds only JSON values") from exc
    if len(encoded) > MAX_POLICY_BYTES:
        raise invalid("/policy", f"a policy is at most {MAX_POLICY_BYTES} bytes of JSON")
    health = policy.get("health")
    if health is not None and (not isinstance(health, dict) or health.get("degraded", "keep") not in DEGRADED_POLICIES):
        raise invalid("/policy/health/degraded", "a degraded reservation is kept (keep) or ended (end)")
    return cast(dict[str, Any], json.loads(encoded))


async def _site(session: AsyncSession, tenant_id: str, site_id: str) -> SiteRow:
    site = await session.get(SiteRow, site_id)
    if site is None or site.tenant_id != tenant_id:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no site {site_id!r}", "/siteId")
    return site


async def pool_row(session: AsyncSession, *, pool_id: str, tenant_id: str | None = None, lock: bool = False) -> PoolRow:
    """The pool's row, NOT_FOUND at /poolId when it is missing or belongs to another tenant."""
    query = select(PoolRow).where(PoolRow.id == pool_id)
    if lock:  # the row as locked, not an older copy this session loaded before
        query = query.with_for_update().execution_options(populate_existing=True)
    row = (await session.scalars(query)).one_or_none() if isinstance(pool_id, str) else None
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise ComputeError(ErrorCode.NOT_FOUND, f"no pool {pool_id!r}", "/poolId")
    return row


async def get_pool(session: AsyncSession, *, tenant_id: str, pool_id: str) -> Pool:
    return pool_of(await pool_row(session, pool_id=pool_id, tenant_id=tenant_id))


async def get_pool_by_name(
    session: AsyncSession, *, tenant_id: str, name: str, or_archived: bool = False
) -> Pool | None:
    """The live (not archived) pool with this name, if any; with `or_archived`, else the pool of
    that name archived last (a name once reused names the live pool again)."""
    row = await session.scalar(
        select(PoolRow).where(PoolRow.tenant_id == tenant_id, PoolRow.name == name, PoolRow.state != "archived")
    )
    if row is None and or_archived:
        row = await session.scalar(
            select(PoolRow)
            .where(PoolRow.tenant_id == tenant_id, PoolRow.name == name)
            .order_by(PoolRow.updated_at.desc(), PoolRow.created_at.desc())
            .limit(1)
        )
    return pool_of(row) if row is not None else None


def no_pool_named(name: str) -> ComputeError:
    """The error of a name that is no live pool of the tenant's."""
    return ComputeError(ErrorCode.NOT_FOUND, f"no pool named {name!r}", "/name")


async def list_pools(session: AsyncSession, *, tenant_id: str, include_archived: bool = False) -> list[Pool]:
    query = select(PoolRow).where(PoolRow.tenant_id == tenant_id)
    if not include_archived:
        query = query.where(PoolRow.state != "archived")
    rows = await session.scalars(query.order_by(PoolRow.name, PoolRow.created_at))
    return [pool_of(r) for r in rows]


async def create_pool(
    session: AsyncSession,
    *,
    now: datetime,
    tenant_id: str,
    name: str,
    site_id: str,
    pool_class: str,
    gpu_model: str | None = None,
    policy: dict[str, Any] | None = None,
) -> Pool:
    """A new active pool, inside the caller's transaction; live pool names are unique per tenant."""
    check_name(name, "/name")
    check_text(pool_class, "/class")
    check_text(gpu_model, "/gpuModel", optional=True)
    checked = _check_policy({} if policy is None else policy)
    await require_tenant(session, tenant_id)
    await _site(session, tenant_id, site_id)
    if await get_pool_by_name(session, tenant_id=tenant_id, name=name) is not None:
        raise ComputeError(ErrorCode.CONFLICT, f"a pool named {name!r} exists already", "/name")
    row = PoolRow(
        id=new_id("pool"),
        tenant_id=tenant_id,
        name=name,
        site_id=site_id,
        pool_class=pool_class,
        gpu_model=gpu_model,
        policy=checked,
        state="active",
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    await session.flush()
    return pool_of(row)


async def update_pool(
    session: AsyncSession,
    *,
    now: datetime,
    tenant_id: str,
    pool_id: str,
    site_id: str,
    pool_class: str,
    gpu_model: str | None,
    policy: dict[str, Any],
) -> Pool:
    """Change an active pool in place. Existing reservations keep the GPU model they were booked (and charged) as."""
    check_text(pool_class, "/class")
    check_text(gpu_model, "/gpuModel", optional=True)
    checked = _check_policy(policy)
    row = await pool_row(session, pool_id=pool_id, tenant_id=tenant_id, lock=True)
    if row.state != "active":
        raise ComputeError(ErrorCode.INVALID_STATE, f"pool {row.name!r} is {row.state}", "/poolId")
    await _site(session, tenant_id, site_id)
    new = (site_id, pool_class, gpu_model, checked)
    if (row.site_id, row.pool_class, row.gpu_model, row.policy) != new:
        row.site_id, row.pool_class, row.gpu_model, row.policy = new
        row.updated_at = now
        await session.flush()
    return pool_of(row)


async def _live_nodes(session: AsyncSession, pool_id: str) -> int:
    query = select(func.count()).select_from(NodeRow).where(NodeRow.pool_id == pool_id, NodeRow.state != "retired")
    return int(await session.scalar(query) or 0)


async def archive_pool(session: AsyncSession, *, now: datetime, tenant_id: str, pool_id: str) -> Pool:
    """Stop new bookings, cordon the pool's nodes, and archive it (now, or once its teardown finishes)."""
    row = await pool_row(session, pool_id=pool_id, tenant_id=tenant_id, lock=True)
    if row.state != "active":
        return pool_of(row)
    cordoned = await session.scalars(
        update(NodeRow)
        .where(NodeRow.pool_id == pool_id, NodeRow.state.in_(("joining", "ready")))
        .values(state="cordoned", updated_at=now)
        .returning(NodeRow.id)
    )
    mark_changed(session, cordoned.all())
    teardown = bool(row.policy.get("substrate")) or await _live_nodes(session, pool_id) > 0
    row.state = "archiving" if teardown else "archived"
    row.updated_at = now
    await session.flush()
    return pool_of(row)


async def finish_archive(session: AsyncSession, *, now: datetime, pool_id: str) -> Pool:
    """System: an archiving pool whose teardown is done becomes archived (its nodes must all be retired)."""
    row = await pool_row(session, pool_id=pool_id, lock=True)
    if row.state == "archived":
        return pool_of(row)
    if row.state != "archiving":
        raise ComputeError(ErrorCode.INVALID_STATE, f"pool {row.name!r} is {row.state}, not archiving", "/poolId")
    live = await _live_nodes(session, pool_id)
    if live:
        raise ComputeError(ErrorCode.INVALID_STATE, f"pool {row.name!r} still has {live} node(s) to retire", "/poolId")
    row.state = "archived"
    row.updated_at = now
    await session.flush()
    return pool_of(row)


class Pools:
    def __init__(self, db: Database, clock: Clock, feed: ChangeFeed | None = None) -> None:
        self.db = db
        self.clock = clock
        self.feed = feed or ChangeFeed(db)

    async def create(
        self,
        tenant_id: str,
        name: str,
        site_id: str,
        pool_class: str,
        gpu_model: str | None = None,
        policy: dict[str, Any] | None = None,
    ) -> Pool:
        async with self.db.transaction() as session:
            return await create_pool(
                session,
                now=self.clock.now(),
                tenant_id=tenant_id,
                name=name,
                site_id=site_id,
                pool_class=pool_class,
                gpu_model=gpu_model,
                policy=policy,
            )

    async def get(self, tenant_id: str, pool_id: str) -> Pool:
        async with self.db.session() as session:
            return await get_pool(session, tenant_id=tenant_id, pool_id=pool_id)

    async def get_by_name(self, tenant_id: str, name: str) -> Pool:
        async with self.db.session() as session:
            pool = await get_pool_by_name(session, tenant_id=tenant_id, name=name)
        if pool is None:
            raise no_pool_named(name)
        return pool

    async def list(self, tenant_id: str, *, include_archived: bool = False) -> list[Pool]:
        async with self.db.session() as session:
            return await list_pools(session, tenant_id=tenant_id, include_archived=include_archived)

    async def archive(self, tenant_id: str, pool_id: str) -> Pool:
        async with self.feed.transaction() as session:
            return await archive_pool(session, now=self.clock.now(), tenant_id=tenant_id, pool_id=pool_id)
