"""What the list routes read: each list is one statement, inside the caller's one read session, as Core rows.

A list of a tenant's 100 pools was two sessions and 100 ORM objects, its nodes three statements and
every device as an object. On SQLite each statement costs four hops to aiosqlite's thread and each
session two more, and under load every hop waits for the GIL: a list's cost is its round trips and
objects, not its rows. So the counts, the pool names and the GPU counts are joined in SQL here, and
the rows go straight to the views (ops/).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from .tables import DeviceRow, NodeRow, PoolRow, ReservationRow

__all__ = ["ListRow", "node_rows", "pool_rows", "reservation_rows"]

ListRow = Row[*tuple[Any, ...]]
"""A row of any width, read by its labels."""


async def pool_rows(
    session: AsyncSession,
    *,
    tenant_id: str,
    include_archived: bool = False,
    name: str | None = None,
    pool_id: str | None = None,
) -> Sequence[ListRow]:
    """The tenant's pools by name, each with `nodes`, `connected` and `ready`: its nodes that are not
    retired, those connected and those ready. `name` picks the live pool of that name, `pool_id` one pool."""
    query = (
        select(
            PoolRow.id,
            PoolRow.name,
            PoolRow.state,
            PoolRow.pool_class,
            PoolRow.gpu_model,
            PoolRow.site_id,
            PoolRow.policy,
            PoolRow.created_at,
            PoolRow.updated_at,
            func.count(NodeRow.id).label("nodes"),
            func.coalesce(func.sum(case((NodeRow.connected.is_(True), 1), else_=0)), 0).label("connected"),
            func.coalesce(func.sum(case((NodeRow.state == "ready", 1), else_=0)), 0).label("ready"),
        )
        .outerjoin(NodeRow, and_(NodeRow.pool_id == PoolRow.id, NodeRow.state != "retired"))
        .where(PoolRow.tenant_id == tenant_id)
        .group_by(PoolRow.id)
    )
    if not include_archived or name is not None:
        query = query.where(PoolRow.state != "archived")
    if name is not None:
        query = query.where(PoolRow.name == name)
    if pool_id is not None:
        query = query.where(PoolRow.id == pool_id)
    return (await session.execute(query.order_by(PoolRow.name, PoolRow.created_at))).all()


async def node_rows(
    session: AsyncSession, *, tenant_id: str, pool_id: str | None = None, include_retired: bool = False
) -> Sequence[ListRow]:
    """The tenant's nodes (or one pool's) by name, each with `pool_name` (None for a pool not the
    tenant's), `gpus` (its devices present) and `os` (its inventory's `os` section, not the whole
    inventory)."""
    gpus = (
        select(func.count())
        .where(DeviceRow.node_id == NodeRow.id, DeviceRow.present.is_(True))
        .correlate(NodeRow)
        .scalar_subquery()
    )
    query = (
        select(
            NodeRow.id,
            NodeRow.name,
            NodeRow.pool_id,
            PoolRow.name.label("pool_name"),
            NodeRow.state,
            NodeRow.connected,
            NodeRow.last_seen_at,
            NodeRow.labels,
            NodeRow.system_labels,
            gpus.label("gpus"),
            NodeRow.inventory["os"].label("os"),
        )
        .outerjoin(PoolRow, and_(PoolRow.id == NodeRow.pool_id, PoolRow.tenant_id == tenant_id))
        .where(NodeRow.tenant_id == tenant_id)
    )
    if pool_id is not None:
        query = query.where(NodeRow.pool_id == pool_id)
    if not include_retired:
        query = query.where(NodeRow.state != "retired")
    return (await session.execute(query.order_by(NodeRow.name, NodeRow.created_at))).all()


async def reservation_rows(
    session: AsyncSession, *, tenant_id: str, pool_id: str | None = None, state: str | None = None
) -> Sequence[ListRow]:
    """The tenant's reservations (every column) in the order they were made, each with `pool_name`."""
    res = ReservationRow.__table__.c
    query = (
        select(*res, PoolRow.name.label("pool_name"))
        .outerjoin(PoolRow, and_(PoolRow.id == res.pool_id, PoolRow.tenant_id == tenant_id))
        .where(res.tenant_id == tenant_id)
    )
    if pool_id is not None:
        query = query.where(res.pool_id == pool_id)
    if state is not None:
        query = query.where(res.state == state)
    return (await session.execute(query.order_by(res.created_at, res.id))).all()
