"""Leases renewed while a run lives, judged on the database's clock, and fenced before outside writes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from engine_support import Gated, Held, Recorder, SkewedClock, StallableLeaseClock, another_replica, item
from sqlalchemy import text

from better_compute.core.clock import SimClock
from better_compute.engine import Engine, Outcome, RunContext
from better_compute.store import Database
from better_compute.store.clock import ServerClock, SharedClock


async def _until(condition: Callable[[], object]) -> None:
    """Wait (in real time: a database round trip or two) for a background step to land."""
    async with asyncio.timeout(10):
        while True:
            result = condition()
            if not isinstance(result, bool):
                result = await result  # type: ignore[misc]
            if result:
                return
            await asyncio.sleep(0.001)


async def test_a_run_five_leases_long_keeps_its_item_and_runs_once(database: Database, clock: SimClock) -> None:
    long = Held("long", Outcome.done())
    runner = Engine(database, clock, [long], owner="runner", lease_seconds=60)
    taker = Recorder("long")
    other = Engine(database, clock, [taker], owner="other", lease_seconds=60)
    await runner.submit("long", "k")
    task = asyncio.create_task(runner.run_once())
    await long.entered.wait()
    for _ in range(15):  # 300 s of work on a 60 s lease, and no heartbeat from the reconciler
        clock.advance(20)
        want = clock.now() + timedelta(seconds=60)

        async def renewed(want: object = want) -> bool:
            return (await item(database, "long", "k")).lease_expires_at == want

        await _until(renewed)
        assert await other.run_once() == 0, "a live run's lease is renewed on its own"
    long.release.set()
    assert await task == 1
    assert taker.runs == [] and long.heartbeats == 0
    assert runner.stale == 0
    assert (await item(database, "long", "k")).lock_token is None


async def test_fence_stops_a_run_whose_lease_passed_before_it_writes(database: Database, clock: SimClock) -> None:
    writes: list[str] = []
    gate = asyncio.Event()
    entered = asyncio.Event()

    class Provisioner:
        kind = "prov"

        def __init__(self, name: str, *, wait: bool) -> None:
            self.name, self.wait = name, wait

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            if self.wait:
                entered.set()
                await gate.wait()
            await ctx.fence()
            writes.append(self.name)  # the provider call
            return Outcome.done()

    frozen = StallableLeaseClock(clock)
    async with another_replica(database) as its_database:
        slow = Engine(
            its_database, clock, [Provisioner("slow", wait=True)], owner="slow", lease_seconds=60, lease_clock=frozen
        )
        fast = Engine(database, clock, [Provisioner("fast", wait=False)], owner="fast", lease_seconds=60)
        await slow.submit("prov", "k")
        task = asyncio.create_task(slow.run_once())
        await entered.wait()
        frozen.stall()  # the slow replica's process stalls: its renewals do not get through
        clock.advance(61)
        assert await fast.run_once() == 1
        frozen.resume()
        gate.set()
        await task
    assert writes == ["fast"], "the run that lost its lease never reached the provider"
    assert slow.stale == 1


async def test_a_run_that_lost_its_lease_makes_no_domain_write_not_even_in_its_finally(
    database: Database, clock: SimClock
) -> None:
    """`ctx.guard(session)` inside the write's transaction: the stalled run's write (here in a
    `finally`, where a run saves what it observed) is refused, and rolled back with its transaction."""
    writes: list[str] = []
    gate, entered = asyncio.Event(), asyncio.Event()

    class Saver:
        kind = "save"

        def __init__(self, name: str, *, wait: bool, db: Database) -> None:
            self.name, self.wait, self.db = name, wait, db

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            try:
                if self.wait:
                    entered.set()
                    await gate.wait()
            finally:
                async with self.db.transaction() as session:
                    await ctx.guard(session)
                    writes.append(self.name)  # the domain write, in the guarded transaction
            return Outcome.done()

    frozen = StallableLeaseClock(clock)
    async with another_replica(database) as its_database:
        slow = Engine(
            its_database,
            clock,
            [Saver("slow", wait=True, db=its_database)],
            owner="slow",
            lease_seconds=60,
            lease_clock=frozen,
        )
        fast = Engine(database, clock, [Saver("fast", wait=False, db=database)], owner="fast", lease_seconds=60)
        await slow.submit("save", "k")
        task = asyncio.create_task(slow.run_once())
        await entered.wait()
        frozen.stall()
        clock.advance(61)
        assert await fast.run_once() == 1
        frozen.resume()
        gate.set()
        await task
    assert writes == ["fast"], "the run whose lease passed wrote nothing"
    assert slow.stale == 1


async def test_fence_after_the_lease_lapsed_raises_even_if_nobody_took_the_item(
    database: Database, clock: SimClock
) -> None:
    late = Gated("late", "fence")

    frozen = StallableLeaseClock(clock)
    runner = Engine(database, clock, [late], owner="runner", lease_seconds=60, lease_clock=frozen)
    await runner.submit("late", "k")
    task = asyncio.create_task(runner.run_once())
    await late.entered.wait()
    frozen.stall()
    clock.advance(60)
    frozen.resume()
    late.gate.set()
    await task
    assert len(late.lost) == 1 and runner.stale == 1
    row = await item(database, "late", "k")
    assert row.lock_token is not None, "the expired lease is left for any worker to take over"


async def test_a_replica_whose_clock_runs_ahead_cannot_take_a_live_lease(database: Database, clock: SimClock) -> None:
    database_time = SharedClock(clock)  # the database's clock: the world's
    held = Held("job", Outcome.done())
    owner = Engine(database, clock, [held], owner="owner", lease_seconds=60, lease_clock=database_time)
    ahead = SkewedClock(clock, offset=90)  # 90 s ahead: by its own clock the lease ran out
    thief = Recorder("job")
    skewed = Engine(database, ahead, [thief], owner="ahead", lease_seconds=60, lease_clock=database_time)
    await owner.submit("job", "k")
    task = asyncio.create_task(owner.run_once())
    await held.entered.wait()
    assert await skewed.run_once() == 0, "the lease is judged on the database's clock, not the replica's"
    assert thief.runs == []
    held.release.set()
    await task
    assert owner.stale == 0


async def test_leases_are_written_on_the_database_servers_clock(database: Database, clock: SimClock) -> None:
    """The simulated clock says 2026-01-01; the lease follows the database server's own time."""
    held = Held("job", Outcome.done())
    engine = Engine(database, clock, [held], owner="owner", lease_seconds=60, lease_clock=ServerClock())
    await engine.submit("job", "k")
    server_now = "SELECT now()" if database.is_postgres else "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"
    async with database.session() as session:
        before = await ServerClock().now(session)
        raw = await session.scalar(text(server_now))
    assert abs((before - _as_utc(raw)).total_seconds()) < 5
    task = asyncio.create_task(engine.run_once())
    await held.entered.wait()
    async with database.session() as session:
        after = await ServerClock().now(session)
    lease = (await item(database, "job", "k")).lease_expires_at
    assert lease is not None
    assert before + timedelta(seconds=60) <= lease + timedelta(milliseconds=1)
    assert lease <= after + timedelta(seconds=60, milliseconds=1)
    assert lease - clock.now() > timedelta(days=1), "not the replica's (simulated) clock"
    held.release.set()
    await task


