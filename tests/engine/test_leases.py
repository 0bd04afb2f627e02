"""Leases: a dead worker's item is taken over, its late result is fenced off, heartbeats hold a lease."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from engine_support import Gated, Held, Recorder, StallableLeaseClock, another_replica, item

from better_compute.core.clock import SimClock
from better_compute.engine import Engine, Outcome, queue
from better_compute.store import Database
from better_compute.store.clock import SharedClock


async def test_a_dead_workers_item_is_taken_over_and_its_late_result_dropped(
    database: Database, clock: SimClock
) -> None:
    dead = Held("job", Outcome.requeue(after=5))
    frozen = StallableLeaseClock(clock)  # the first worker's renewals never reach the database
    async with another_replica(database) as its_database:
        first = Engine(its_database, clock, [dead], owner="first", lease_seconds=60, lease_clock=frozen)
        taker = Recorder("job")
        second = Engine(database, clock, [taker], owner="second", lease_seconds=60)
        await first.submit("job", "k")
        stuck = asyncio.create_task(first.run_once())
        await dead.entered.wait()
        frozen.stall()

        clock.advance(59)
        assert await second.run_once() == 0, "the lease still holds"
        clock.advance(1)
        assert await second.run_once() == 1, "the lease expired: the item is taken over"
        assert [k for k, _, _ in taker.runs] == ["k"]

        frozen.resume()
        dead.release.set()
        assert await stuck == 1
    assert first.stale == 1
    row = await item(database, "job", "k")
    assert row.due_at is None, "the dead worker's requeue was dropped by the token fence"
    assert row.lock_token is None


async def test_a_heartbeat_keeps_a_long_run_s_lease(database: Database, clock: SimClock) -> None:
    long = Held("long", Outcome.done())
    runner = Engine(database, clock, [long], owner="runner", lease_seconds=60)
    other = Engine(database, clock, [Recorder("long")], owner="other", lease_seconds=60)
    await runner.submit("long", "k")
    task = asyncio.create_task(runner.run_once())
    await long.entered.wait()
    for beat in range(1, 6):  # over four minutes of work on a 60 s lease, a heartbeat every 50 s
        clock.advance(50)
        long.heartbeat_now.set()
        await _until(lambda: long.heartbeats == beat)  # noqa: B023
        assert await other.run_once() == 0
    assert long.heartbeats == 5
    long.release.set()
    await task
    assert runner.stale == 0
    assert (await item(database, "long", "k")).lock_token is None


async def test_a_renewal_that_commits_late_never_shortens_the_lease(database: Database, clock: SimClock) -> None:
    """The engine's keeper and a heartbeat race: the one that read the older time commits last."""
    await Engine(database, clock, [Recorder("job")]).submit("job", "k")
    start = clock.now()
    [held] = await queue.claim(
        database, kinds=["job"], owner="runner", now=start, lease_seconds=60, limit=1, lease_clock=SharedClock(clock)
    )
    read_early = SharedClock(SimClock(start + timedelta(seconds=10)))
    clock.advance(50)
    assert await queue.extend(database, [held], lease_seconds=60, lease_clock=SharedClock(clock)) == {held.id}
    assert await queue.extend(database, [held], lease_seconds=60, lease_clock=read_early) == {held.id}
    assert (await item(database, "job", "k")).lease_expires_at == start + timedelta(seconds=110)


async def test_a_run_stalled_past_its_lease_loses_its_item(database: Database, clock: SimClock) -> None:
    long = Held("long", Outcome.done())
    runner = Engine(database, clock, [long], owner="runner", lease_seconds=60)
    other = Engine(database, clock, [Recorder("long")], owner="other", lease_seconds=60)
    await runner.submit("long", "k")
    task = asyncio.create_task(runner.run_once())
    await long.entered.wait()
    clock.advance(100)  # one jump past the lease: the process stalled, its renewal comes too late
    assert await other.run_once() == 1
    long.release.set()
    await task
    assert runner.stale == 1


async def test_heartbeat_after_takeover_raises_lease_lost(database: Database, clock: SimClock) -> None:
    late = Gated("late", "heartbeat")

    runner = Engine(database, clock, [late], owner="runner", lease_seconds=60)
    other = Engine(database, clock, [Recorder("late")], owner="other", lease_seconds=60)
    await runner.submit("late", "k")
    task = asyncio.create_task(runner.run_once())
    await late.entered.wait()
    clock.advance(61)
    assert await other.run_once() == 1
    late.gate.set()
    await task
    assert len(late.lost) == 1
    assert runner.stale == 1


async def _until(condition: Callable[[], bool]) -> None:
    """Wait (in real time, a database round trip or two) for a run to reach a point."""
    try:
        async with asyncio.timeout(10):
            while not condition():
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError("condition never held") from None
