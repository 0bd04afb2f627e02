"""How long the decision log keeps an event, and compacting what is older.

A serving engine compacts every `engine.compaction.EVERY` of its clock (the same
schedule that compacts finished work items): each pass deletes the events older than
the retention period in batches of `BATCH`, each batch a transaction of its own, so a
large backlog never holds SQLite's write lock (or PostgreSQL's row locks) for long.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete, select

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.store import Database

from .log import LOG

__all__ = ["BATCH", "DEFAULT_RETENTION", "check_retention", "compact"]

DEFAULT_RETENTION = timedelta(days=30)
BATCH = 1000


def check_retention(retention: object, path: str = "/eventRetention") -> timedelta:
    """A retention period is a positive timedelta; anything else is INVALID_INPUT at `path`."""
    if not isinstance(retention, timedelta) or retention <= timedelta(0):
        raise ComputeError(ErrorCode.INVALID_INPUT, "the event retention is a positive period (a timedelta)", path)
    return retention


async def compact(db: Database, *, now: datetime, retention: timedelta = DEFAULT_RETENTION, batch: int = BATCH) -> int:
    """Delete the events recorded more than `retention` before `now`, `batch` at a time; returns how many."""
    cutoff = now - retention
    removed = 0
    while True:
        oldest = select(LOG.c.id).where(LOG.c.at < cutoff).order_by(LOG.c.at).limit(batch)
        async with db.transaction() as session:
            result = await session.execute(delete(LOG).where(LOG.c.id.in_(oldest)))
        count = int(cast(CursorResult[Any], result).rowcount or 0)
        removed += count
        if count < batch:
            return removed