async def test_fences_in_a_row_cost_one_renewal_until_a_third_of_a_lease_has_passed(
    database: Database, clock: SimClock
) -> None:
    expiries: list[float] = []  # seconds from the start to the lease's expiry, after each fence
    steps = [0, 5, 14, 1, 30]  # seconds on the clock before each fence

    class Writer:
        kind = "writer"

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            for seconds in steps:
                clock.advance(seconds)
                await ctx.fence()
                lease = (await item(database, "writer", "k")).lease_expires_at
                assert lease is not None
                expiries.append((lease - start).total_seconds())
            return Outcome.done()

    engine = Engine(database, clock, [Writer()], owner="w", lease_seconds=60)
    await engine.submit("writer", "k")
    start = clock.now()
    assert await engine.run_once() == 1
    # at 0 s the fence renews (to the claim's own expiry); at 5 and 19 s that renewal, under 20 s old
    # (a third of the lease), stands; at 20 s it is renewed (the engine's own renewal, due then
    # too, writes the same expiry), and at 50 s again
    assert expiries == [60, 60, 60, 80, 110]


def _as_utc(raw: object) -> datetime:
    if isinstance(raw, datetime):
        return raw.astimezone(UTC)
    return datetime.fromisoformat(str(raw)).replace(tzinfo=UTC)
