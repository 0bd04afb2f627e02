"""Finished work items leave the table, so it holds what is due, running, or worth reporting.

A work item at rest without an error (no lease, no due time, no `last_error`) records
nothing anyone reads: the next enqueue of its (kind, key) makes the row again. `compact`
deletes such rows once they have rested `RETENTION`; a row whose last run failed stays,
since doctor reports it (`queue.failing`). The guard is in the DELETE itself, so an
enqueue or a claim that touches a row first keeps it. A serving engine compacts every
`EVERY` of its clock (`compact_forever`), and on the same schedule runs the compactions
other parts registered with it (`Engine.compact_also`: the decision log's retention),
each on its own, so one failing leaves the others to run.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import delete

from better_compute.core.clock import Clock
from better_compute.engine.models import WorkItem
from better_compute.store import Database

__all__ = ["EVERY", "RETENTION", "Compaction", "compact", "compact_forever"]

log = logging.getLogger("better_compute.engine")

RETENTION = timedelta(minutes=10)
EVERY = 600.0

Compaction = tuple[str, Callable[[datetime], Awaitable[int]]]
"""What else compacts on the engine's schedule: a name (for the log) and a function of the time, which
returns how many rows it removed."""


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


async def compact_forever(db: Database, clock: Clock, *, every: float = EVERY, also: Sequence[Compaction] = ()) -> None:
    """`compact`, then each of `also`, every `every` seconds of `clock`, until cancelled."""

    async def finished_items(now: datetime) -> int:
        return await compact(db, now=now)

    while True:
        await clock.sleep(every)
        for what, compaction in (("finished work items", finished_items), *also):
            try:
                removed = await compaction(clock.now())
            except Exception:
                log.exception("could not compact %s; trying again in %ss", what, every)
                continue
            if removed:
                log.info("compacted %d %s", removed, what)
