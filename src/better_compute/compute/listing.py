"""What the list routes read: each list is one statement, inside the caller's one read session, as Core rows.

A list of a tenant's 100 pools was two sessions and 100 ORM objects, its nodes three statements and
every device as an object. On SQLite each statement costs four hops to aiosqlite's thread and each
session two more, and under load every hop waits for the GIL: a list's cost is its round trips and
objects, not its rows. So the counts, the pool names and the GPU counts are joined in SQL here, and
the rows go straight to the views (ops/). Each statement is built once per shape (which filters it
has) with bound parameters: building the pools' statement and its cache key cost about as much as
reading its 100 rows.

The columns a row's view decodes (JSON, timestamps) are read raw (`Raw`): a row is then a tuple of
plain values that is its own version, so ops.views makes and encodes each distinct row's view once
instead of decoding its JSON and parsing its times on every request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache
from typing import Any
from typing import cast as typing_cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Dialect,
    Row,
    Select,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    select,
    type_coerce,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import NullType

from better_compute.store import UTCDateTime

from .models import DegradedGpu, Reservation, ReservationState
from .tables import DeviceRow, ListVersionRow, NodeRow, PoolRow, ReservationRow

__all__ = [
    "ListRow",
    "Raw",
    "degraded_of",
    "list_version",
    "listed_reservation",
    "node_rows",
    "pool_rows",
    "reservation_rows",
]

ListRow = Row[*tuple[Any, ...]]
"""A row of any width, read by its labels."""

_TENANT: BindParameter[str] = bindparam("tenant_id")


class Raw:
    """How the raw columns of a list row read, for one database: as the ORM would read them.

    Timestamps come as the driver gives them (SQLite's text, asyncpg's datetime) and read through
    UTCDateTime's own result processing for the dialect; JSON comes as its text (cast in SQL, since
    asyncpg decodes `json` itself) and reads with `json.loads`, the dialects' default decoder."""

    def __init__(self, dialect: Dialect) -> None:
        processor = UTCDateTime().dialect_impl(dialect).result_processor(dialect, None)
        self._moment: Callable[[Any], datetime | None] = processor or (lambda value: value)

    @staticmethod
    def of(session: AsyncSession) -> Raw:
        return _raw_of(session.get_bind().dialect)

    def moment(self, value: Any) -> datetime | None:
        return self._moment(value)

    @staticmethod
    def json(text: str | None) -> Any:
        return json.loads(text) if text is not None else None


async def _all(session: AsyncSession, query: Select[*tuple[Any, ...]], params: dict[str, Any]) -> Sequence[ListRow]:
    """The statement's rows through the session's connection: Core rows, without the ORM's wrapping of each."""
    return (await (await session.connection()).execute(query, params)).all()


@cache
def _raw_of(dialect: Dialect) -> Raw:
    return Raw(dialect)


def _raw_time(column: Any) -> ColumnElement[Any]:
    """The column as the driver gives it (Raw.moment reads it)."""
    return type_coerce(column, NullType()).label(column.key)


def _json_text(column: Any, label: str) -> ColumnElement[str]:
    """The JSON column as its text (Raw.json reads it)."""
    return cast(column, Text).label(label)


_POOL_ID: BindParameter[str] = bindparam("pool_id")
_VERSION = select(ListVersionRow.version).where(ListVersionRow.tenant_id == _TENANT)


async def list_version(session: AsyncSession, tenant_id: str) -> int | None:
    """The tenant's list version: it moves in every transaction that writes a row of the tenant's lists
    (the database's triggers, migration compute_0008); None while no such write has happened."""
    return (await (await session.connection()).execute(_VERSION, {"tenant_id": tenant_id})).scalar()


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
    those ready), in this order; the policy and the times raw (`Raw`). `name` picks the live pool of that
    name, `pool_id` one pool."""
    query = _pools(include_archived and name is None, name is not None, pool_id is not None)
    return await _all(session, query, {"tenant_id": tenant_id, "name": name, "pool_id": pool_id})


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
            _json_text(PoolRow.policy, "policy"),
            _raw_time(PoolRow.created_at),
            _raw_time(PoolRow.updated_at),
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
    `os` (its inventory's `os` section, not the whole inventory), in this order; the time and the JSON raw
    (`Raw`)."""
    query = _nodes(pool_id is not None, include_retired)
    return await _all(session, query, {"tenant_id": tenant_id, "pool_id": pool_id})


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
            _raw_time(NodeRow.last_seen_at),
            _json_text(NodeRow.labels, "labels"),
            _json_text(NodeRow.system_labels, "system_labels"),
            gpus.label("gpus"),
            _json_text(NodeRow.inventory["os"], "os"),
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
    """The tenant's reservations (every column; device_ids and the times raw: `listed_reservation` reads
    them) in the order they were made, each with `pool_name` and `degraded` (its unhealthy GPUs, packed in
    one string: `degraded_of` reads it)."""
    query = _reservations(pool_id is not None, state is not None)
    return await _all(session, query, {"tenant_id": tenant_id, "pool_id": pool_id, "state": state})


_FIELD, _GPU = "\x1f", "\x1e"  # ASCII unit and record separators: in no uuid, reason or number


def degraded_of(packed: str | None) -> tuple[DegradedGpu, ...]:
    """A reservation row's `degraded` column as its unhealthy GPUs, in index order."""
    gpus = []
    for item in (packed or "").split(_GPU):
        if item:
            index, uuid, reason, xid = item.split(_FIELD)
            gpus.append(DegradedGpu(uuid=uuid, index=int(index), reason=reason, xid=int(xid) if xid else None))
    return tuple(sorted(gpus, key=lambda g: g.index))


def listed_reservation(row: Any, raw: Raw) -> Reservation:
    """A row of `reservation_rows` as the Reservation it is, its degraded GPUs with it."""
    return Reservation(
        id=row.id,
        tenant_id=row.tenant_id,
        pool_id=row.pool_id,
        node_id=row.node_id,
        device_ids=tuple(raw.json(row.device_ids)),
        gpu_model=row.gpu_model,
        gpu_count=row.gpu_count,
        binding=row.binding,
        spot=bool(row.spot),
        state=typing_cast(ReservationState, row.state),
        created_at=typing_cast(datetime, raw.moment(row.created_at)),
        ended_at=raw.moment(row.ended_at),
        degraded_gpus=degraded_of(row.degraded),
    )


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
    raw = {"device_ids": lambda c: _json_text(c, "device_ids"), "created_at": _raw_time, "ended_at": _raw_time}
    columns = [raw[c.key](c) if c.key in raw else c for c in res]
    query = (
        select(*columns, PoolRow.name.label("pool_name"), degraded)
        .outerjoin(PoolRow, and_(PoolRow.id == res.pool_id, PoolRow.tenant_id == _TENANT))
        .where(res.tenant_id == _TENANT)
    )
    if by_pool:
        query = query.where(res.pool_id == _POOL_ID)
    if by_state:
        query = query.where(res.state == bindparam("state"))
    return query.order_by(res.created_at, res.id)
