from __future__ import annotations

import importlib
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, inspect, text

from better_compute.core.errors import ComputeError
from better_compute.store import Database
from better_compute.store.db import normalize_url


def test_urls_select_the_async_drivers() -> None:
    assert normalize_url("sqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert normalize_url("postgresql://u:p@h:5432/d") == "postgresql+asyncpg://u:p@h:5432/d"
    with pytest.raises(ComputeError) as err:
        normalize_url("mysql://h/d")
    assert err.value.code == "INVALID_INPUT"


async def test_migrations_built_the_schema(database: Database) -> None:
    async with database.engine.connect() as conn:
        heads = (await conn.execute(text("SELECT count(*) FROM alembic_version"))).scalar_one()
    assert heads >= 0


async def test_sqlite_runs_in_wal_with_a_busy_timeout(tmp_path: object) -> None:
    db = Database(f"sqlite:///{tmp_path}/wal.db")
    async with db.engine.connect() as conn:
        mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar_one()
        timeout = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar_one()
    await db.dispose()
    assert mode == "wal"
    assert timeout == 10000


def test_naive_datetimes_are_refused() -> None:
    from better_compute.store.base import UTCDateTime

    with pytest.raises(ValueError):
        UTCDateTime().process_bind_param(datetime(2026, 1, 1), None)  # type: ignore[arg-type]
    aware = UTCDateTime().process_result_value(datetime(2026, 1, 1), None)  # type: ignore[arg-type]
    assert aware == datetime(2026, 1, 1, tzinfo=UTC)


TABLES = [
    f"better_compute.{name}"
    for name in (
        "compute.tables",
        "decisions.table",
        "engine.models",
        "fleet.state",
        "gateway.tables",
        "iam",
        "kubernetes.tables",
        "ops.idempotency",
        "secrets",
        "vps.accounts",
    )
]
"""Every module that defines tables (`grep -l __tablename__`)."""


async def test_the_migrated_schema_has_exactly_the_models_columns(database: Database) -> None:
    """The schema comes only from migrations: every model's table has its columns and no others (a
    column the code stopped using, such as kubernetes_clusters.desired_version, is dropped by one)."""
    from better_compute.store.base import Base

    for module in TABLES:
        importlib.import_module(module)  # registers its tables on Base

    def columns(sync: Any) -> dict[str, set[str]]:
        found = inspect(sync)
        return {table: {c["name"] for c in found.get_columns(table)} for table in Base.metadata.tables}

    async with database.engine.connect() as conn:
        migrated = await conn.run_sync(columns)
    modelled = {name: {c.name for c in table.columns} for name, table in Base.metadata.tables.items()}
    assert migrated == modelled
    assert "desired_version" not in migrated["kubernetes_clusters"]


async def test_a_one_statement_read_sends_no_begin_and_a_session_still_does(database: Database) -> None:
    """read() runs its statement as its own snapshot (no BEGIN; autocommit on PostgreSQL); the connection
    it hands back still gives session() a transaction, READ COMMITTED on PostgreSQL."""
    sent: list[str] = []

    def statement(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        sent.append(sql.split()[0].upper())

    # On PostgreSQL asyncpg sends BEGIN itself; now() is when the statement's transaction began.
    began = text("SELECT now()")
    sync_engine = database.engine.sync_engine
    event.listen(sync_engine, "before_cursor_execute", statement)
    try:
        async with database.read() as session:
            if database.is_postgres:
                first, second = [(await session.execute(began)).scalar_one() for _ in range(2)]
                assert first < second, "each statement is a transaction of its own"
            else:
                assert (await session.execute(text("SELECT 1"))).scalar_one() == 1
        read = list(sent)
        sent.clear()
        async with database.session() as session:
            if database.is_postgres:
                first, second = [(await session.execute(began)).scalar_one() for _ in range(2)]
                assert first == second, "one transaction"
                level = (await session.execute(text("SHOW transaction_isolation"))).scalar_one()
                assert level == "read committed"
            else:
                assert (await session.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        event.remove(sync_engine, "before_cursor_execute", statement)
    assert "BEGIN" not in read
    if not database.is_postgres:
        assert sent == ["BEGIN", "SELECT"]


async def test_sqlite_sends_a_rollback_only_while_a_transaction_is_open(tmp_path: object) -> None:
    """A ROLLBACK is a hop to aiosqlite's thread: none for a read() (no BEGIN) nor for the pool's reset after a
    COMMIT or a ROLLBACK; a transaction that fails still rolls back, and its write is gone."""
    from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_connection

    db = Database(f"sqlite:///{tmp_path}/rollbacks.db")
    sent: list[str] = []
    rollback = AsyncAdapt_aiosqlite_connection.rollback

    def counted(self: AsyncAdapt_aiosqlite_connection) -> None:
        sent.append("ROLLBACK")
        rollback(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AsyncAdapt_aiosqlite_connection, "rollback", counted)
        async with db.engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (n INTEGER)"))
        async with db.read() as session:
            assert (await session.execute(text("SELECT count(*) FROM t"))).scalar_one() == 0
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO t VALUES (1)"))
        assert sent == []
        with pytest.raises(RuntimeError):
            async with db.transaction() as session:
                await session.execute(text("INSERT INTO t VALUES (2)"))
                raise RuntimeError("undo it")
        assert sent == ["ROLLBACK"]
        async with db.session() as session:  # BEGIN: a read transaction, ended by its ROLLBACK
            assert (await session.execute(text("SELECT n FROM t"))).scalars().all() == [1]
        assert sent == ["ROLLBACK", "ROLLBACK"]
    await db.dispose()
