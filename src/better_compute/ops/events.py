"""The decision log: a tenant's events by pool, node, reservation, kind and time, a page at a time.

Each event says what was decided (`kind`), why (`reason`), when, by whom (`principal`: an
API key's id, or null for the system itself) and about what (pool, node, reservation,
GPU UUIDs). A page answers `next`, the cursor of the page after it, or null at the end.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.decisions import Cursor, Event, Filters
from better_compute.decisions import get as get_decision
from better_compute.decisions import read as read_decisions
from better_compute.ops.pools import pool_id_named
from better_compute.ops.views import View, iso
from better_compute.server import Compute

__all__ = ["DEFAULT_LIMIT", "event_view", "get_event", "list_events", "parse_since"]

DEFAULT_LIMIT = 100
_AGO = re.compile(r"^(\d{1,9})([smhd])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def event_view(event: Event, pool_names: dict[str, str]) -> View:
    return {
        "id": event.id,
        "at": iso(event.at),
        "kind": event.kind,
        "reason": event.reason,
        "pool": pool_names.get(event.pool_id, event.pool_id) if event.pool_id is not None else None,
        "poolId": event.pool_id,
        "nodeId": event.node_id,
        "nodeName": event.node_name,
        "reservationId": event.reservation_id,
        "gpuIds": list(event.gpu_ids),
        "principal": event.principal,
        "details": event.details,
    }


def parse_since(since: str, now: datetime) -> datetime:
    """An ISO 8601 time (UTC when it names no offset) or a span back from now: 90s, 30m, 2h, 7d."""
    ago = _AGO.match(since.strip())
    if ago:
        return now - timedelta(**{_UNIT[ago.group(2)]: int(ago.group(1))})
    try:
        moment = datetime.fromisoformat(since.strip())
    except ValueError:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, "since is an ISO 8601 time or a span back from now (90s, 30m, 2h, 7d)", "/since"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


async def _pool_names(compute: Compute, tenant_id: str) -> dict[str, str]:
    return {p.id: p.name for p in await compute.pools.list(tenant_id, include_archived=True)}


async def list_events(
    compute: Compute,
    tenant_id: str,
    *,
    pool: str | None = None,
    node: str | None = None,
    reservation: str | None = None,
    kind: str | None = None,
    since: str | None = None,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> View:
    """One page of the tenant's events, oldest first; `node` is a node's id or name, `pool` a pool's name."""
    after = Cursor.decode(cursor) if cursor is not None else None
    start = parse_since(since, compute.clock.now()) if since is not None else None
    async with compute.db.session() as session:
        pool_id = await pool_id_named(session, tenant_id, pool, or_archived=True) if pool is not None else None
        filters = Filters(pool_id=pool_id, node=node, reservation_id=reservation, kind=kind, since=start)
        page = await read_decisions(session, tenant_id=tenant_id, filters=filters, limit=limit, after=after)
    names = await _pool_names(compute, tenant_id)
    return {
        "events": [event_view(e, names) for e in page.events],
        "next": page.next.encode() if page.next is not None else None,
    }


async def get_event(compute: Compute, tenant_id: str, event_id: str) -> View:
    async with compute.db.read() as session:
        event = await get_decision(session, tenant_id=tenant_id, event_id=event_id)
    return event_view(event, await _pool_names(compute, tenant_id))
