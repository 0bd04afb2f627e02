"""Configuration the store sets rather than assumes: PostgreSQL's isolation, one process per SQLite file."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from better_compute.store import Database


async def _waiting_on_a_lock(admin: Database, database: str, task: asyncio.Task[object]) -> None:
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = :d AND wait_event_type = 'Lock'")
        for _ in range(3000):
            if task.done() or await conn.scalar(query, {"d": database}):
                return
            await asyncio.sleep(0.01)
    raise AssertionError("the update neither finished nor waited on the lock")


async def test_postgres_runs_read_committed_whatever_the_database_default(postgres_database: str) -> None:
    """Under a default of REPEATABLE READ a guarded update that waited on a row would fail; ours re-checks."""
    admin = Database(make_url(postgres_database).set(database="postgres").render_as_string(hide_password=False))
    name = f"bc_rr_{uuid.uuid4().hex[:8]}"
    async with admin.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
        await conn.execute(text(f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = 'repeatable read'"))
    db = Database(make_url(admin.url).set(database=name).render_as_string(hide_password=False))
    try:
        async with db.transaction() as session:
            await session.execute(text("CREATE TABLE seats (id INTEGER PRIMARY KEY, taken INTEGER NOT NULL)"))
            await session.execute(text("INSERT INTO seats VALUES (1, 0)"))
        async with db.session() as session:
            assert await session.scalar(text("SHOW transaction_isolation")) == "read committed"

        async def take_one() -> int:
            async with db.transaction() as session:
                taken = await session.execute(text("UPDATE seats SET taken = taken + 1 WHERE id = 1 AND taken < 5"))
                return int(taken.rowcount)  # type: ignore[attr-defined]

        async with db.transaction() as session:
            await session.execute(text("UPDATE seats SET taken = taken + 1 WHERE id = 1"))
            second = asyncio.create_task(take_one())
            await _waiting_on_a_lock(admin, name, second)
        assert await second == 1  # waited for the first, then re-checked its guard on the new row
        async with db.session() as session:
            assert await session.scalar(text("SELECT taken FROM seats")) == 2
    finally:
        await db.dispose()
        async with admin.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


def _cli(database: Path, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BC_")}
    environment |= {"BC_DATABASE_URL": f"sqlite:///{database}", "BC_DATA_DIR": str(tmp_path / "data")}
    environment |= {"BC_SECRET": "s" * 40, **extra}
    command = [sys.executable, "-c", "import sys; from better_compute.cli.main import main; sys.exit(main())"]
    return subprocess.run([*command, "tenants", "list"], env=environment, capture_output=True, text=True, timeout=120)


async def test_a_second_process_on_one_sqlite_file_is_refused_unless_allowed(tmp_path: Path) -> None:
    database = tmp_path / "one.db"
    db = Database(f"sqlite:///{database}")
    await db.upgrade()
    try:
        again = Database(f"sqlite:///{database}")  # the same process may open it again
        await again.dispose()
        refused = await asyncio.to_thread(_cli, database, tmp_path)
        assert refused.returncode == 1, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in refused.stderr
        assert f"pid {os.getpid()}" in lines[0] and "BC_SQLITE_SHARED=1" in lines[0]
        allowed = await asyncio.to_thread(_cli, database, tmp_path, BC_SQLITE_SHARED="1")
        assert allowed.returncode == 0, allowed.stderr
    finally:
        await db.dispose()
    assert (await asyncio.to_thread(_cli, database, tmp_path)).returncode == 0  # let go on dispose
