"""Reservations: booking a pool's GPUs, and ending bookings exactly once.

Booking runs in one transaction and never gives a device to two reservations:

1. pick candidate nodes of the pool that are `ready` and have enough free, present GPUs
   (a non-spot booking skips nodes labelled `bc.dev/capacity=spot`; a spot booking
   prefers them), best fit first;
2. lock that many free devices of the first candidate with `FOR UPDATE SKIP LOCKED`
   (PostgreSQL; concurrent bookers take different devices instead of queueing), moving
   on to the next candidate when too few are left;
3. write the reservation and claim the devices with `UPDATE ... SET reservation_id
   WHERE reservation_id IS NULL`; a count short of the ask means someone else won a
   device, and the whole transaction is retried;
4. charge the tenant's quota (a guarded update; see quotas).

On SQLite (one process) bookings and releases are also serialised by an in-process
lock, so writers never wait on the database lock.

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
from typing import Any, cast

from sqlalchemy import CursorResult, Table, func, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.store import Database

from .changes import ChangeFeed, Listener, mark_changed
from .models import Assignment, Held, Reservation, ReservationState
from .quotas import charge, quota_key, refund
from .tables import DeviceRow, NodeRow, PoolRow, ReservationRow

__all__ = [
    "BINDINGS",
    "END_STATES",
    "Reservations",
    "active_count",
    "assignment_for",
    "book",
    "end_reservation",
    "end_reservations_on_node",
]

BINDINGS = ("kubernetes", "container", "host")
END_STATES = ("released", "preempted", "ended")
MAX_GPUS = 1024
ATTEMPTS = 8
CANDIDATE_NODES = 8

_res = cast(Table, ReservationRow.__table__)
_dev = cast(Table, DeviceRow.__table__)
_node = cast(Table, NodeRow.__table__)
_pool = cast(Table, PoolRow.__table__)
_sqlite_locks: weakref.WeakKeyDictionary[Database, asyncio.Lock] = weakref.WeakKeyDictionary()


class _Contended(Exception):
    """A device this transaction chose was taken by a concurrent one: retry the whole booking."""


def reservation_of(row: Any) -> Reservation:
    return Reservation(
        id=row.id,
        tenant_id=row.tenant_id,
        pool_id=row.pool_id,
        node_id=row.node_id,
        device_ids=tuple(row.device_ids),
        gpu_model=row.gpu_model,
        gpu_count=row.gpu_count,
        binding=row.binding,
        spot=bool(row.spot),
        state=cast(ReservationState, row.state),
        created_at=row.created_at,
        ended_at=row.ended_at,
    )


def _check_request(gpu_count: object, binding: object, spot: object) -> None:
    if not isinstance(gpu_count, int) or isinstance(gpu_count, bool) or not 0 < gpu_count <= MAX_GPUS:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"gpuCount is a whole number from 1 to {MAX_GPUS}", "/gpuCount")
    if binding not in BINDINGS:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"binding is one of {', '.join(BINDINGS)}", "/binding")
    if not isinstance(spot, bool):
        raise ComputeError(ErrorCode.INVALID_INPUT, "spot is true or false", "/spot")


async def _candidates(session: AsyncSession, pool_id: str, gpu_count: int, spot: bool) -> list[str]:
    free = func.count(_dev.c.id).label("free")
    query = (
        select(_node.c.id, free)
        .join(_dev, _dev.c.node_id == _node.c.id)
        .where(
            _node.c.pool_id == pool_id,
            _node.c.state == "ready",
            _dev.c.present.is_(True),
            _dev.c.reservation_id.is_(None),
        )
        .group_by(_node.c.id, _node.c.spot, _node.c.connected, _node.c.name)
        .having(free >= gpu_count)
    )
    if spot:
        query = query.order_by(_node.c.spot.desc(), _node.c.connected.desc(), free, _node.c.name)
    else:
        query = query.where(_node.c.spot.is_(False)).order_by(_node.c.connected.desc(), free, _node.c.name)
    return list((await session.scalars(query.limit(CANDIDATE_NODES))).all())


async def _lock_free_devices(session: AsyncSession, node_id: str, gpu_count: int) -> list[str]:
    query = (
        select(_dev.c.id)
        .where(_dev.c.node_id == node_id, _dev.c.present.is_(True), _dev.c.reservation_id.is_(None))
        .order_by(_dev.c.idx)
        .limit(gpu_count)
        .with_for_update(skip_locked=True)
    )
    return list((await session.scalars(query)).all())


async def book(
    session: AsyncSession,
    *,
    now: datetime,
    tenant_id: str,
    pool_id: str,
    gpu_count: int,
    binding: str = "kubernetes",
    spot: bool = False,
) -> Reservation:
    """Book `gpu_count` GPUs of one node of the tenant's pool, inside the caller's transaction.

    Raises NOT_FOUND (pool), INVALID_STATE (pool not active), UNAVAILABLE (no node has
    room), CONFLICT (quota); a device lost to a concurrent booking raises an internal
    retry signal that `Reservations.create` handles by retrying the transaction.
    """
    _check_request(gpu_count, binding, spot)
    pool = (
        await session.execute(
            select(_pool.c.tenant_id, _pool.c.name, _pool.c.state, _pool.c.gpu_model).where(_pool.c.id == pool_id)
        )
    ).one_or_none()
    if pool is None or pool.tenant_id != tenant_id:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no pool {pool_id!r}", "/poolId")
    if pool.state != "active":
        raise ComputeError(
            ErrorCode.INVALID_STATE, f"pool {pool.name!r} is {pool.state}: it takes no bookings", "/poolId"
        )
    for node_id in await _candidates(session, pool_id, gpu_count, spot):
        device_ids = await _lock_free_devices(session, node_id, gpu_count)
        if len(device_ids) == gpu_count:
            break
    else:
        kind = "spot or on-demand" if spot else "on-demand (not spot)"
        raise ComputeError(
            ErrorCode.UNAVAILABLE,
            f"no ready {kind} node in pool {pool.name!r} has {gpu_count} free GPU(s)",
            "/gpuCount",
            reason="no-capacity",
        )
    model = quota_key(pool.gpu_model)
    reservation_id = new_id("res")
    values = {
        "id": reservation_id,
        "tenant_id": tenant_id,
        "pool_id": pool_id,
        "node_id": node_id,
        "gpu_model": model,
        "gpu_count": gpu_count,
        "device_ids": device_ids,
        "binding": binding,
        "spot": spot,
        "state": "active",
        "created_at": now,
        "ended_at": None,
    }
    await session.execute(_res.insert().values(values))
    claimed = await session.execute(
        update(_dev)
        .where(_dev.c.id.in_(device_ids), _dev.c.reservation_id.is_(None))
        .values(reservation_id=reservation_id)
    )
    if cast(CursorResult[Any], claimed).rowcount != gpu_count:
        raise _Contended
    await charge(session, now=now, tenant_id=tenant_id, gpu_model=model, count=gpu_count)
    mark_changed(session, [node_id])
    return reservation_of(_Values(values))


class _Values:
    """Attribute access over a dict, so a just-written row renders like a fetched one."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


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
    guard = [_res.c.id == reservation_id, _res.c.state == "active"]
    if tenant_id is not None:
        guard.append(_res.c.tenant_id == tenant_id)
    ended = (
        await session.execute(update(_res).where(*guard).values(state=state, ended_at=now).returning(*_res.c))
    ).one_or_none()
    if ended is None:
        row = (await session.execute(select(_res).where(_res.c.id == reservation_id))).one_or_none()
        if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
            raise ComputeError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id!r}", "/reservationId")
        return reservation_of(row), False
    await session.execute(update(_dev).where(_dev.c.reservation_id == reservation_id).values(reservation_id=None))
    await refund(session, now=now, tenant_id=ended.tenant_id, gpu_model=ended.gpu_model, count=ended.gpu_count)
    mark_changed(session, [ended.node_id])
    return reservation_of(ended), True


