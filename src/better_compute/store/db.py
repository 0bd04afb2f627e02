"""Opening the database: URL normalisation, SQLite pragmas, sessions, migrations."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["Database", "normalize_url"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def normalize_url(url: str) -> str:
    """`sqlite:///x.db` and `postgresql://...` become their async-driver forms.

    Anything else is refused before a driver sees it: a string that is not a URL must
    never become a SQLite file named after it in the current directory.
    """
    # The value is not echoed: a mistyped URL may still hold a password.
    refused = ComputeError(
        ErrorCode.INVALID_INPUT, "the database is not a URL: use sqlite:///PATH or postgresql://USER@HOST/NAME"
    )
    if not _SCHEME.match(url):
        raise refused
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise refused from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return str(parsed.set(drivername="sqlite+aiosqlite"))
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    raise ComputeError(
        ErrorCode.INVALID_INPUT, f"unsupported database URL scheme {backend!r}: use sqlite or postgresql"
    )


class Database:
    """One engine and its session factory.

    `transaction()` is the way to write: it opens a session, begins, and commits on
    success or rolls back on any exception.
    """

    def __init__(self, url: str, *, pool_size: int = 10, echo: bool = False) -> None:
        self.url = normalize_url(url)
        self.dialect = make_url(self.url).get_backend_name()
        kwargs: dict[str, Any] = {"echo": echo}
        if self.dialect == "postgresql":
            kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False, autoflush=False)

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def session(self) -> AsyncSession:
        return self.sessions()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        async with self.sessions() as session, session.begin():
            yield session

    async def upgrade(self) -> None:
        """Bring the schema to the newest migration of every module."""
        from better_compute.store.migrate import upgrade

        await upgrade(self)

    async def dispose(self) -> None:
        await self.engine.dispose()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
