"""SQLite's writers take turns in the process: in arrival order, holding no connection while they
wait, never waiting for themselves, and a waiter that gives up or is cancelled leaves the queue as
it was.
PostgreSQL has no turns (its row locks order writers), so these run on SQLite only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from better_compute.core.errors import ComputeError
from better_compute.store import Database
from better_compute.store.write_turns import WriteTurns


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'turns.db'}")
    async with database.transaction() as session:
        await session.execute(text("CREATE TABLE t (n INTEGER)"))
    try:
        yield database
    finally:
        await database.dispose()


def turns(db: Database) -> WriteTurns:
    assert db.write_turns is not None
    return db.write_turns


async def insert(db: Database, n: int, *, hold: asyncio.Event | None = None) -> None:
    async with db.transaction() as session:
        await session.execute(text("INSERT INTO t (n) VALUES (:n)"), {"n": n})
        if hold is not None:
            await hold.wait()


async def rows(db: Database) -> list[int]:
    async with db.session() as session:
        return [row.n for row in await session.execute(text("SELECT n FROM t ORDER BY rowid"))]


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


async def test_writers_commit_in_the_order_they_came(db: Database) -> None:
    """Each writer holds its turn across an await; SQLite's busy handler alone would let the
    waiters in by whichever polled first."""
    first = asyncio.Event()
    holder = asyncio.create_task(insert(db, 0, hold=first))
    await until(lambda: turns(db).waiting() == 0 and not holder.done())
    await asyncio.sleep(0.05)  # the holder has sent its INSERT and awaits `first`
    waiters = []
    for n in range(1, 16):
        waiters.append(asyncio.create_task(insert(db, n)))
        await until(lambda n=n: turns(db).waiting() == n)  # type: ignore[misc]
    first.set()
    await asyncio.gather(holder, *waiters)
    assert await rows(db) == list(range(16))


async def test_a_write_that_waits_past_the_limit_fails_as_unavailable_and_changes_nothing(db: Database) -> None:
    turns(db).wait_seconds = 0.2
    release = asyncio.Event()
    holder = asyncio.create_task(insert(db, 1, hold=release))
    await asyncio.sleep(0.05)
    with pytest.raises(ComputeError) as refused:
        await insert(db, 2)
    assert refused.value.code == "UNAVAILABLE" and "waited 0.2 s for its turn" in refused.value.message
    assert turns(db).waiting() == 0
    release.set()
    await holder
    await insert(db, 3)  # the queue is as it was: the next writer goes straight in
    assert await rows(db) == [1, 3]


async def test_a_write_transaction_inside_another_fails_at_once_instead_of_waiting_for_itself(db: Database) -> None:
    async with db.transaction() as outer:
        await outer.execute(text("INSERT INTO t (n) VALUES (1)"))
        with pytest.raises(RuntimeError, match="inside another"):
            await insert(db, 2)
    assert await rows(db) == [1]


async def test_waiting_writers_leave_the_connection_pool_to_readers(db: Database) -> None:
    """Forty writers queue behind one that holds its turn; reads still get connections at once
    (the pool has fifteen), since a writer takes its turn before it checks one out."""
    release = asyncio.Event()
    holder = asyncio.create_task(insert(db, 0, hold=release))
    await asyncio.sleep(0.05)
    waiters = [asyncio.create_task(insert(db, n)) for n in range(1, 41)]
    await until(lambda: turns(db).waiting() == 40)
    assert await asyncio.wait_for(rows(db), 5) == []  # the holder has not committed yet
    release.set()
    await asyncio.gather(holder, *waiters)
    assert sorted(await rows(db)) == list(range(41))


async def test_a_waiter_cancelled_or_rolled_back_hands_the_turn_on(db: Database) -> None:
    release = asyncio.Event()
    holder = asyncio.create_task(insert(db, 1, hold=release))
    await asyncio.sleep(0.05)
    cancelled = asyncio.create_task(insert(db, 2))
    await until(lambda: turns(db).waiting() == 1)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert turns(db).waiting() == 0
    release.set()
    await holder

    with pytest.raises(ValueError):
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO t (n) VALUES (3)"))
            raise ValueError("the caller's own failure: its transaction rolls back")
    await asyncio.wait_for(insert(db, 4), 5)
    assert await rows(db) == [1, 4]
