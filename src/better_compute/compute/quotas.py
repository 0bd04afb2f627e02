"""Quota: how many GPUs of one model a tenant may hold at once, and how many it holds.

`used` is a counter kept in step with active reservations: booking charges it with one
guarded `UPDATE ... WHERE gpu_limit IS NULL OR used + n <= gpu_limit`, and a reservation
leaving `active` refunds it in the same transaction as that state change, which itself
happens at most once (see reservations). No limit set means no limit, but usage is
still counted. Reservations of a pool without a GPU model count under "any".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Table, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.iam import require_tenant
from better_compute.store import Database

from .models import QuotaUsage
from .tables import QuotaRow
from .validation import check_text, invalid

__all__ = ["ANY_MODEL", "Quotas", "charge", "quota_exceeded", "quota_key", "refund", "set_quota", "usage"]

ANY_MODEL = "any"
_quota = cast(Table, QuotaRow.__table__)


def quota_key(gpu_model: str | None) -> str:
    return gpu_model or ANY_MODEL


def quota_exceeded(gpu_model: str, used: int, limit: int, count: int) -> ComputeError:
    return ComputeError(
        ErrorCode.CONFLICT,
        f"quota for {gpu_model} GPUs exceeded: {used} of {limit} in use, {count} more asked",
        "/gpuCount",
        reason="quota-exceeded",
    )


async def _ensure_row(session: AsyncSession, tenant_id: str, gpu_model: str, now: datetime) -> None:
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    await session.execute(
        insert(_quota)
        .values(tenant_id=tenant_id, gpu_model=gpu_model, gpu_limit=None, used=0, updated_at=now)
        .on_conflict_do_nothing()
    )


async def charge(session: AsyncSession, *, now: datetime, tenant_id: str, gpu_model: str, count: int) -> None:
    """Add `count` to the tenant's usage of `gpu_model`, or CONFLICT if that would pass its limit."""
    for _ in range(3):
        result = await session.execute(
            update(_quota)
            .where(
                _quota.c.tenant_id == tenant_id,
                _quota.c.gpu_model == gpu_model,
                (_quota.c.gpu_limit.is_(None)) | (_quota.c.used + count <= _quota.c.gpu_limit),
            )
            .values(used=_quota.c.used + count, updated_at=now)
        )
        if cast(CursorResult[Any], result).rowcount == 1:
            return
        row = (
            await session.execute(
                select(_quota.c.gpu_limit, _quota.c.used).where(
                    _quota.c.tenant_id == tenant_id, _quota.c.gpu_model == gpu_model
                )
            )
        ).one_or_none()
        if row is None:
            await _ensure_row(session, tenant_id, gpu_model, now)
        elif row.gpu_limit is not None and row.used + count > row.gpu_limit:
            raise quota_exceeded(gpu_model, row.used, row.gpu_limit, count)
        # else: a concurrent transaction made the row between our update and our read; update again.
    raise ComputeError(ErrorCode.UNAVAILABLE, "quota row could not be made; retry", "/gpuCount")


async def refund(session: AsyncSession, *, now: datetime, tenant_id: str, gpu_model: str, count: int) -> None:
    """Give `count` back. Callers call this only from the one transition out of `active`."""
    await session.execute(
        update(_quota)
        .where(_quota.c.tenant_id == tenant_id, _quota.c.gpu_model == gpu_model)
        .values(used=_quota.c.used - count, updated_at=now)
    )


async def set_quota(
    session: AsyncSession, *, now: datetime, tenant_id: str, gpu_model: str, limit: int | None
) -> QuotaUsage:
    """Set (or, with None, lift) the limit. A limit under the current usage blocks new bookings only."""
    check_text(gpu_model, "/gpuModel")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise invalid("/limit", "a quota limit is a whole number of GPUs, 0 or more (or null for none)")
    await require_tenant(session, tenant_id)
    await _ensure_row(session, tenant_id, gpu_model, now)
    await session.execute(
        update(_quota)
        .where(_quota.c.tenant_id == tenant_id, _quota.c.gpu_model == gpu_model)
        .values(gpu_limit=limit, updated_at=now)
    )
    return (await usage(session, tenant_id=tenant_id, gpu_model=gpu_model))[0]


async def usage(session: AsyncSession, *, tenant_id: str, gpu_model: str | None = None) -> list[QuotaUsage]:
    query = select(_quota.c.gpu_model, _quota.c.gpu_limit, _quota.c.used).where(_quota.c.tenant_id == tenant_id)
    if gpu_model is not None:
        query = query.where(_quota.c.gpu_model == gpu_model)
    rows = (await session.execute(query.order_by(_quota.c.gpu_model))).all()
    found = [QuotaUsage(tenant_id=tenant_id, gpu_model=r.gpu_model, limit=r.gpu_limit, used=r.used) for r in rows]
    if gpu_model is not None and not found:
        return [QuotaUsage(tenant_id=tenant_id, gpu_model=gpu_model, limit=None, used=0)]
    return found


class Quotas:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def set(self, tenant_id: str, gpu_model: str, limit: int | None) -> QuotaUsage:
        async with self.db.transaction() as session:
            return await set_quota(session, now=self.clock.now(), tenant_id=tenant_id, gpu_model=gpu_model, limit=limit)

    async def usage(self, tenant_id: str, gpu_model: str | None = None) -> list[QuotaUsage]:
        async with self.db.session() as session:
            await require_tenant(session, tenant_id)
            return await usage(session, tenant_id=tenant_id, gpu_model=gpu_model)
