"""The engine on SQLite and PostgreSQL: runs, requeues, backoff, enqueue during a run."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any

import pytest
from engine_support import Recorder, item
from sqlalchemy import select

import better_compute.engine.engine as engine_module
from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.engine import Engine, Outcome, PermanentError, RunContext, TemporaryError, enqueue
from better_compute.store import Database


async def test_an_enqueued_item_runs_once_and_rests(database: Database, clock: SimClock) -> None:
    recorder = Recorder("thing")
    engine = Engine(database, clock, [recorder])
    async with database.transaction() as session:
        await enqueue(session, kind="thing", key="a", now=clock.now())
    assert await engine.run_until_idle() == 1
    assert recorder.runs == [("a", clock.now(), 1)]
    row = await item(database, "thing", "a")
    assert (row.due_at, row.lock_token, row.attempts) == (None, None, 0)
    assert await engine.run_once() == 0


async def test_enqueue_keeps_the_earlier_due_time(database: Database, clock: SimClock) -> None:
    now = clock.now()
    async with database.transaction() as session:
        await enqueue(session, kind="thing", key="a", now=now, due=now + timedelta(seconds=50))
        await enqueue(session, kind="thing", key="a", now=now, due=now + timedelta(seconds=90))
    assert (await item(database, "thing", "a")).due_at == now + timedelta(seconds=50)
    async with database.transaction() as session:
        await enqueue(session, kind="thing", key="a", now=now, due=now + timedelta(seconds=10))
    assert (await item(database, "thing", "a")).due_at == now + timedelta(seconds=10)


async def test_requeue_runs_again_exactly_when_due(database: Database, clock: SimClock) -> None:
    counts = {"n": 0}

    def poll_three_times(ctx: RunContext, key: str) -> Outcome:
        counts["n"] += 1
        return Outcome.requeue(after=30) if counts["n"] < 3 else Outcome.done()

    recorder = Recorder("poll", poll_three_times)
    engine = Engine(database, clock, [recorder])
    start = clock.now()
    await engine.submit("poll", "p")
    await engine.run_until_idle(until=start + timedelta(hours=1))
    assert recorder.times("p") == [start, start + timedelta(seconds=30), start + timedelta(seconds=60)]
    assert clock.now() == start + timedelta(hours=1)


async def test_delete_backoff_is_exact_on_the_simulated_clock(database: Database, clock: SimClock) -> None:
    def fail(ctx: RunContext, key: str) -> Outcome:
        raise TemporaryError("provider refused the delete", schedule="delete")

    recorder = Recorder("cluster-delete", fail)
    engine = Engine(database, clock, [recorder])
    start = clock.now()
    await engine.submit("cluster-delete", "c1")
    await engine.run_until_idle(until=start + timedelta(seconds=38100 + 2 * 21600))
    times = recorder.times("c1")
    gaps = [(b - a).total_seconds() / 60 for a, b in itertools.pairwise(times)]
    assert gaps == [5, 10, 20, 40, 80, 160, 320, 360, 360]
    assert [attempt for _, _, attempt in recorder.runs] == list(range(1, 11))
    row = await item(database, "cluster-delete", "c1")
    assert row.attempts == 10
    assert row.last_error == "TemporaryError: provider refused the delete"


async def test_success_resets_the_failure_count(database: Database, clock: SimClock) -> None:
    def flaky(ctx: RunContext, key: str) -> Outcome:
        if ctx.attempt < 3:
            raise TemporaryError("not yet", schedule="adopt")
        return Outcome.done()

    recorder = Recorder("adopt", flaky)
    engine = Engine(database, clock, [recorder])
    start = clock.now()
    await engine.submit("adopt", "k")
    await engine.run_until_idle(until=start + timedelta(hours=1))
    assert recorder.times("k") == [start, start + timedelta(seconds=120), start + timedelta(seconds=240)]
    row = await item(database, "adopt", "k")
    assert (row.attempts, row.last_error, row.due_at) == (0, None, None)


async def test_unavailable_with_retry_after_is_honoured(database: Database, clock: SimClock) -> None:
    def throttled(ctx: RunContext, key: str) -> Outcome:
        if ctx.attempt == 1:
            raise ComputeError("UNAVAILABLE", "throttled by the provider", retry_after=17)
        return Outcome.done()

    recorder = Recorder("t", throttled)
    engine = Engine(database, clock, [recorder])
    start = clock.now()
    await engine.submit("t", "k")
    await engine.run_until_idle(until=start + timedelta(minutes=5))
    assert recorder.times("k") == [start, start + timedelta(seconds=17)]


async def test_permanent_error_stops_until_enqueued_again(database: Database, clock: SimClock) -> None:
    def refuse(ctx: RunContext, key: str) -> Outcome:
        if ctx.attempt == 1:
            raise PermanentError("the document can never work")
        return Outcome.done()

    recorder = Recorder("p", refuse)
    engine = Engine(database, clock, [recorder])
    start = clock.now()
    await engine.submit("p", "k")
    await engine.run_until_idle(until=start + timedelta(days=2))
    assert len(recorder.runs) == 1
    assert (await item(database, "p", "k")).last_error == "PermanentError: the document can never work"
    await engine.submit("p", "k")
    await engine.run_until_idle()
    assert recorder.times("k") == [start, start + timedelta(days=2)]


async def test_an_enqueue_during_a_run_is_not_lost(database: Database, clock: SimClock) -> None:
    """The desired state changed while the item ran: it runs again now, not in an hour."""
    runs: list[int] = []

    class ChangesMidRun:
        kind = "m"

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            runs.append(ctx.attempt)
            if len(runs) == 1:
                async with database.transaction() as session:
                    await enqueue(session, kind="m", key=key, now=ctx.clock.now())
                return Outcome.requeue(after=3600)
            return Outcome.done()

    engine = Engine(database, clock, [ChangesMidRun()])
    await engine.submit("m", "k")
    await engine.run_until_idle()
    assert len(runs) == 2


async def test_unknown_kinds_wait_and_other_kinds_run(database: Database, clock: SimClock) -> None:
    recorder = Recorder("mine")
    engine = Engine(database, clock, [recorder])
    await engine.submit("theirs", "x")
    await engine.submit("mine", "y")
    assert await engine.run_until_idle() == 1
    assert (await item(database, "theirs", "x")).due_at == clock.now()


async def test_a_reconciler_that_never_rests_is_stopped(database: Database, clock: SimClock) -> None:
    engine = Engine(database, clock, [Recorder("loop", lambda ctx, key: Outcome.requeue(after=0))])
    await engine.submit("loop", "k")
    with pytest.raises(RuntimeError, match="requeue forever"):
        await engine.run_until_idle(max_runs=20)


async def test_a_kind_has_one_reconciler(database: Database, clock: SimClock) -> None:
    with pytest.raises(ValueError, match="registered already"):
        Engine(database, clock, [Recorder("a"), Recorder("a")])


async def test_a_clock_with_more_sleepers_than_the_idle_guard_still_runs_to_the_end(
    database: Database, clock: SimClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps that move the clock are progress: a large fleet's heartbeats give many more distinct
    deadlines between two runs than the guard against a stuck clock allows."""
    monkeypatch.setattr(engine_module, "_MAX_IDLE_STEPS", 20)
    start = clock.now()
    woken: list[int] = []

    async def sleeper(index: int) -> None:
        await clock.sleep(1 + index)
        woken.append(index)

    sleepers = [asyncio.create_task(sleeper(i)) for i in range(100)]
    await asyncio.sleep(0)
    engine = Engine(database, clock, [Recorder("thing")])
    await engine.run_until_idle(until=start + timedelta(minutes=5))
    await asyncio.gather(*sleepers)
    assert sorted(woken) == list(range(100))
    assert clock.now() == start + timedelta(minutes=5)


