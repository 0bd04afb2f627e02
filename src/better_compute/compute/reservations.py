"""Reservations: the service tenants book through, and ending bookings exactly once.

Booking itself is in booking (one request inside the caller's transaction) and batch
(group commit): concurrent `create` calls of one process share a transaction on either
database. On SQLite they take turns with every other writer of the process (store.write_turns).

Leaving `active` is one guarded `UPDATE ... WHERE state = 'active'` (releasing.end_reservations,
for any number of reservations at once): of two releases racing, exactly one changes the row,
and only that one frees the devices and refunds quota. Concurrent releases of one process share
a transaction (releasing.BatchReleaser). The change hook fires after commit with the nodes whose
assignments changed.

A reservation holding a GPU that bcd reports unhealthy reads `health: degraded` with that GPU
and its reason (`degraded_gpus`); it stays `active` and keeps its other GPUs, unless its pool's
`policy.health.degraded` is `end`: then `end_degraded` ends it (`ended`, quota refunded once).

Every booking and every end is a decision in the log (decisions), recorded in the same
transaction: `end_reservation` takes the reason, and records it only when it ended the booking.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.decisions import acting
from better_compute.store import Database

from .batch import BatchBooker, Request
from .booking import DEV, NODE, RES, check_request, reservation_of
from .changes import ChangeFeed, Listener
from .models import Assignment, DegradedGpu, Held, Node, Reservation, gpu_fault
from .nodes import lock_node_and_pool, update_inventory
from .pools import pool_row
from .releasing import END_STATES, BatchReleaser, Ended, Ending, check_state, end_reservations

__all__ = [
    "END_STATES",
    "Reservations",
    "active_count",
    "active_on_pools",
    "assignment_for",
    "degraded_gpus",
    "end_degraded",
    "end_reservation",
    "end_reservations_on_node",
    "report_inventory",
    "with_degraded",
]


async def degraded_gpus(session: AsyncSession, reservation_ids: Collection[str]) -> dict[str, tuple[DegradedGpu, ...]]:
    """The unhealthy GPUs each of these (active) reservations holds, in index order; absent: none."""
    if not reservation_ids:
        return {}
    rows = (
        await session.execute(
            select(DEV.c.reservation_id, DEV.c.uuid, DEV.c.idx, DEV.c.health_reason, DEV.c.health_xid)
            .where(DEV.c.reservation_id.in_(list(reservation_ids)), DEV.c.health_reason.is_not(None))
            .order_by(DEV.c.reservation_id, DEV.c.idx)
        )
    ).all()
    found: dict[str, list[DegradedGpu]] = {}
    for row in rows:
        found.setdefault(row.reservation_id, []).append(
            DegradedGpu(uuid=row.uuid, index=row.idx, reason=row.health_reason, xid=row.health_xid)
        )
    return {rid: tuple(gpus) for rid, gpus in found.items()}


def with_degraded(reservation: Reservation, degraded: dict[str, tuple[DegradedGpu, ...]]) -> Reservation:
    gpus = degraded.get(reservation.id, ())
    return dataclasses.replace(reservation, degraded_gpus=gpus) if gpus else reservation


async def end_degraded(session: AsyncSession, *, node_id: str, pool_id: str, now: datetime) -> list[Reservation]:
    """Where the pool's `policy.health.degraded` is `end`: end the node's reservations that hold an unhealthy
    GPU (`ended`, each refunded once); with `keep` (the default) they stay, degraded."""
    pool = await pool_row(session, pool_id=pool_id)
    if ((pool.policy or {}).get("health") or {}).get("degraded", "keep") != "end":
        return []
    holders = (
        await session.scalars(
            select(DEV.c.reservation_id)
            .where(DEV.c.node_id == node_id, DEV.c.reservation_id.is_not(None), DEV.c.health_reason.is_not(None))
            .distinct()
        )
    ).all()
    endings = []
    unhealthy = await degraded_gpus(session, [str(r) for r in holders])
    for reservation_id in sorted(str(r) for r in holders):
        sick = ", ".join(f"{g.uuid} ({gpu_fault(g.reason, g.xid)})" for g in unhealthy[reservation_id])
        why = f"it holds an unhealthy GPU, {sick}, and pool {pool.name}'s policy.health.degraded is end"
        endings.append(Ending(reservation_id, "ended", reason=why))
    return _ended_here(await end_reservations(session, now, endings))


def _ended_here(outcomes: list[Ended | ComputeError]) -> list[Reservation]:
    """The reservations these requests ended (system requests: none is refused but by a bug)."""
    for outcome in outcomes:
        if isinstance(outcome, ComputeError):
            raise outcome
    return [reservation for reservation, changed in cast(list[Ended], outcomes) if changed]


async def end_reservation(
    session: AsyncSession,
    *,
    now: datetime,
    reservation_id: str,
    state: str = "released",
    tenant_id: str | None = None,
    reason: str,
    principal: str | None = None,
) -> tuple[Reservation, bool]:
    """Move an active reservation to `state`, free its devices and refund its quota: at most once.

    Returns the reservation and whether this call ended it. Ending one that has already
    ended changes nothing and refunds nothing, however many times or however
    concurrently it is asked. The call that ends it records why (`reason`; `principal`: who asked).
    One request of releasing.end_reservations, the one way reservations end.
    """
    (outcome,) = await end_reservations(session, now, [Ending(reservation_id, state, tenant_id, reason, principal)])
    if isinstance(outcome, ComputeError):
        raise outcome
    return outcome


async def report_inventory(session: AsyncSession, node_id: str, inventory: dict[str, Any], now: datetime) -> Node:
    """bcd reported its inventory (the gateway): record it (GPU health included), then apply the pool's
    `policy.health.degraded` to the reservations now holding an unhealthy GPU (`end_degraded`)."""
    node = await update_inventory(session, node_id, inventory, now)
    if any(not d.healthy and d.reservation_id is not None for d in node.devices):
        await end_degraded(session, node_id=node.id, pool_id=node.pool_id, now=now)
    return node


async def end_reservations_on_node(
    session: AsyncSession, *, now: datetime, node_id: str, reason: str
) -> list[Reservation]:
    """The node is gone (`reason`: why): end what it holds. Spot bookings, and anything on a spot node, end
    `preempted`; the others are `released`. Each refunds its quota once. The pool and node are locked
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
    why = f"its {'Spot ' if node.spot else ''}node {node.name} went: {reason}"
    endings = [Ending(row.id, "preempted" if row.spot or node.spot else "released", reason=why) for row in rows]
    return _ended_here(await end_reservations(session, now, endings))


