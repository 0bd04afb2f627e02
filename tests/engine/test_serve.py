"""serve(): writes wake it at once, and cancellation stops it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from engine_support import Held, Recorder, item
from sqlalchemy import event

from better_compute.core.clock import SimClock
from better_compute.engine import Engine, Outcome, RunContext, enqueue
from better_compute.store import Database


@pytest.fixture
async def sqlite_database(sqlite_template: Path, tmp_path: Path) -> AsyncIterator[Database]:
    target = tmp_path / "bc.db"
    shutil.copy(sqlite_template, target)
    db = Database(f"sqlite:///{target}")
    try:
        yield db
    finally:
        await db.dispose()


async def _until(condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(10):
            while not condition():
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"gave up waiting for {what}") from None


async def test_a_write_wakes_the_engine_at_once(database: Database, clock: SimClock) -> None:
    """The clock never moves here: only the wake-up can make the items run."""
    recorder = Recorder("w")
    engine = Engine(database, clock, [recorder], poll_seconds=3600)
    server = asyncio.create_task(engine.serve())
    try:
        await _until(lambda: clock.next_wakeup() is not None, "the engine to go idle")
        async with database.transaction() as session:
            await enqueue(session, kind="w", key="first", now=clock.now())
        engine.wake()
        await _until(lambda: len(recorder.runs) == 1, "the first item to run")
        await engine.submit("w", "second")
        await _until(lambda: len(recorder.runs) == 2, "the second item to run")
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server
    assert [key for key, _, _ in recorder.runs] == ["first", "second"]
    assert [t for _, t, _ in recorder.runs] == [clock.now(), clock.now()]


async def test_without_a_wake_the_item_waits_for_the_poll(sqlite_database: Database, clock: SimClock) -> None:
    """On SQLite (one process) only the engine's own wake() is a wake; on PostgreSQL the commit of an
    enqueue is one too (test_notify.py)."""
    database = sqlite_database
    recorder = Recorder("w")
    engine = Engine(database, clock, [recorder], poll_seconds=30, lease_seconds=3600)
    server = asyncio.create_task(engine.serve())
    poll = clock.now() + timedelta(seconds=30)
    try:
        # Its claim loop asleep until the poll: the lease keeper (20 minutes) and compaction sleep longer.
        await _until(lambda: clock.next_wakeup() == poll, "the engine's claim loop to go idle")
        async with database.transaction() as session:
            await enqueue(session, kind="w", key="quiet", now=clock.now())
        for _ in range(50):
            await asyncio.sleep(0)
        assert recorder.runs == []
        clock.advance(30)
        await _until(lambda: len(recorder.runs) == 1, "the poll to find the item")
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server


class ClaimCount:
    """Counts the engine's claims (each a write transaction), passing each on."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        claim = engine._claim

        async def counting(limit: int) -> list[object]:
            self.count += 1
            return await claim(limit)  # type: ignore[return-value]

        engine._claim = counting  # type: ignore[method-assign,assignment]


