"""Reservations: the service tenants book through, and ending bookings exactly once.

Booking itself is in booking (one request inside the caller's transaction) and batch
(group commit): concurrent `create` calls of one process share a transaction on either
database. On SQLite they take turns with every other writer of the process (store.write_turns).

Leaving `active` is one guarded `UPDATE ... WHERE state = 'active'`: of two releases
racing, exactly one changes the row, and only that one frees the devices and refunds
quota. The change hook fires after commit with the nodes whose assignments changed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.store import Database

from .batch import BatchBooker, Request
from .booking import DEV, NODE, RES, check_request, reservation_of
from .changes import ChangeFeed, Listener, mark_changed, take_changed
from .models import Assignment, Held, Reservation
from .nodes import lock_node_and_pool
from .quotas import refund

__all__ = [
    "END_STATES",
    "Reservations",
    "active_count",
    "assignment_for",
    "end_reservation",
    "end_reservations_on_node",
]

END_STATES = ("released", "preempted", "ended")


async def end_reservation(
    session: AsyncSession,
    *,
    now: datetime,
    reservation_id: str,
    state: str = "released",
    tenant_id: str | None = None,
) -> tuple[Reservation, bool]:
    """Move an active reservation to `state`, free its devices and refund its quota: at most once.

    Returns the reservation and whether this call ended it. Ending one that has already
    ended changes nothing and refunds nothing, however many times or however
    concurrently it is asked.
    """
    if state not in END_STATES:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"a reservation ends as one of {', '.join(END_STATES)}", "/state")
    guard = [RES.c.id == reservation_id, RES.c.state == "active"]
    if tenant_id is not None:
        guard.append(RES.c.tenant_id == tenant_id)
    ended = (
        await session.execute(update(RES).where(*guard).values(state=state, ended_at=now).returning(*RES.c))
    ).one_or_none()
    if ended is None:
        row = (await session.execute(select(RES).where(RES.c.id == reservation_id))).one_or_none()
        if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
            raise ComputeError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id!r}", "/reservationId")
        return reservation_of(row), False
    await session.execute(update(DEV).where(DEV.c.reservation_id == reservation_id).values(reservation_id=None))
    await refund(session, now=now, tenant_id=ended.tenant_id, gpu_model=ended.gpu_model, count=ended.gpu_count)
    mark_changed(session, [ended.node_id])
    return reservation_of(ended), True


async def end_reservations_on_node(session: AsyncSession, *, now: datetime, node_id: str) -> list[Reservation]:
    """The node is gone: end what it holds. Spot bookings, and anything on a spot node, end `preempted`;
    the others are `released`. Each refunds its quota once. The pool and node are locked
    first (see nodes.lock_node_and_pool), so no booking lands on the node meanwhile and
    the locks are taken in the bookers' order: pool, node, devices, quota."""
    node, _ = await lock_node_and_pool(session, node_id)
    # every reservation row before any quota row: a release in flight holds its reservation
    # and then refunds, so refunding one of ours before locking the next could deadlock with it
    rows = (
        await session.execute(
            select(RES.c.id, RES.c.spot)
            .where(RES.c.node_id == node_id, RES.c.state == "active")
            .order_by(RES.c.id)
            .with_for_update()
        )
    ).all()
    ended = []
    for row in rows:
        state = "preempted" if row.spot or node.spot else "released"
        reservation, changed = await end_reservation(session, now=now, reservation_id=row.id, state=state)
        if changed:
            ended.append(reservation)
    return ended


async def active_count(session: AsyncSession, *, pool_id: str | None = None, node_id: str | None = None) -> int:
    """How many active reservations a pool or node holds (a teardown waits for zero)."""
    query = select(func.count()).select_from(RES).where(RES.c.state == "active")
    if pool_id is not None:
        query = query.where(RES.c.pool_id == pool_id)
    if node_id is not None:
        query = query.where(RES.c.node_id == node_id)
    return int(await session.scalar(query) or 0)


