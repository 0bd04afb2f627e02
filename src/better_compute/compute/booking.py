"""Booking one request inside the caller's transaction, safe against concurrent bookers.

0. lock the pool row, then (step 2) the chosen node's row, `FOR KEY SHARE`, and check
   their state on the row as locked: the pool `active`, the node `ready`. Cordon,
   retire and archive take the same rows `FOR UPDATE` (pool before node), so a booking
   and a teardown of its node take turns: the teardown either sees the booking's
   reservation, or the booking sees the node no longer ready. The reservation
   INSERT's foreign-key check locks the rows too, but checks only that they exist.
   Bookers share these locks with each other; a heartbeat's update does not conflict
   with them. (SQLite drops `FOR ...`; there every write transaction holds the
   database's write lock from BEGIN IMMEDIATE, see store.db.)
1. candidate nodes of the pool that are `ready` with enough free, present GPUs, ranked
   by the placement rule (see placement);
2. lock the candidate node (above), then that many free devices of the best candidate with `FOR UPDATE SKIP LOCKED`
   (PostgreSQL; concurrent bookers take different devices instead of queueing), moving
   on to the next candidate when too few are left;
3. write the reservation and claim the devices with `UPDATE ... SET reservation_id
   WHERE reservation_id IS NULL`: a device row names at most one holder, and a count
   short of the ask means a concurrent booker won a device, so the transaction is
   retried (`Contended`);
4. charge the tenant's quota (a guarded update; see quotas).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Table, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id

from .changes import mark_changed
from .models import Reservation, ReservationState
from .placement import Candidate, rank
from .quotas import charge, quota_key
from .tables import DeviceRow, NodeRow, PoolRow, QuotaRow, ReservationRow

__all__ = [
    "BINDINGS",
    "MAX_GPUS",
    "Contended",
    "book",
    "check_request",
    "lock_ready_nodes",
    "no_capacity",
    "reservation_of",
]

BINDINGS = ("kubernetes", "container", "host")
MAX_GPUS = 1024

RES = cast(Table, ReservationRow.__table__)
DEV = cast(Table, DeviceRow.__table__)
NODE = cast(Table, NodeRow.__table__)
POOL = cast(Table, PoolRow.__table__)
QUOTA = cast(Table, QuotaRow.__table__)


class Contended(Exception):
    """A device this transaction chose was taken by a concurrent one: retry the whole transaction."""


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


def check_request(gpu_count: object, binding: object, spot: object) -> None:
    if not isinstance(gpu_count, int) or isinstance(gpu_count, bool) or not 0 < gpu_count <= MAX_GPUS:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"gpuCount is a whole number from 1 to {MAX_GPUS}", "/gpuCount")
    if binding not in BINDINGS:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"binding is one of {', '.join(BINDINGS)}", "/binding")
    if not isinstance(spot, bool):
        raise ComputeError(ErrorCode.INVALID_INPUT, "spot is true or false", "/spot")


def check_pool(pool: Any, tenant_id: str, pool_id: str) -> Any:
    """NOT_FOUND for a missing or foreign pool, INVALID_STATE for one that is not active."""
    if pool is None or pool.tenant_id != tenant_id:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no pool {pool_id!r}", "/poolId")
    if pool.state != "active":
        raise ComputeError(
            ErrorCode.INVALID_STATE, f"pool {pool.name!r} is {pool.state}: it takes no bookings", "/poolId"
        )
    return pool


def no_capacity(pool_name: str, gpu_count: int, spot: bool) -> ComputeError:
    kind = "spot or on-demand" if spot else "on-demand (not spot)"
    return ComputeError(
        ErrorCode.UNAVAILABLE,
        f"no ready {kind} node in pool {pool_name!r} has {gpu_count} free GPU(s)",
        "/gpuCount",
        reason="no-capacity",
    )


def pool_query(pool_ids: list[str]) -> Any:
    """The pools, locked `FOR KEY SHARE` in id order (see step 0), so their state is the committed one."""
    return (
        select(POOL.c.id, POOL.c.tenant_id, POOL.c.name, POOL.c.state, POOL.c.gpu_model)
        .where(POOL.c.id.in_(pool_ids))
        .order_by(POOL.c.id)
        .with_for_update(read=True, key_share=True)
    )


async def lock_ready_nodes(session: AsyncSession, node_ids: list[str]) -> set[str]:
    """Lock the nodes `FOR KEY SHARE` in id order (after their pools); those still `ready` come back."""
    query = (
        select(NODE.c.id, NODE.c.state)
        .where(NODE.c.id.in_(sorted(node_ids)))
        .order_by(NODE.c.id)
        .with_for_update(read=True, key_share=True)
    )
    return {row.id for row in (await session.execute(query)).all() if row.state == "ready"}


def reservation_values(
    *,
    now: datetime,
    tenant_id: str,
    pool_id: str,
    node_id: str,
    model: str,
    device_ids: list[str],
    binding: str,
    spot: bool,
    reservation_id: str | None = None,
) -> dict[str, Any]:
    return {
        "id": reservation_id or new_id("res"),
        "tenant_id": tenant_id,
        "pool_id": pool_id,
        "node_id": node_id,
        "gpu_model": model,
        "gpu_count": len(device_ids),
        "device_ids": device_ids,
        "binding": binding,
        "spot": spot,
        "state": "active",
        "created_at": now,
        "ended_at": None,
    }


class Values:
    """Attribute access over a dict, so a just-written row renders like a fetched one."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def free_gpus_of_ready_nodes(pool_ids: list[str]) -> Any:
    """Each ready node of the pools with its count of free, present GPUs.

    A scalar subquery per node, so that the count is an index lookup in
    ix_compute_devices_free whatever the planner's statistics say (a join and GROUP BY
    went quadratic on fresh PostgreSQL tables).
    """
    free = (
        select(func.count())
        .select_from(DEV)
        .where(DEV.c.node_id == NODE.c.id, DEV.c.reservation_id.is_(None), DEV.c.present.is_(True))
        .scalar_subquery()
        .label("free")
    )
    return select(NODE.c.id, NODE.c.pool_id, NODE.c.name, NODE.c.spot, NODE.c.connected, free).where(
        NODE.c.pool_id.in_(pool_ids), NODE.c.state == "ready"
    )


