"""On PostgreSQL a committed enqueue wakes every replica's engine (LISTEN/NOTIFY), not only its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from engine_support import Recorder

from better_compute.core.clock import SystemClock
from better_compute.engine import Engine, enqueue
from better_compute.store import Database


@pytest.fixture
async def three(postgres_database: str) -> AsyncIterator[list[Database]]:
    """Two engine replicas and an API replica that serves no engine, each with connections of its own."""
    databases = [Database(postgres_database) for _ in range(3)]
    yield databases
    for db in databases:
        await db.dispose()


async def test_an_enqueue_committed_elsewhere_wakes_every_replica(three: list[Database]) -> None:
    """The replicas poll once an hour: only the notification can make them find the items."""
    clock = SystemClock()
    recorders = [Recorder("notified"), Recorder("notified")]
    engines = [
        Engine(db, clock, [recorder], owner=f"replica-{n}", poll_seconds=3600)
        for n, (db, recorder) in enumerate(zip(three[:2], recorders, strict=True))
    ]
    servers = [asyncio.create_task(e.serve()) for e in engines]
    writer = three[2]
    try:
        await asyncio.sleep(0.2)  # the replicas claim nothing and go idle for an hour
        for n in range(20):
            async with writer.transaction() as session:
                await enqueue(session, kind="notified", key=f"item-{n}", now=clock.now())
            async with asyncio.timeout(30):
                while sum(len(r.runs) for r in recorders) <= n:
                    await asyncio.sleep(0.005)
    finally:
        for server in servers:
            server.cancel()
        await asyncio.gather(*servers, return_exceptions=True)
    ran = sorted(key for r in recorders for key, _, _ in r.runs)
    assert ran == sorted(f"item-{n}" for n in range(20)), "each item ran once, on one replica or the other"


async def test_a_rolled_back_enqueue_wakes_no_one(three: list[Database]) -> None:
    clock = SystemClock()
    recorder = Recorder("rolled-back")
    woken: list[int] = []
    engine = Engine(three[0], clock, [recorder], poll_seconds=3600)
    engine.wake = lambda: woken.append(1)  # type: ignore[method-assign]
    server = asyncio.create_task(engine.serve())
    try:
        await asyncio.sleep(0.2)
        woken.clear()
        with pytest.raises(RuntimeError):
            async with three[1].transaction() as session:
                await enqueue(session, kind="rolled-back", key="never", now=clock.now())
                raise RuntimeError("the API request failed after queueing")
        async with three[1].transaction() as session:
            await enqueue(session, kind="other", key="committed", now=clock.now())
        async with asyncio.timeout(30):
            while not woken:
                await asyncio.sleep(0.005)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    assert len(woken) == 1, "the committed enqueue woke the engine once; the rolled-back one never did"
    assert recorder.runs == []