async def end_reservations_on_node(session: AsyncSession, *, now: datetime, node_id: str) -> list[Reservation]:
    """The node is gone: end what it holds. Spot bookings, and anything on a spot node, end `preempted`;
    the others are `released`. Each refunds its quota once."""
    node = (await session.execute(select(_node.c.spot).where(_node.c.id == node_id))).one_or_none()
    if node is None:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no node {node_id!r}", "/nodeId")
    rows = (
        await session.execute(select(_res.c.id, _res.c.spot).where(_res.c.node_id == node_id, _res.c.state == "active"))
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
    query = select(func.count()).select_from(_res).where(_res.c.state == "active")
    if pool_id is not None:
        query = query.where(_res.c.pool_id == pool_id)
    if node_id is not None:
        query = query.where(_res.c.node_id == node_id)
    return int(await session.scalar(query) or 0)


async def assignment_for(session: AsyncSession, node_id: str) -> Assignment:
    """What bcd on the node must hold now."""
    node = (
        await session.execute(select(_node.c.state, _node.c.system_labels).where(_node.c.id == node_id))
    ).one_or_none()
    if node is None:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no node {node_id!r}", "/nodeId")
    rows = (
        await session.execute(
            select(_res.c.id, _dev.c.uuid)
            .join(_dev, _dev.c.reservation_id == _res.c.id)
            .where(_res.c.node_id == node_id, _res.c.state == "active")
            .order_by(_res.c.created_at, _res.c.id, _dev.c.idx)
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


def _retryable(exc: DBAPIError) -> bool:
    code = getattr(getattr(exc, "orig", None), "sqlstate", None) or getattr(
        getattr(getattr(exc, "orig", None), "__cause__", None), "sqlstate", None
    )
    return isinstance(exc, IntegrityError) or code in ("40001", "40P01")


class Reservations:
    """Booking and releasing for tenants; ending, assignments and the change hook for the system."""

    def __init__(self, db: Database, clock: Clock, feed: ChangeFeed | None = None) -> None:
        self.db = db
        self.clock = clock
        self.feed = feed or ChangeFeed(db)

    def subscribe(self, callback: Listener) -> Callable[[], None]:
        """Call `callback(node_ids)` after each commit that changed those nodes' assignments."""
        return self.feed.subscribe(callback)

    def transaction(self) -> AbstractAsyncContextManager[AsyncSession]:
        """For system code using the session-level functions: the hook fires after this transaction commits."""
        return self.feed.transaction()

    def _lock(self) -> asyncio.Lock | None:
        if self.db.is_postgres:
            return None
        return _sqlite_locks.setdefault(self.db, asyncio.Lock())

    async def create(
        self, tenant_id: str, pool_id: str, gpu_count: int, binding: str = "kubernetes", spot: bool = False
    ) -> Reservation:
        _check_request(gpu_count, binding, spot)
        lock = self._lock()
        for attempt in range(ATTEMPTS):
            try:
                if lock is None:
                    return await self._create(tenant_id, pool_id, gpu_count, binding, spot)
                async with lock:
                    return await self._create(tenant_id, pool_id, gpu_count, binding, spot)
            except _Contended:
                pass
            except DBAPIError as exc:
                if not _retryable(exc) or attempt == ATTEMPTS - 1:
                    raise
            await asyncio.sleep(0)
        raise ComputeError(ErrorCode.UNAVAILABLE, "too many concurrent bookings for this pool; retry", "/poolId")

    async def _create(self, tenant_id: str, pool_id: str, gpu_count: int, binding: str, spot: bool) -> Reservation:
        async with self.feed.transaction() as session:
            return await book(
                session,
                now=self.clock.now(),
                tenant_id=tenant_id,
                pool_id=pool_id,
                gpu_count=gpu_count,
                binding=binding,
                spot=spot,
            )

    async def _end(self, reservation_id: str, state: str, tenant_id: str | None) -> Reservation:
        lock = self._lock()
        if lock is None:
            return await self._end_now(reservation_id, state, tenant_id)
        async with lock:
            return await self._end_now(reservation_id, state, tenant_id)

    async def _end_now(self, reservation_id: str, state: str, tenant_id: str | None) -> Reservation:
        async with self.feed.transaction() as session:
            reservation, _ = await end_reservation(
                session, now=self.clock.now(), reservation_id=reservation_id, state=state, tenant_id=tenant_id
            )
            return reservation

    async def release(self, tenant_id: str, reservation_id: str) -> Reservation:
        """The tenant gives the GPUs back; releasing twice is harmless and refunds once."""
        return await self._end(reservation_id, "released", tenant_id)

    async def end(self, reservation_id: str, state: str = "released") -> Reservation:
        """System: end a reservation as released, preempted or ended, refunding its quota exactly once."""
        return await self._end(reservation_id, state, None)

    async def get(self, tenant_id: str, reservation_id: str) -> Reservation:
        async with self.db.session() as session:
            row = (await session.execute(select(_res).where(_res.c.id == reservation_id))).one_or_none()
        if row is None or row.tenant_id != tenant_id:
            raise ComputeError(ErrorCode.NOT_FOUND, f"no reservation {reservation_id!r}", "/reservationId")
        return reservation_of(row)

    async def list(self, tenant_id: str, *, pool_id: str | None = None, state: str | None = None) -> list[Reservation]:
        query = select(_res).where(_res.c.tenant_id == tenant_id)
        if pool_id is not None:
            query = query.where(_res.c.pool_id == pool_id)
        if state is not None:
            query = query.where(_res.c.state == state)
        async with self.db.session() as session:
            rows = (await session.execute(query.order_by(_res.c.created_at, _res.c.id))).all()
        return [reservation_of(r) for r in rows]

    async def assignments(self, node_id: str) -> Assignment:
        async with self.db.session() as session:
            return await assignment_for(session, node_id)
