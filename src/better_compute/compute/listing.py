"""What the list routes read: each list is one statement, inside the caller's one read session, as Core rows.

A list of a tenant's 100 pools was two sessions and 100 ORM objects, its nodes three statements and
every device as an object. On SQLite each statement costs four hops to aiosqlite's thread and each
session two more, and under load every hop waits for the GIL: a list's cost is its round trips and
objects, not its rows. So the counts, the pool names and the GPU counts are joined in SQL here, and
the rows go straight to the views (ops/). Each statement is built once per shape (which filters it
has) with bound parameters: building the pools' statement and its cache key cost about as much as
reading its 100 rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import BindParameter, Row, Select, String, and_, bindparam, case, cast, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from .models import DegradedGpu
from .tables import DeviceRow, NodeRow, PoolRow, ReservationRow

__all__ = ["ListRow", "degraded_of", "node_rows", "pool_rows", "reservation_rows"]

ListRow = Row[*tuple[Any, ...]]
"""A row of any width, read by its labels."""

_TENANT: BindParameter[str] = bindparam("tenant_id")
_POOL_ID: BindParameter[str] = bindparam("pool_id")


async def pool_rows(
    session: AsyncSession,
    *,
    tenant_id: str,
    include_archived: bool = False,
    name: str | None = None,
    pool_id: str | None = None,
) -> Sequence[ListRow]:
    """The tenant's pools by name: id, name, state, pool_class, gpu_model, site_id, policy, created_at,
    updated_at, then `nodes`, `connected` and `ready` (its nodes that are not retired, those connected and
    those ready), in this order. `name` picks the live pool of that name, `pool_id` one pool."""
    query = _pools(include_archived and name is None, name is not None, pool_id is not None)
    return (await session.execute(query, {"tenant_id": tenant_id, "name": name, "pool_id": pool_id})).all()


@cache
def _pools(include_archived: bool, by_name: bool, by_id: bool) -> Select[*tuple[Any, ...]]:
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
        .where(PoolRow.tenant_id == _TENANT)
        .group_by(PoolRow.id)
    )
    if not include_archived:
        query = query.where(PoolRow.state != "archived")
    if by_name:
        query = query.where(PoolRow.name == bindparam("name"))
    if by_id:
        query = query.where(PoolRow.id == _POOL_ID)
    return query.order_by(PoolRow.name, PoolRow.created_at)


async def node_rows(
    session: AsyncSession, *, tenant_id: str, pool_id: str | None = None, include_retired: bool = False
) -> Sequence[ListRow]:
    """The tenant's nodes (or one pool's) by name: id, name, pool_id, `pool_name` (None for a pool not the
    tenant's), state, connected, last_seen_at, labels, system_labels, `gpus` (its devices present) and
    `os` (its inventory's `os` section, not the whole inventory), in this order."""
    query = _nodes(pool_id is not None, include_retired)
    return (await session.execute(query, {"tenant_id": tenant_id, "pool_id": pool_id})).all()


@cache
def _nodes(by_pool: bool, include_retired: bool) -> Select[*tuple[Any, ...]]:
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
        .outerjoin(PoolRow, and_(PoolRow.id == NodeRow.pool_id, PoolRow.tenant_id == _TENANT))
        .where(NodeRow.tenant_id == _TENANT)
    )
    if by_pool:
        query = query.where(NodeRow.pool_id == _POOL_ID)
    if not include_retired:
        query = query.where(NodeRow.state != "retired")
    return query.order_by(NodeRow.name, NodeRow.created_at)


async def reservation_rows(
    session: AsyncSession, *, tenant_id: str, pool_id: str | None = None, state: str | None = None
) -> Sequence[ListRow]:
    """The tenant's reservations (every column) in the order they were made, each with `pool_name` and
    `degraded` (its unhealthy GPUs, packed in one string: `degraded_of` reads it)."""
    query = _reservations(pool_id is not None, state is not None)
    return (await session.execute(query, {"tenant_id": tenant_id, "pool_id": pool_id, "state": state})).all()


_FIELD, _GPU = "\x1f", "\x1e"  # ASCII unit and record separators: in no uuid, reason or number


def degraded_of(packed: str | None) -> tuple[DegradedGpu, ...]:
    """A reservation row's `degraded` column as its unhealthy GPUs, in index order."""
    gpus = []
    for item in (packed or "").split(_GPU):
        if item:
            index, uuid, reason, xid = item.split(_FIELD)
            gpus.append(DegradedGpu(uuid=uuid, index=int(index), reason=reason, xid=int(xid) if xid else None))
    return tuple(sorted(gpus, key=lambda g: g.index))


@cache
def _reservations(by_pool: bool, by_state: bool) -> Select[*tuple[Any, ...]]:
    res = ReservationRow.__table__.c
    sep = literal(_FIELD)
    packed = cast(DeviceRow.index, String) + sep + DeviceRow.uuid + sep + DeviceRow.health_reason + sep
    packed = packed + func.coalesce(cast(DeviceRow.health_xid, String), "")
    degraded = (
        select(func.aggregate_strings(packed, _GPU))
        .where(DeviceRow.reservation_id == res.id, DeviceRow.health_reason.is_not(None))
        .correlate(ReservationRow)
        .scalar_subquery()
        .label("degraded")
    )
    query = (
        select(*res, PoolRow.name.label("pool_name"), degraded)
        .outerjoin(PoolRow, and_(PoolRow.id == res.pool_id, PoolRow.tenant_id == _TENANT))
        .where(res.tenant_id == _TENANT)
    )
    if by_pool:
        query = query.where(res.pool_id == _POOL_ID)
    if by_state:
        query = query.where(res.state == bindparam("state"))
    return query.order_by(res.created_at, res.id)
