"""A SQLite file that cannot be opened fails the statement and leaves no driver thread behind.

aiosqlite opens a file on a worker thread; when the open fails it stops that thread by
queueing a last call that answers on the event loop, and nothing waits for it. If the
loop closes first (a request that answered 503, then a server or test that ends), the
thread's answer lands on a closed loop and the interpreter reports an unhandled thread
exception long after. The store waits for the thread before the failure reaches its caller.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from better_compute.store import Database


def _sqlite_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name and t.is_alive()}


async def test_a_failed_open_has_stopped_its_thread_when_the_error_arrives() -> None:
    before = _sqlite_threads()
    database = Database("sqlite:////nonexistent-directory/better-compute.db")
    try:
        for _ in range(3):
            with pytest.raises(OperationalError, match="unable to open database file"):
                async with database.session() as session:
                    await session.execute(text("SELECT 1"))
            assert _sqlite_threads() - before == set(), "a driver thread outlived its failed open"
    finally:
        await database.dispose()
