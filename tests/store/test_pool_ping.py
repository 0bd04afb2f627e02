"""PostgreSQL: pooled connections are pinged at checkout only after they sat idle (see store.db)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from better_compute.store import Database
from better_compute.store import db as store_db

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


async def _backend_pid(database: Database) -> int:
    async with database.transaction() as session:
        return int(await session.scalar(text("SELECT pg_backend_pid()")) or 0)


async def _terminate(url: str, pid: int) -> None:
    admin = Database(url)
    try:
        async with admin.transaction() as session:
            await session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        await admin.dispose()


async def test_an_idle_connection_killed_by_the_server_is_replaced_at_checkout(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_db, "PING_AFTER_IDLE_S", 0.0)  # every checkout counts as idle
    database = Database(database_url, pool_size=1)
    try:
        gone = await _backend_pid(database)
        await _terminate(database_url, gone)
        assert await _backend_pid(database) not in (0, gone)  # a new backend, no error
    finally:
        await database.dispose()


async def test_a_connection_used_just_now_is_not_pinged(database_url: str) -> None:
    database = Database(database_url, pool_size=1)
    try:
        await _backend_pid(database)
        pings = 0
        real_ping = database.engine.sync_engine.dialect.do_ping

        def counting_ping(dbapi_connection: object) -> bool:
            nonlocal pings
            pings += 1
            return bool(real_ping(dbapi_connection))

        database.engine.sync_engine.dialect.do_ping = counting_ping  # type: ignore[method-assign]
        for _ in range(3):
            await _backend_pid(database)
        assert pings == 0
    finally:
        await database.dispose()
