"""Finished work items leave the table, so it holds what is due, running, or worth reporting.

A work item at rest without an error (no lease, no due time, no `last_error`) records
nothing anyone reads: the next enqueue of its (kind, key) makes the row again. `compact`
deletes such rows once they have rested `RETENTION`; a row whose last run failed stays,
since doctor reports it (`queue.failing`). The guard is in the DELETE itself, so an
enqueue or a claim that touches a row first keeps it. A serving engine compacts every
`EVERY` of its clock (`compact_forever`).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import delete

from better_compute.core.clock import Clock
from better_compute.engine.models import WorkItem
from better_compute.store import Database

__all__ = ["EVERY", "RETENTION", "compact", "compact_forever"]

log = logging.getLogger("better_compute.engine")

RETENTION = timedelta(minutes=10)
EVERY = 600.0


async def compact(db: Database, *, now: datetime, retention: timedelta = RETENTION) -> int:
    """Delete the work items finished without error at least `retention` ago; returns how many."""
    stmt = delete(WorkItem).where(
        WorkItem.lock_token.is_(None),
        WorkItem.due_at.is_(None),
        WorkItem.last_error.is_(None),
        WorkItem.updated_at <= now - retention,
    )
    async with db.transaction() as session:
        result = await session.execute(stmt.execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)


async def compact_forever(db: Database, clock: Clock, *, every: float = EVERY) -> None:
    """`compact` every `every` seconds of `clock`, until cancelled."""
    while True:
        await clock.sleep(every)
        try:
            removed = await compact(db, now=clock.now())
        except Exception:
            log.exception("could not compact finished work items; trying again in %ss", every)
            continue
        if removed:
            log.info("compacted %d finished work items", removed)
