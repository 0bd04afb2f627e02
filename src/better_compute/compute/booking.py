"""What a booking is made of, for the one booking path (compute.batch, the group commit).

Why the pool and the node are locked `FOR KEY SHARE` and their state checked as locked (the
pool `active`, the node `ready`): cordon, retire and archive take the same rows `FOR UPDATE`
(pool before node), so a booking and a teardown of its node take turns: the teardown either
sees the booking's reservation, or the booking sees the node no longer ready. The reservation
INSERT's foreign-key check locks the rows too, but checks only that they exist. Bookers share
these locks with each other; a heartbeat's update does not conflict with them. (SQLite drops
`FOR ...`; there every write transaction holds the database's write lock from BEGIN
IMMEDIATE, see store.db.) A device row names at most one holder: it is claimed with `UPDATE
... SET reservation_id WHERE reservation_id IS NULL`, and a count short of the ask means a
concurrent booker won a device (`Contended`: the batch runs again).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id

from .models import Reservation, ReservationState
from .tables import DeviceRow, NodeRow, PoolRow, QuotaRow, ReservationRow

__all__ = [
    "BINDINGS",
    "MAX_GPUS",
    "Contended",
    "Values",
    "check_pool",
    "check_request",
    "no_capacity",
    "reservation_of",
    "reservation_values",
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
