"""Group commit for bookings: concurrent requests in one process share a transaction.

SQLite has one writer at a time, and through aiosqlite every statement is a hop to
the connection's thread, so a transaction per booking caps throughput at a few
hundred per second however fast the placement is. On PostgreSQL each booking's
statements and commit are round trips and Python work of their own, and concurrent
bookings of one tenant meet on its quota row. Here the first booker to take the
lock becomes the leader: it takes every request queued so far (its own and those that
arrived while the previous batch ran) and books them all at once, with a fixed number
of statements whatever the batch's size:

1. read (one statement): the pools, each with its tenant's quota row and each ready
   node of the pool with its count of free GPUs;
2. place each request in turn with the same rule as single bookings (placement.rank),
   counting down free GPUs and quota as it goes; a request that cannot be placed gets
   its own error and does not affect the others;
3. write (`_apply`), which locks and checks again everything the placement relied on.
   On PostgreSQL it is ONE call, `compute_book_batch` (migration compute_0004), with
   the batch as array parameters, so the statement's text never changes and is
   prepared once per connection. In order, it locks the pools `FOR KEY SHARE` in id
   order (each still `active`), then the chosen nodes likewise (each still `ready`;
   see booking for why), gives each request the next free devices of its node in
   index order, inserts the reservations, claims the devices with `UPDATE ... WHERE
   reservation_id IS NULL`, and charges each tenant's quota with an upsert guarded by
   `gpu_limit IS NULL OR used + n <= gpu_limit`. A single statement is atomic, so
   read and write run in autocommit: a batch is two round trips (plus a ping for a
   connection idle over a second, see store.db), and the quota row is held only
   inside the call. On SQLite the batch is one transaction (BEGIN IMMEDIATE holds the
   write lock throughout) and the write is separate statements: the chosen nodes'
   free devices, the INSERT, one guarded `UPDATE ... SET reservation_id = CASE id
   ...`, and the guarded charge (quotas.charge).
   Each booking's `reservation.booked` decision (where, and why there: placement.why) is
   written by the same call on PostgreSQL (decisions.logged wraps it) and in the same
   transaction on SQLite, so it commits and rolls back with the booking.
   Any shortfall (a pool or node no longer bookable, fewer free devices, claims or
   charges than placed) means something changed since the read (a booker on another
   replica, a cordon, the quota used up): the write is undone (PostgreSQL: the call
   raises SQLSTATE 40001; SQLite: rollback) and the batch runs again from a fresh read.

A request may name the id to book under (an Idempotency-Key's, see ops.idempotency): the
read also fetches the bookings that exist under such ids, and each of those is its request's
answer, booked again by nobody; two requests of one batch with one id share one booking; on
PostgreSQL another replica that booked the id first makes the write call fail with SQLSTATE
23505, and the next attempt's read finds its booking.

Requests are gathered into batches by group.GroupCommit (the leader, cancellation, the change hook).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ARRAY,
    BindParameter,
    Boolean,
    CursorResult,
    DateTime,
    Integer,
    String,
    bindparam,
    case,
    func,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.decisions import Decision, Kind, record, recording
from better_compute.decisions.log import logged, logged_params

from .booking import (
    DEV,
    NODE,
    POOL,
    QUOTA,
    RES,
    Contended,
    Values,
    check_pool,
    no_capacity,
    reservation_of,
    reservation_values,
)
from .changes import ChangeFeed, mark_changed, take_changed
from .group import GroupCommit
from .models import Reservation
from .placement import Candidate, rank, why
from .quotas import ANY_MODEL, charge, quota_exceeded, quota_key

__all__ = ["BatchBooker", "Request"]

ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class Request:
    tenant_id: str
    pool_id: str
    gpu_count: int
    binding: str
    spot: bool
    reservation_id: str | None = None
    """The id to book under (an Idempotency-Key's): if it is booked already, that booking is the answer."""
    principal: str | None = None
    """Who asked (an API key's id), for the decision log."""


Outcome = dict[str, Any] | ComputeError


@dataclass(frozen=True, slots=True)
class Placed:
    """A request placed on a node, with what the decision log says of it."""

    position: int
    node_id: str
    request: Request
    model: str
    node_name: str
    reason: str

    def decision(self, values: dict[str, Any], gpu_ids: list[str]) -> Decision:
        request = self.request
        return Decision(
            Kind.BOOKED, request.tenant_id, self.reason, pool_id=request.pool_id, node_id=self.node_id,
            node_name=self.node_name, reservation_id=values["id"], gpu_ids=tuple(gpu_ids),
            principal=request.principal, details={"gpuCount": request.gpu_count, "spot": request.spot},
        )  # fmt: skip


class BatchBooker(GroupCommit[Request, Reservation]):
    """Concurrent bookings of one process, booked a batch at a time (group.GroupCommit)."""

    def __init__(self, feed: ChangeFeed, clock: Clock) -> None:
        super().__init__(feed)
        self.clock = clock

    async def book(self, request: Request) -> Reservation:
        return await self.submit(request)

    async def _attempts(self, batch: list[Request]) -> tuple[list[Reservation | Exception], list[str]]:
        for _ in range(ATTEMPTS):
            try:
                async with self._session() as session:
                    outcomes = await _book_batch(session, self.clock.now(), batch)
                results: list[Reservation | Exception] = [
                    o if isinstance(o, ComputeError) else reservation_of(Values(o)) for o in outcomes
                ]
                return results, take_changed(session)
            except Contended:
                await asyncio.sleep(0)
        busy: Exception = ComputeError(ErrorCode.UNAVAILABLE, "too many concurrent bookings; retry", "/poolId")
        return [busy] * len(batch), []


async def _book_batch(session: AsyncSession, now: datetime, requests: list[Request]) -> list[Outcome]:
    pools: dict[str, Any] = {}
    nodes: dict[str, dict[str, Candidate]] = defaultdict(dict)
    for row in (await session.execute(_pools_quotas_and_nodes(sorted({r.pool_id for r in requests})))).all():
        pools[row.id] = row
        if row.node_id is not None:
            nodes[row.id][row.node_id] = Candidate(
                row.node_id, row.node_name, bool(row.spot), bool(row.connected), int(row.free)
            )
    quota = {(p.tenant_id, quota_key(p.gpu_model)): (p.gpu_limit, p.used or 0) for p in pools.values()}

    placed: list[Placed] = []
    outcomes: list[Outcome | None] = [None] * len(requests)
    booked = await _booked_already(session, requests)
    first_of: dict[str, int] = {}  # a booking id -> the position placing it in this batch
    repeats: list[tuple[int, int]] = []
    for position, request in enumerate(requests):
        if request.reservation_id is not None:
            if request.reservation_id in booked:
                outcomes[position] = booked[request.reservation_id]
                continue
            if request.reservation_id in first_of:
                repeats.append((position, first_of[request.reservation_id]))
                continue
            first_of[request.reservation_id] = position
        try:
            pool = check_pool(pools.get(request.pool_id), request.tenant_id, request.pool_id)
            ranked = rank(nodes[request.pool_id].values(), request.gpu_count, request.spot)
            if not ranked:
                raise no_capacity(pool.name, request.gpu_count, request.spot)
            model = quota_key(pool.gpu_model)
            limit, used = quota.get((request.tenant_id, model), (None, 0))
            if limit is not None and used + request.gpu_count > limit:
                raise quota_exceeded(model, used, limit, request.gpu_count)
        except ComputeError as exc:
            outcomes[position] = exc
            continue
        best = ranked[0]
        nodes[request.pool_id][best.node_id] = Candidate(
            best.node_id, best.name, best.spot, best.connected, best.free - request.gpu_count
        )
        quota[(request.tenant_id, model)] = (limit, used + request.gpu_count)
        kind = "Spot node" if best.spot else "node"
        reason = f"booked {request.gpu_count} GPU(s) on {kind} {best.name} of pool {pool.name}: " + why(
            best, ranked, request.gpu_count, request.spot
        )
        placed.append(Placed(position, best.node_id, request, model, best.name, reason))
    if placed:
        await _apply(session, now, placed, outcomes)
    for position, first in repeats:
        outcomes[position] = outcomes[first]
    return cast(list[Outcome], outcomes)


async def _booked_already(session: AsyncSession, requests: list[Request]) -> dict[str, Outcome]:
    """The bookings that exist already under the ids some requests ask to book under (a retried
    Idempotency-Key's): each is its request's answer, and nothing is booked again."""
    wanted = sorted({r.reservation_id for r in requests if r.reservation_id is not None})
    if not wanted:
        return {}
    rows = (await session.execute(select(RES).where(RES.c.id.in_(wanted)))).all()
    tenants = {r.reservation_id: r.tenant_id for r in requests if r.reservation_id is not None}
    found: dict[str, Outcome] = {}
    for row in rows:
        if row.tenant_id == tenants[row.id]:
            found[row.id] = dict(row._mapping)
        else:  # never for ids this process made: they are random
            found[row.id] = ComputeError(ErrorCode.CONFLICT, f"reservation {row.id!r} is taken", "/reservationId")
    return found


def _free_count() -> Any:
    """A ready node's count of free, present GPUs: a scalar subquery per node, so that it is an index
    lookup in ix_compute_devices_free whatever the planner's statistics say (a join and GROUP BY went
    quadratic on fresh PostgreSQL tables)."""
    return (
        select(func.count())
        .select_from(DEV)
        .where(DEV.c.node_id == NODE.c.id, DEV.c.reservation_id.is_(None), DEV.c.present.is_(True))
        .scalar_subquery()
    )


def _pools_quotas_and_nodes(pool_ids: list[str]) -> Any:
    """The read side in one statement: the pools, locked `FOR KEY SHARE` in id order, each with its
    tenant's quota row for its model (if any), once per ready node of an active pool (with the
    node's free GPUs), or once with no node."""
    quota_of_pool = (QUOTA.c.tenant_id == POOL.c.tenant_id) & (
        QUOTA.c.gpu_model == func.coalesce(POOL.c.gpu_model, ANY_MODEL)
    )
    node_of_pool = (NODE.c.pool_id == POOL.c.id) & (NODE.c.state == "ready") & (POOL.c.state == "active")
    return (
        select(
            POOL.c.id,
            POOL.c.tenant_id,
            POOL.c.name,
            POOL.c.state,
            POOL.c.gpu_model,
            QUOTA.c.gpu_limit,
            QUOTA.c.used,
            NODE.c.id.label("node_id"),
            NODE.c.name.label("node_name"),
            NODE.c.spot,
            NODE.c.connected,
            _free_count().label("free"),
        )
        .select_from(POOL.outerjoin(QUOTA, quota_of_pool).outerjoin(NODE, node_of_pool))
        .where(POOL.c.id.in_(pool_ids))
        .order_by(POOL.c.id)
    )


async def _free_devices(session: AsyncSession, node_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
    """SQLite: the nodes' free, present devices (id, GPU UUID) in index order, of the nodes still `ready`.

    The transaction holds SQLite's write lock from its BEGIN IMMEDIATE, so nothing
    changes between the read and the write; a node that is no longer ready has no rows
    here, which the caller reads as a shortfall.
    """
    rows = (
        await session.execute(
            select(DEV.c.id, DEV.c.uuid, DEV.c.node_id)
            .join(NODE, NODE.c.id == DEV.c.node_id)
            .where(
                NODE.c.id.in_(node_ids),
                NODE.c.state == "ready",
                DEV.c.present.is_(True),
                DEV.c.reservation_id.is_(None),
            )
            .order_by(DEV.c.node_id, DEV.c.idx)
        )
    ).all()
    free: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in rows:
        free[row.node_id].append((row.id, row.uuid))
    return free


async def _apply(session: AsyncSession, now: datetime, placed: list[Placed], outcomes: list[Outcome | None]) -> None:
    """Write the placed requests (the batch's write side), or raise `Contended` on any shortfall."""
    if session.get_bind().dialect.name == "postgresql":
        await _apply_in_one_call(session, now, placed, outcomes)
    else:
        await _apply_statement_by_statement(session, now, placed, outcomes)
    mark_changed(session, sorted({p.node_id for p in placed}))


# The whole write side on PostgreSQL: one call of the function compute_book_batch (see the
# migration compute_0004 for what it does, in which order). Its parameters are arrays, so the
# statement's text is the same for every batch: compiled once, prepared once per connection.
_CALL = (
    "SELECT out_reservation_id, out_device_ids FROM compute_book_batch("
    "CAST(:ids AS text[]), CAST(:tenants AS text[]), CAST(:pools AS text[]), CAST(:nodes AS text[]),"
    " CAST(:models AS text[]), CAST(:counts AS integer[]), CAST(:bindings AS text[]), CAST(:spots AS boolean[]),"
    " CAST(:now AS timestamptz))"
)
_BINDS: tuple[BindParameter[Any], ...] = (
    *(bindparam(name, type_=ARRAY(String)) for name in ("ids", "tenants", "pools", "nodes", "models", "bindings")),
    bindparam("counts", type_=ARRAY(Integer)),
    bindparam("spots", type_=ARRAY(Boolean)),
    bindparam("now", type_=DateTime(timezone=True)),
)
_WRITE = text(_CALL).bindparams(*_BINDS)
# The same call with each booking's decision inserted by the statement (decisions.logged): the
# GPUs' UUIDs are read for the devices the call gave each booking.
_GPU_UUIDS = (
    "to_json(ARRAY(SELECT d.uuid FROM compute_devices d WHERE d.id = ANY(written.out_device_ids) ORDER BY d.idx))"
)
_WRITE_LOGGED = logged(_CALL, key="out_reservation_id", gpu_ids=_GPU_UUIDS, binds=_BINDS)
# 40001: what compute_book_batch raises when a device, node, pool or quota changed; 40P01: a
# deadlock with another replica's call (device rows are claimed in plan order); 23505: another
# replica booked under the same id first (a retried Idempotency-Key), which the next read finds.
# Each undoes the call.
_RETRY = ("40001", "40P01", "23505")


async def _apply_in_one_call(
    session: AsyncSession, now: datetime, placed: list[Placed], outcomes: list[Outcome | None]
) -> None:
    rows = [
        (
            p,
            reservation_values(
                now=now,
                tenant_id=p.request.tenant_id,
                pool_id=p.request.pool_id,
                node_id=p.node_id,
                model=p.model,
                device_ids=[],
                binding=p.request.binding,
                spot=p.request.spot,
                reservation_id=p.request.reservation_id,
            )
            | {"gpu_count": p.request.gpu_count},
        )
        for p in placed
    ]
    keep = recording()
    events = logged_params(now, [p.decision(v, []) for p, v in rows]) if keep else {}
    try:
        result = await session.execute(
            _WRITE_LOGGED if keep else _WRITE,
            events
            | {
                "ids": [v["id"] for _, v in rows],
                "tenants": [v["tenant_id"] for _, v in rows],
                "pools": [v["pool_id"] for _, v in rows],
                "nodes": [v["node_id"] for _, v in rows],
                "models": [v["gpu_model"] for _, v in rows],
                "counts": [v["gpu_count"] for _, v in rows],
                "bindings": [v["binding"] for _, v in rows],
                "spots": [v["spot"] for _, v in rows],
                "now": now,
            },
        )
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) in _RETRY:
            raise Contended from exc
        raise
    held = {row.out_reservation_id: list(row.out_device_ids) for row in result.all()}
    for p, values in rows:
        values["device_ids"] = held[values["id"]]
        outcomes[p.position] = values


async def _apply_statement_by_statement(
    session: AsyncSession, now: datetime, placed: list[Placed], outcomes: list[Outcome | None]
) -> None:
    chosen = sorted({p.node_id for p in placed})
    free = await _free_devices(session, chosen)
    inserts: list[dict[str, Any]] = []
    decisions: list[Decision] = []
    claims: dict[str, str] = {}
    charges: dict[tuple[str, str], int] = defaultdict(int)
    for p in placed:
        request = p.request
        devices = free[p.node_id][: request.gpu_count]
        if len(devices) != request.gpu_count:
            raise Contended
        del free[p.node_id][: request.gpu_count]
        values = reservation_values(
            now=now,
            tenant_id=request.tenant_id,
            pool_id=request.pool_id,
            node_id=p.node_id,
            model=p.model,
            device_ids=[d for d, _ in devices],
            binding=request.binding,
            spot=request.spot,
            reservation_id=request.reservation_id,
        )
        inserts.append(values)
        decisions.append(p.decision(values, [uuid for _, uuid in devices]))
        claims.update((d, values["id"]) for d, _ in devices)
        charges[(request.tenant_id, p.model)] += request.gpu_count
        outcomes[p.position] = values
    await session.execute(RES.insert(), inserts)
    await record(session, now, *decisions)
    holders = dict(sorted(claims.items()))  # device id -> reservation id, in one order for every booker
    claimed = await session.execute(
        update(DEV)
        .where(DEV.c.id.in_(list(holders)), DEV.c.reservation_id.is_(None))
        .values(reservation_id=case(holders, value=DEV.c.id))
    )
    if cast(CursorResult[Any], claimed).rowcount != len(claims):
        raise Contended
    for (tenant_id, model), count in sorted(charges.items()):
        try:
            await charge(session, now=now, tenant_id=tenant_id, gpu_model=model, count=count)
        except ComputeError as exc:  # the limit moved since we read it: place again from a fresh read
            raise Contended from exc