async def active_count(session: AsyncSession, *, pool_id: str | None = None, node_id: str | None = None) -> int:
    """How many active reservations a pool or node holds (a teardown waits for zero)."""
    query = select(func.count()).select_from(RES).where(RES.c.state == "active")
    if pool_id is not None:
        query = query.where(RES.c.pool_id == pool_id)
    if node_id is not None:
        query = query.where(RES.c.node_id == node_id)
    return int(await session.scalar(query) or 0)


async def active_on_pools(session: AsyncSession, pool_ids: Collection[str]) -> list[Reservation]:
    """The active reservations on the pools' nodes, whoever made them (what a plan's disruption counts)."""
    if not pool_ids:
        return []
    query = select(RES).where(RES.c.state == "active", RES.c.pool_id.in_(list(pool_ids)))
    return [reservation_of(row) for row in await session.execute(query.order_by(RES.c.created_at, RES.c.id))]


async def assignment_for(session: AsyncSession, node_id: str) -> Assignment:
    """What bcd on the node must hold now: the node's row and its active reservations' devices, in one
    statement (it is sent on every session's hello and every push)."""
    held_devices = RES.join(DEV, DEV.c.reservation_id == RES.c.id)
    query = (
        select(NODE.c.state, NODE.c.system_labels, RES.c.id, DEV.c.uuid)
        .select_from(NODE.outerjoin(held_devices, (RES.c.node_id == NODE.c.id) & (RES.c.state == "active")))
        .where(NODE.c.id == node_id)
        .order_by(RES.c.created_at, RES.c.id, DEV.c.idx)
    )
    rows = (await session.execute(query)).all()
    if not rows:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no node {node_id!r}", "/nodeId")
    held: dict[str, list[str]] = {}
    for row in rows:
        if row.id is not None:
            held.setdefault(row.id, []).append(row.uuid)
    node = rows[0]
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
        self._releasers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BatchReleaser] = (
            weakref.WeakKeyDictionary()
        )

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
        batcher = _this_loops(self._batchers, lambda: BatchBooker(self.feed, self.clock))
        return await batcher.book(Request(tenant_id, pool_id, gpu_count, binding, spot, reservation_id, acting()))

    async def _end(self, reservation_id: str, state: str, tenant_id: str | None, reason: str) -> Reservation:
        """End with the concurrent others of this process in one transaction (releasing.BatchReleaser);
        the change hook runs after commit."""
        check_state(state)
        releaser = _this_loops(self._releasers, lambda: BatchReleaser(self.feed, self.clock))
        return await releaser.submit(Ending(reservation_id, state, tenant_id, reason, acting()))

    async def release(self, tenant_id: str, reservation_id: str) -> Reservation:
        """The tenant gives the GPUs back; releasing twice is harmless and refunds once."""
        return await self._end(reservation_id, "released", tenant_id, "the tenant released it")

    async def end(self, reservation_id: str, state: str = "released", *, reason: str) -> Reservation:
        """System: end a reservation as released, preempted or ended (`reason`: why, for the decision log),
        refunding its quota exactly once."""
        return await self._end(reservation_id, state, None, reason)

    async def get(self, tenant_id: str, reservation_id: str) -> Reservation:
        async with self.db.session() as session:
            row = (await session.execute(select(RES).where(RES.c.id == reservation_id))).one_or_none()
            if row is None or row.tenant_id != tenant_id:
                raise ComputeError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id!r}", "/reservationId")
            return with_degraded(reservation_of(row), await degraded_gpus(session, [row.id]))

    async def list(self, tenant_id: str, *, pool_id: str | None = None, state: str | None = None) -> list[Reservation]:
        query = select(RES).where(RES.c.tenant_id == tenant_id)
        if pool_id is not None:
            query = query.where(RES.c.pool_id == pool_id)
        if state is not None:
            query = query.where(RES.c.state == state)
        async with self.db.session() as session:
            rows = (await session.execute(query.order_by(RES.c.created_at, RES.c.id))).all()
            degraded = await degraded_gpus(session, [r.id for r in rows if r.state == "active"])
        return [with_degraded(reservation_of(r), degraded) for r in rows]

    async def assignments(self, node_id: str) -> Assignment:
        async with self.db.read() as session:  # one statement
            return await assignment_for(session, node_id)


G = TypeVar("G")


def _this_loops(groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, G], make: Callable[[], G]) -> G:
    """The running loop's group commit (a batch's lock and futures belong to one loop), made on first use."""
    loop = asyncio.get_running_loop()
    group = groups.get(loop)
    if group is None:
        group = groups[loop] = make()
    return group