async def assignment_for(session: AsyncSession, node_id: str) -> Assignment:
    """What bcd on the node must hold now."""
    node = (await session.execute(select(NODE.c.state, NODE.c.system_labels).where(NODE.c.id == node_id))).one_or_none()
    if node is None:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no node {node_id!r}", "/nodeId")
    rows = (
        await session.execute(
            select(RES.c.id, DEV.c.uuid)
            .join(DEV, DEV.c.reservation_id == RES.c.id)
            .where(RES.c.node_id == node_id, RES.c.state == "active")
            .order_by(RES.c.created_at, RES.c.id, DEV.c.idx)
        )
    ).all()
    held: dict[str, list[str]] = {}
    for row in rows:
        held.setdefault(row.id, []).append(row.uuid)
    return Assignment(
        node_id=node_id,
        reservations=tuple(Held(rid, tuple(uuids)) for rid, uuids in held.items()),
        system_labels=dict(node.system_labels),
        cordoned=node.state == "cordoned",
    )


class Reservations:
    """Booking and releasing for tenants; ending, assignments and the change hook for the system."""

    def __init__(self, db: Database, clock: Clock, feed: ChangeFeed | None = None) -> None:
        self.db = db
        self.clock = clock
        self.feed = feed or ChangeFeed(db)
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BatchBooker] = weakref.WeakKeyDictionary()

    def subscribe(self, callback: Listener) -> Callable[[], None]:
        """Call `callback(node_ids)` after each commit that changed those nodes' assignments."""
        return self.feed.subscribe(callback)

    def transaction(self) -> AbstractAsyncContextManager[AsyncSession]:
        """For system code using the session-level functions: the hook fires after this transaction commits."""
        return self.feed.transaction()

    async def create(
        self,
        tenant_id: str,
        pool_id: str,
        gpu_count: int,
        binding: str = "kubernetes",
        spot: bool = False,
        *,
        reservation_id: str | None = None,
    ) -> Reservation:
        """Book `gpu_count` GPUs on one ready node of the tenant's pool.

        Under `reservation_id` (an Idempotency-Key's, see ops.idempotency) a booking made
        already, by an earlier call whose caller never saw the answer, is answered instead."""
        check_request(gpu_count, binding, spot)
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = BatchBooker(self.feed, self.clock)
        return await batcher.book(Request(tenant_id, pool_id, gpu_count, binding, spot, reservation_id))

    async def _end(self, reservation_id: str, state: str, tenant_id: str | None) -> Reservation:
        """End in a transaction of its own; the change hook runs after commit."""
        async with self.db.transaction() as session:
            reservation, _ = await end_reservation(
                session, now=self.clock.now(), reservation_id=reservation_id, state=state, tenant_id=tenant_id
            )
        changed = take_changed(session)
        await self.feed.notify(changed)
        return reservation

    async def release(self, tenant_id: str, reservation_id: str) -> Reservation:
        """The tenant gives the GPUs back; releasing twice is harmless and refunds once."""
        return await self._end(reservation_id, "released", tenant_id)

    async def end(self, reservation_id: str, state: str = "released") -> Reservation:
        """System: end a reservation as released, preempted or ended, refunding its quota exactly once."""
        return await self._end(reservation_id, state, None)

    async def get(self, tenant_id: str, reservation_id: str) -> Reservation:
        async with self.db.session() as session:
            row = (await session.execute(select(RES).where(RES.c.id == reservation_id))).one_or_none()
        if row is None or row.tenant_id != tenant_id:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id!r}", "/reservationId")
        return reservation_of(row)

    async def list(self, tenant_id: str, *, pool_id: str | None = None, state: str | None = None) -> list[Reservation]:
        query = select(RES).where(RES.c.tenant_id == tenant_id)
        if pool_id is not None:
            query = query.where(RES.c.pool_id == pool_id)
        if state is not None:
            query = query.where(RES.c.state == state)
        async with self.db.session() as session:
            rows = (await session.execute(query.order_by(RES.c.created_at, RES.c.id))).all()
        return [reservation_of(r) for r in rows]

    async def assignments(self, node_id: str) -> Assignment:
        async with self.db.session() as session:
            return await assignment_for(session, node_id)
