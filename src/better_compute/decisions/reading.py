"""Reading a tenant's decision log: filters, oldest first, a page at a time.

Only the tenant's own events are ever read (`tenant_id` is part of every query), so
another tenant's reservation id, node or event id finds nothing. A page ends with a
cursor (the last event's time and sequence number) when more may follow; the next
page starts after it. Events are in (time, sequence) order, those of one moment as
they were recorded: the same query with the cursor never repeats an event.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.errors import ComputeError, ErrorCode

from .log import LOG, Kind

__all__ = ["MAX_LIMIT", "Cursor", "Event", "Filters", "Page", "get", "read"]

MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Event:
    """A recorded decision."""

    id: str
    seq: int
    at: datetime
    kind: str
    tenant_id: str
    reason: str
    pool_id: str | None
    node_id: str | None
    node_name: str | None
    reservation_id: str | None
    gpu_ids: tuple[str, ...]
    principal: str | None
    details: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next page starts: after this event."""

    at: datetime
    seq: int

    def encode(self) -> str:
        raw = json.dumps([self.at.isoformat(), self.seq]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, path: str = "/cursor") -> Cursor:
        refused = ComputeError(ErrorCode.INVALID_INPUT, "the cursor is not one a page of events answered", path)
        try:
            at, seq = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            moment = datetime.fromisoformat(at)
        except (ValueError, TypeError, binascii.Error) as exc:
            raise refused from exc
        if not isinstance(seq, int) or isinstance(seq, bool) or moment.tzinfo is None:
            raise refused
        return cls(moment.astimezone(UTC), seq)


@dataclass(frozen=True, slots=True)
class Filters:
    """Which events: each given filter must match (`node` is a node's id or its name)."""

    pool_id: str | None = None
    node: str | None = None
    reservation_id: str | None = None
    kind: str | None = None
    since: datetime | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in set(Kind):
            known = ", ".join(k.value for k in Kind)
            raise ComputeError(ErrorCode.INVALID_INPUT, f"kind is one of {known}", "/kind")


@dataclass(frozen=True, slots=True)
class Page:
    events: Sequence[Event]
    next: Cursor | None
    """Where the next page starts; None when this page is the last."""


async def read(
    session: AsyncSession, *, tenant_id: str, filters: Filters, limit: int = 100, after: Cursor | None = None
) -> Page:
    """One page of the tenant's events that match `filters`, oldest first, after `after`."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"limit is a whole number from 1 to {MAX_LIMIT}", "/limit")
    query = select(LOG).where(LOG.c.tenant_id == tenant_id)
    if filters.pool_id is not None:
        query = query.where(LOG.c.pool_id == filters.pool_id)
    if filters.node is not None:
        query = query.where(or_(LOG.c.node_id == filters.node, LOG.c.node_name == filters.node))
    if filters.reservation_id is not None:
        query = query.where(LOG.c.reservation_id == filters.reservation_id)
    if filters.kind is not None:
        query = query.where(LOG.c.kind == filters.kind)
    if filters.since is not None:
        query = query.where(LOG.c.at >= filters.since)
    if after is not None:
        query = query.where(or_(LOG.c.at > after.at, and_(LOG.c.at == after.at, LOG.c.seq > after.seq)))
    rows = (await session.execute(query.order_by(LOG.c.at, LOG.c.seq).limit(limit + 1))).all()
    events = [_event(row) for row in rows[:limit]]
    more = len(rows) > limit
    return Page(events, Cursor(events[-1].at, events[-1].seq) if more else None)


async def recorded_at(
    session: AsyncSession, *, tenant_id: str, pool_id: str, kind: Kind, since: datetime
) -> list[tuple[str | None, datetime]]:
    """The pool's events of `kind` since `since`: each one's node id and when (a rate limit counts them)."""
    query = (
        select(LOG.c.node_id, LOG.c.at)
        .where(LOG.c.tenant_id == tenant_id, LOG.c.at >= since, LOG.c.pool_id == pool_id, LOG.c.kind == kind.value)
        .order_by(LOG.c.at, LOG.c.seq)
    )
    return [(row.node_id, row.at) for row in await session.execute(query)]


async def get(session: AsyncSession, *, tenant_id: str, event_id: str) -> Event:
    """One of the tenant's events by id (NOT_FOUND for another tenant's, as for none)."""
    row = (await session.execute(select(LOG).where(LOG.c.id == event_id, LOG.c.tenant_id == tenant_id))).one_or_none()
    if row is None:
        raise ComputeError(ErrorCode.NOT_FOUND, f"no event {event_id!r}", "/eventId")
    return _event(row)


def _event(row: Any) -> Event:
    return Event(
        id=row.id,
        seq=row.seq,
        at=row.at,
        kind=row.kind,
        tenant_id=row.tenant_id,
        reason=row.reason,
        pool_id=row.pool_id,
        node_id=row.node_id,
        node_name=row.node_name,
        reservation_id=row.reservation_id,
        gpu_ids=tuple(row.gpu_ids or ()),
        principal=row.principal,
        details=dict(row.details or {}),
    )