async def test_an_idle_engine_reads_once_a_poll_and_claims_nothing(database: Database, clock: SimClock) -> None:
    """A poll that runs out with nothing due costs one read (when the next item is claimable), not a
    claim's write transaction and then the read; an item due at a poll is still claimed at it."""
    recorder = Recorder("w")
    engine = Engine(database, clock, [recorder], poll_seconds=1, lease_seconds=3600)
    claimed = ClaimCount(engine)
    async with database.transaction() as session:
        await enqueue(session, kind="w", key="later", now=clock.now(), due=clock.now() + timedelta(seconds=30))
    statements: list[str] = []

    def sent(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    wakes = 0
    wake = engine.wake

    def counting_wake() -> None:
        nonlocal wakes
        wakes += 1
        wake()

    engine.wake = counting_wake  # type: ignore[method-assign]

    def idle() -> bool:
        # On PostgreSQL the listener wakes the engine once it is listening (a notification may have
        # gone by before), and that wake is a claim: the polls are counted from after it.
        listening = wakes >= 1 or not database.is_postgres
        return listening and not engine._wake.is_set() and clock.next_wakeup() == clock.now() + timedelta(seconds=1)

    server = asyncio.create_task(engine.serve())
    try:
        await _until(idle, "the engine to go idle, listening")
        claims_before = claimed.count
        event.listen(database.engine.sync_engine, "before_cursor_execute", sent)
        try:
            for _ in range(10):  # ten polls run out
                poll = clock.now() + timedelta(seconds=1)
                clock.advance(1)
                await _until(lambda p=poll: clock.next_wakeup() == p + timedelta(seconds=1), "the next poll")
        finally:
            event.remove(database.engine.sync_engine, "before_cursor_execute", sent)
        assert claimed.count == claims_before, f"{claimed.count - claims_before} claims with nothing due"
        assert len(statements) == 10, statements
        clock.advance(20)
        await _until(lambda: len(recorder.runs) == 1, "the due item to be claimed at a poll")
        assert claimed.count > claims_before
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server


async def test_a_failing_run_does_not_stop_the_server(database: Database, clock: SimClock) -> None:
    seen: list[str] = []

    class Boom:
        kind = "b"

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            seen.append(key)
            if key == "bad":
                raise RuntimeError("boom")
            return Outcome.done()

    engine = Engine(database, clock, [Boom()], poll_seconds=3600)
    server = asyncio.create_task(engine.serve())
    try:
        await engine.submit("b", "bad")
        await engine.submit("b", "good")
        await _until(lambda: "good" in seen, "the good item to run")
        assert not server.done()
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server


async def test_a_stopping_server_hands_back_its_leases_at_once(database: Database, clock: SimClock) -> None:
    held = Held("slow", Outcome.done())
    quick = Recorder("quick")
    engine = Engine(database, clock, [held, quick], owner="stopping", poll_seconds=3600)
    await engine.submit("quick", "q")
    await engine.submit("slow", "s")
    server = asyncio.create_task(engine.serve())
    await held.entered.wait()
    await _until(lambda: len(quick.runs) == 1, "the quick item to run")
    server.cancel()
    with pytest.raises(asyncio.CancelledError):
        await server
    row = await item(database, "slow", "s")
    assert (row.lock_token, row.due_at) == (None, clock.now()), "the interrupted item is free and due"
    assert (await item(database, "quick", "q")).lock_token is None, "the finished run was applied"
    successor = Recorder("slow")
    assert await Engine(database, clock, [successor]).run_once() == 1
    assert [key for key, _, _ in successor.runs] == ["s"]


async def test_with_every_slot_busy_the_claim_loop_waits_instead_of_spinning(
    database: Database, clock: SimClock
) -> None:
    started: list[str] = []
    finish: dict[str, asyncio.Event] = {}

    class Slow:
        kind = "slow"

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            started.append(key)
            await finish.setdefault(key, asyncio.Event()).wait()
            return Outcome.done()

    engine = Engine(database, clock, [Slow()], concurrency=2, poll_seconds=1)
    claimed = ClaimCount(engine)
    for n in range(5):  # two slots, five items due: three wait for a free slot
        await engine.submit("slow", f"k{n}")
    server = asyncio.create_task(engine.serve())
    try:
        await _until(lambda: len(started) == 2, "both slots to fill")
        before = claimed.count
        for _ in range(20):  # two simulated seconds, with database round trips for a spinning loop to use
            clock.advance(0.1)
            await item(database, "slow", "k4")
            await asyncio.sleep(0)
        assert claimed.count == before, f"{claimed.count - before} claims while no slot was free"
        finish[started[0]].set()
        await _until(lambda: len(started) == 3, "the freed slot to take the next item")
        assert claimed.count - before <= 2
    finally:
        for event in finish.values():
            event.set()
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server