async def test_a_run_reads_the_retry_time_the_engine_then_keeps(database: Database, clock: SimClock) -> None:
    """`RunContext.retry_at` is the engine's own next attempt: a reconciler that shows it (a cluster
    row's `next_attempt_at`) shows the work item's due time, for each failure of the streak."""
    promised: list[object] = []

    def fail(ctx: RunContext, key: str) -> Outcome:
        refused = TemporaryError("provider refused the delete", schedule="delete")
        promised.append(ctx.retry_at(refused))
        raise refused

    engine = Engine(database, clock, [Recorder("cluster-delete", fail)])
    start = clock.now()
    await engine.submit("cluster-delete", "c1")
    for failures, minutes in enumerate([5, 15, 35, 75], start=1):
        await engine.run_until_idle(until=clock.now())
        row = await item(database, "cluster-delete", "c1")
        assert row.attempts == failures
        assert promised[-1] == row.due_at == start + timedelta(minutes=minutes)
        clock.advance((row.due_at - clock.now()).total_seconds())


async def run_beating_each_second(
    engine: Engine, clock: SimClock, beside: Coroutine[Any, Any, None], *, until: datetime
) -> None:
    """`run_until_idle(until=...)` while a task sleeps 1 s at a time on the clock (a heartbeat) and `beside` runs."""

    async def heartbeats() -> None:
        while True:
            await clock.sleep(1)

    beating = asyncio.create_task(heartbeats())
    running = asyncio.create_task(beside)
    await asyncio.sleep(0)
    try:
        await engine.run_until_idle(until=until)
    finally:
        beating.cancel()
        await asyncio.gather(beating, running, return_exceptions=True)


