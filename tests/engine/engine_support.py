"""Reconcilers for engine tests: they record what ran, when, and can be held mid-run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.clock import Clock
from better_compute.engine import LeaseLost, Outcome, RunContext
from better_compute.engine.models import WorkItem
from better_compute.store import Database


class Recorder:
    """Runs `behaviour` for each item and records (key, clock time, attempt)."""

    def __init__(self, kind: str, behaviour: Callable[[RunContext, str], Outcome] | None = None) -> None:
        self.kind = kind
        self.behaviour = behaviour or (lambda ctx, key: Outcome.done())
        self.runs: list[tuple[str, datetime, int]] = []

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        self.runs.append((key, ctx.clock.now(), ctx.attempt))
        return self.behaviour(ctx, key)

    def times(self, key: str) -> list[datetime]:
        return [t for k, t, _ in self.runs if k == key]


class Gated:
    """A run that waits at `gate`, then asks its context whether it still holds its lease
    (`check`: "fence" or "heartbeat"), recording the LeaseLost it gets."""

    def __init__(self, kind: str, check: str) -> None:
        self.kind = kind
        self.check = check
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.lost: list[LeaseLost] = []

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        self.entered.set()
        await self.gate.wait()
        try:
            await getattr(ctx, self.check)()
        except LeaseLost as exc:
            self.lost.append(exc)
            raise
        return Outcome.done()


class Held:
    """A reconciler that blocks inside its run until the test releases it."""

    def __init__(self, kind: str, outcome: Outcome) -> None:
        self.kind = kind
        self.outcome = outcome
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.heartbeat_now = asyncio.Event()
        self.heartbeats = 0

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        self.entered.set()
        while not self.release.is_set():
            waiter = asyncio.ensure_future(self.release.wait())
            beat = asyncio.ensure_future(self.heartbeat_now.wait())
            await asyncio.wait({waiter, beat}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            beat.cancel()
            await asyncio.gather(waiter, beat, return_exceptions=True)
            if self.heartbeat_now.is_set():
                self.heartbeat_now.clear()
                await ctx.heartbeat()
                self.heartbeats += 1
        return self.outcome


async def item(db: Database, kind: str, key: str) -> WorkItem:
    async with db.session() as session:
        return (await session.execute(select(WorkItem).where(WorkItem.kind == kind, WorkItem.key == key))).scalar_one()


class SkewedClock:
    """One replica's view of the world's clock, `offset` seconds off."""

    def __init__(self, world: Clock, offset: float) -> None:
        self.world = world
        self.offset = timedelta(seconds=offset)

    def now(self) -> datetime:
        return self.world.now() + self.offset

    async def sleep(self, seconds: float) -> None:
        await self.world.sleep(seconds)


@asynccontextmanager
async def another_replica(database: Database) -> AsyncIterator[Database]:
    """The same database as another replica opens it: a pool of its own, and on SQLite a queue of
    write turns of its own (as a second process would have), so that a transaction it leaves
    hanging holds up the others only where the database itself would."""
    replica = Database(database.url)
    try:
        yield replica
    finally:
        await replica.dispose()


class StallableLeaseClock:
    """The database's clock as one replica reaches it; `stall()` pauses its lease writes at that await.

    The stall is inside the replica's write transaction, before its first statement: give the
    stalled replica a Database of its own (`another_replica`)."""

    def __init__(self, world: Clock) -> None:
        self.world = world
        self._open = asyncio.Event()
        self._open.set()

    def stall(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def now(self, session: AsyncSession) -> datetime:
        await self._open.wait()
        return self.world.now()
