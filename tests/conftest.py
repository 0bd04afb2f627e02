"""Shared fixtures: a migrated database per test, on SQLite and on PostgreSQL.

Every test that takes `database` runs twice, once per backend. PostgreSQL comes
from BC_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres);
each test session makes a database of its own there and drops it at the end.
Under CI (CI=true) an unreachable PostgreSQL fails the run; elsewhere those tests
skip with a notice that says how to run them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from better_compute.core.clock import SimClock
from better_compute.store import Database
from postgres_reset import reset_postgres

POSTGRES_URL = os.environ.get("BC_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
POSTGRES_HINT = (
    "PostgreSQL is not reachable at {url} ({error}). Start one (for example "
    "`pg_ctlcluster 15 main start`) or point BC_TEST_POSTGRES_URL at a server whose user may create databases."
)


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated once; each test gets a copy."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"

    async def build() -> None:
        db = Database(f"sqlite:///{path}")
        await db.upgrade()
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")  # a checkpoint runs outside BEGIN
            await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        await db.dispose()

    _run(build())
    return path


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A database of this test session's own, migrated once."""
    from sqlalchemy.engine import make_url

    admin = Database(POSTGRES_URL)
    name = f"bc_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        async with admin.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        await admin.dispose()

    try:
        _run(create())
    except Exception as exc:  # unreachable server: fail under CI, skip elsewhere
        message = POSTGRES_HINT.format(url=POSTGRES_URL, error=type(exc).__name__)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    url = make_url(admin.url).set(database=name).render_as_string(hide_password=False)

    async def migrate() -> None:
        db = Database(url)
        await db.upgrade()
        await db.dispose()

    _run(migrate())
    yield url

    async def drop() -> None:
        async with admin.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()

    _run(drop())


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "bc.db"
        shutil.copy(template, target)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("postgres_database")
    return url


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """A migrated, empty database; runs once on SQLite and once on PostgreSQL."""
    db = Database(database_url)
    if db.is_postgres:
        await reset_postgres(db)
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture
def clock() -> SimClock:
    return SimClock()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The kept demo world's tests first. xdist hands each worker a first run of consecutive tests,
    so they all land on one worker and the world (27 s to build, then a quarter of a core while it
    lives) is built once, and gone before the rest of the suite."""
    items.sort(key=lambda item: "kept_world" not in getattr(item, "fixturenames", ()))
