"""Deterministic interleavings: hold one transaction at an await, and know when another waits on it.

`Pause` is an await that holds its caller until released. `waiting_or_done` returns
once a task has finished, or has reached the database's lock and waits there: on
SQLite when it waits for its write turn (store.write_turns) or has sent its BEGIN
IMMEDIATE, on PostgreSQL when a backend of the test
database waits on a lock (polled through pg_stat_activity). Either way the other
transaction's outcome no longer depends on timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import event, text

from better_compute.store import Database


class Pause:
    """An await that holds its caller: `reached` once it arrives, on its way again at `release()`."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self._go = asyncio.Event()

    async def __call__(self) -> None:
        self.reached.set()
        await self._go.wait()

    def release(self) -> None:
        self._go.set()


def pause_before(monkeypatch: pytest.MonkeyPatch, target: object, name: str, pause: Pause) -> None:
    """Make the first call of the async function `target.name` wait at `pause` before it runs."""
    original: Callable[..., Awaitable[Any]] = getattr(target, name)
    calls = 0

    async def paused(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            await pause()
        return await original(*args, **kwargs)

    monkeypatch.setattr(target, name, paused)


async def waiting_or_done(db: Database, task: asyncio.Task[Any]) -> None:
    """Return when `task` is done or waits on a database lock that another transaction holds."""
    if db.is_postgres:
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            for _ in range(3000):
                if task.done():
                    return
                waiting = await conn.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                )
                if waiting:
                    return
                await asyncio.sleep(0.01)
        raise AssertionError("the task neither finished nor waited on a lock")
    assert db.write_turns is not None
    begun = asyncio.Event()

    def on_execute(*args: Any) -> None:
        if args[2] == "BEGIN IMMEDIATE":
            begun.set()

    event.listen(db.engine.sync_engine, "before_cursor_execute", on_execute)
    try:
        for _ in range(6000):
            if task.done() or begun.is_set() or db.write_turns.waiting():
                return
            await asyncio.sleep(0.01)
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", on_execute)
    raise AssertionError("the task neither finished nor waited for the write lock")
