"""Replicas on one PostgreSQL never run the same item at the same time."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from better_compute.core.clock import SimClock, SystemClock
from better_compute.core.ids import new_id
from better_compute.engine import Engine, Outcome, RunContext
from better_compute.store import Database

ITEMS = 150
RUNS_PER_ITEM = 3


class OverlapDetector:
    """Each item runs RUNS_PER_ITEM times; a second run entering while one is inside is an overlap."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.inside: set[str] = set()
        self.overlaps: list[str] = []
        self.runs: Counter[str] = Counter()
        self.by_owner: Counter[str] = Counter()

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        if key in self.inside:
            self.overlaps.append(key)
        self.inside.add(key)
        try:
            await ctx.heartbeat()  # a real round trip, so the other replica's claims interleave
            for _ in range(3):
                await asyncio.sleep(0)
            self.runs[key] += 1
            return Outcome.requeue(after=0) if self.runs[key] < RUNS_PER_ITEM else Outcome.done()
        finally:
            self.inside.discard(key)

    def finished(self) -> bool:
        return len(self.runs) == ITEMS and all(n >= RUNS_PER_ITEM for n in self.runs.values())


@pytest.fixture
async def replicas(postgres_database: str) -> tuple[Database, Database]:
    first, second = Database(postgres_database), Database(postgres_database)
    yield first, second  # type: ignore[misc]
    await first.dispose()
    await second.dispose()


async def _submit_all(engine: Engine, kind: str) -> None:
    for n in range(ITEMS):
        await engine.submit(kind, f"item-{n}")


async def test_two_replicas_never_overlap_on_an_item(replicas: tuple[Database, Database]) -> None:
    clock = SimClock()
    kind = new_id("overlap")
    detector = OverlapDetector(kind)
    engines = [Engine(db, clock, [detector], owner=f"replica-{n}", batch_size=16) for n, db in enumerate(replicas)]
    await _submit_all(engines[0], kind)
    ran = Counter[str]()

    async def drive(engine: Engine) -> None:
        while not detector.finished():
            ran[engine.owner] += await engine.run_once()
            await asyncio.sleep(0)

    await asyncio.wait_for(asyncio.gather(*(drive(e) for e in engines)), timeout=60)
    assert detector.overlaps == []
    assert set(detector.runs.values()) == {RUNS_PER_ITEM}, "every run applied exactly once"
    assert ran["replica-0"] > 0 and ran["replica-1"] > 0, "both replicas took work"
    assert sum(e.stale for e in engines) == 0


async def test_two_serving_replicas_share_the_work_without_overlap(replicas: tuple[Database, Database]) -> None:
    clock = SystemClock()
    kind = new_id("serve")
    detector = OverlapDetector(kind)
    engines = [
        Engine(db, clock, [detector], owner=f"server-{n}", concurrency=8, poll_seconds=0.05)
        for n, db in enumerate(replicas)
    ]
    await _submit_all(engines[0], kind)
    servers = [asyncio.create_task(e.serve()) for e in engines]
    try:
        async with asyncio.timeout(60):
            while not detector.finished():
                await asyncio.sleep(0.01)
    finally:
        for server in servers:
            server.cancel()
        for server in servers:
            with pytest.raises(asyncio.CancelledError):
                await server
    assert detector.overlaps == []
    assert set(detector.runs.values()) == {RUNS_PER_ITEM}
