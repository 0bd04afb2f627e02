"""Finished work items are deleted once rested; failing, due and leased ones stay."""

from __future__ import annotations

from datetime import timedelta

from engine_support import Recorder
from sqlalchemy import select

from better_compute.core.clock import SimClock
from better_compute.engine import Engine, Outcome, PermanentError, RunContext, enqueue
from better_compute.engine.compaction import RETENTION, compact
from better_compute.engine.models import WorkItem
from better_compute.store import Database


class Mixed(Recorder):
    """`done-*` finish, `again-*` come back in an hour, `broken-*` fail for good."""

    def __init__(self) -> None:
        super().__init__("mixed")

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        await super().run(ctx, key)
        if key.startswith("broken"):
            raise PermanentError("the spec cannot be met")
        return Outcome.requeue(3600) if key.startswith("again") else Outcome.done()


async def keys(db: Database) -> list[str]:
    async with db.session() as session:
        return sorted((await session.scalars(select(WorkItem.key))).all())


async def test_finished_items_go_once_rested_and_the_rest_stay(database: Database, clock: SimClock) -> None:
    mixed = Mixed()
    engine = Engine(database, clock, [mixed])
    async with database.transaction() as session:
        for key in ("done-1", "done-2", "again-1", "broken-1"):
            await enqueue(session, kind="mixed", key=key, now=clock.now())
    await engine.run_until_idle()
    assert await compact(database, now=clock.now()) == 0, "nothing rested long enough yet"
    clock.advance(RETENTION.total_seconds())
    async with database.transaction() as session:  # queued again while at rest: it stays
        await enqueue(session, kind="mixed", key="done-2", now=clock.now() + timedelta(hours=1))
    assert await compact(database, now=clock.now()) == 1
    assert await keys(database) == ["again-1", "broken-1", "done-2"], "doctor still sees broken-1"
    async with database.transaction() as session:
        await enqueue(session, kind="mixed", key="done-1", now=clock.now())
    await engine.run_until_idle()
    assert mixed.times("done-1") == [mixed.times("done-1")[0], clock.now()], "a compacted item runs again when queued"