def candidate_of(row: Any) -> Candidate:
    return Candidate(row.id, row.name, bool(row.spot), bool(row.connected), int(row.free))


async def _candidates(session: AsyncSession, pool_id: str, gpu_count: int, spot: bool) -> list[Candidate]:
    rows = (await session.execute(free_gpus_of_ready_nodes([pool_id]))).all()
    return rank((candidate_of(r) for r in rows), gpu_count, spot)


async def _lock_free_devices(session: AsyncSession, node_id: str, gpu_count: int) -> list[str]:
    query = (
        select(DEV.c.id)
        .where(DEV.c.node_id == node_id, DEV.c.present.is_(True), DEV.c.reservation_id.is_(None))
        .order_by(DEV.c.idx)
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
    room), CONFLICT (quota), or `Contended` when a concurrent booker won a device (roll
    back and retry; `Reservations.create` does).
    """
    check_request(gpu_count, binding, spot)
    pool = check_pool((await session.execute(pool_query([pool_id]))).one_or_none(), tenant_id, pool_id)
    for candidate in await _candidates(session, pool_id, gpu_count, spot):
        if not await lock_ready_nodes(session, [candidate.node_id]):
            continue  # cordoned or retired since the candidates were read
        device_ids = await _lock_free_devices(session, candidate.node_id, gpu_count)
        if len(device_ids) == gpu_count:
            break
    else:
        raise no_capacity(pool.name, gpu_count, spot)
    model = quota_key(pool.gpu_model)
    values = reservation_values(
        now=now,
        tenant_id=tenant_id,
        pool_id=pool_id,
        node_id=candidate.node_id,
        model=model,
        device_ids=device_ids,
        binding=binding,
        spot=spot,
    )
    await session.execute(RES.insert().values(values))
    claimed = await session.execute(
        update(DEV).where(DEV.c.id.in_(device_ids), DEV.c.reservation_id.is_(None)).values(reservation_id=values["id"])
    )
    if cast(CursorResult[Any], claimed).rowcount != gpu_count:
        raise Contended
    await charge(session, now=now, tenant_id=tenant_id, gpu_model=model, count=gpu_count)
    mark_changed(session, [candidate.node_id])
    return reservation_of(Values(values))