async def test_moving_the_clock_past_sleepers_claims_only_when_something_is_due(
    database: Database, clock: SimClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim is a write transaction: the simulated clock's moves through sleepers' deadlines that make
    nothing due claim nothing, and work that a woken sleeper queues still runs exactly when it is due."""
    claims: list[object] = []
    claim = engine_module.queue.claim

    async def counted(*args: object, **kwargs: object) -> object:
        claims.append(clock.now())
        return await claim(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module.queue, "claim", counted)
    recorder = Recorder("thing")
    engine = Engine(database, clock, [recorder])
    start = clock.now()

    async def queue_at_30_s_for_40_s() -> None:
        await clock.sleep(30)
        async with database.transaction() as session:
            await enqueue(session, kind="thing", key="woken", now=clock.now(), due=start + timedelta(seconds=40))

    await run_beating_each_second(engine, clock, queue_at_30_s_for_40_s(), until=start + timedelta(seconds=60))
    assert recorder.runs == [("woken", start + timedelta(seconds=40), 1)]
    # One claim that takes the item and one that finds nothing more: none for the 60 heartbeats.
    assert claims == [start + timedelta(seconds=40)] * 2
    assert clock.now() == start + timedelta(seconds=60)


async def test_a_write_a_woken_sleeper_began_is_waited_for_before_the_clock_moves_on(
    database: Database, clock: SimClock
) -> None:
    """What a task woken by the clock queues for now runs now, not at the next sleeper's deadline:
    on SQLite the engine waits for the write transactions already begun, as a claim does."""
    recorder = Recorder("thing")
    engine = Engine(database, clock, [recorder])
    start = clock.now()

    async def queue_at_30_s() -> None:
        await clock.sleep(30)
        async with database.transaction() as session:
            for _ in range(3):  # a transaction of a few round trips, still open as the clock settles
                await session.execute(select(1))
            await enqueue(session, kind="thing", key="woken", now=clock.now())

    await run_beating_each_second(engine, clock, queue_at_30_s(), until=start + timedelta(seconds=60))
    if database.is_postgres:
        # A claim on PostgreSQL waits for no other transaction: the item runs once that one commits.
        assert [key for key, _, _ in recorder.runs] == ["woken"]
    else:
        assert recorder.runs == [("woken", start + timedelta(seconds=30), 1)]
