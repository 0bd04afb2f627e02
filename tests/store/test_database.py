from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

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
