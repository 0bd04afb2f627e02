"""Opening the database: URL normalisation, isolation, SQLite pragmas, sessions, migrations.

SQLite follows SQLAlchemy's documented recipe for pysqlite/aiosqlite: the driver's own
transaction handling is off (`isolation_level = None` on the DBAPI connection), and the
engine's "begin" event sends BEGIN itself. Left to the driver, no BEGIN is sent before
the first write, so the reads of a read-check-write ran outside the transaction and
saw other writers' commits half-way through. A write transaction (`transaction()`)
begins `BEGIN IMMEDIATE`: it holds SQLite's one write lock from its first statement, so
read-check-write paths (cordon, retire, archive, pool updates, fleet apply) take turns
across connections and processes; within the process they first queue for their turn
(store.write_turns), leaving SQLite's busy handler to other processes. A read-only
`session()` begins a deferred BEGIN: one WAL snapshot, never waiting on a writer. `read()`,
for one statement, sends no BEGIN at all (on PostgreSQL it runs in autocommit): a single
statement is its own snapshot on either database, and the BEGIN and ROLLBACK were most of
a short read's round trips. On SQLite a ROLLBACK is sent only while a transaction is open
(`_sqlite_rollback_only_a_transaction`). A
SQLite file is held by one process at a time (see sqlite_lock).

PostgreSQL runs READ COMMITTED, set on the engine rather than assumed: the guarded
updates re-check their guard on the newest row version, which a server default of
REPEATABLE READ would turn into serialization failures. A pooled PostgreSQL connection
is pinged at checkout only when it has been idle for PING_AFTER_IDLE_S or more:
SQLAlchemy's `pool_pre_ping` pings at every checkout, and on asyncpg a ping is three
round trips (BEGIN, an empty query, ROLLBACK), more than a booking batch's own
statements. A connection handed back less than that ago is taken as alive; a server
gone since then fails the statement, as it would have failed mid-transaction.

A SQLite open that fails waits for aiosqlite's worker thread to stop before the error
goes on (`_open_sqlite`): aiosqlite stops it with a call that answers on the event loop
and nothing waits for, so a loop closed soon after (a 503, then shutdown) would get the
thread's answer after it closed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import aiosqlite
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from better_compute.core.errors import ComputeError, ErrorCode

from . import sqlite_lock
from .write_turns import WriteTurns

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
            kwargs.update(pool_size=pool_size, max_overflow=pool_size, isolation_level="READ COMMITTED")
        else:
            kwargs.update(async_creator=_open_sqlite(self.url))
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.dialect == "postgresql":
            _ping_when_idle(self.engine)
        self.write_turns = WriteTurns() if self.dialect == "sqlite" else None
        """SQLite's writers of this process queue here (store.write_turns); None on PostgreSQL."""
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_connect)
            event.listen(self.engine.sync_engine, "begin", _sqlite_begin)
            _sqlite_rollback_only_a_transaction(self.engine)
        self.writes = async_sessionmaker(self.engine, expire_on_commit=False, autoflush=False)
        self.sessions = async_sessionmaker(
            self.engine.execution_options(**{_READ_ONLY: True}), expire_on_commit=False, autoflush=False
        )
        one_statement = {"isolation_level": "AUTOCOMMIT"} if self.dialect == "postgresql" else {_NO_BEGIN: True}
        self.reads = async_sessionmaker(
            self.engine.execution_options(**{_READ_ONLY: True}, **one_statement),
            expire_on_commit=False,
            autoflush=False,
        )
        self._file_lock = sqlite_lock.claim(Path(file)) if (file := _sqlite_file(self.url)) else None

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def session(self) -> AsyncSession:
        """A session for reading (on SQLite its transaction never takes the write lock)."""
        return self.sessions()

    def read(self) -> AsyncSession:
        """A session for reading with ONE statement, which is its own snapshot: no BEGIN is sent (nor, on
        PostgreSQL, a ROLLBACK), two round trips of three on PostgreSQL, three hops to aiosqlite's thread
        of nine on SQLite. Two statements in it may see different commits: use `session()` for those."""
        return self.reads()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A write transaction; on SQLite it first waits for its turn among this process's
        writers (store.write_turns)."""
        async with (
            self.writes() as session,  # checks out no connection until the first statement
            self.write_turns.turn() if self.write_turns else nullcontext(),
            session.begin(),
        ):
            yield session  # the turn passes on at COMMIT or ROLLBACK, before the session closes

    async def upgrade(self) -> None:
        """Bring the schema to the newest migration of every module."""
        from better_compute.store.migrate import upgrade

        await upgrade(self)

    async def dispose(self) -> None:
        await self.engine.dispose()
        sqlite_lock.release(self._file_lock)
        self._file_lock = None


_READ_ONLY = "bc_read_only"
_NO_BEGIN = "bc_no_begin"
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "bc_idle_since"


def _ping_when_idle(engine: AsyncEngine) -> None:
    """Ping a pooled connection at checkout if it has been idle PING_AFTER_IDLE_S or more (see above).

    A failed ping makes the pool drop the connection and check out another, as
    `pool_pre_ping` does.
    """
    sync_engine = engine.sync_engine
    dialect = sync_engine.dialect

    def fresh(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    def check_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is not None and time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                raise DisconnectionError("the pooled connection is gone") from exc
            raise

    event.listen(sync_engine, "connect", fresh)
    event.listen(sync_engine, "checkin", fresh)
    event.listen(sync_engine, "checkout", check_out)


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL; None for another database or an in-memory one."""
    parsed = make_url(url)
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:" or name.startswith("file:"):
        return None
    return name


def _open_sqlite(url: str) -> Callable[[], Awaitable[aiosqlite.Connection]]:
    """The engine's connect for SQLite: the dialect's own arguments, and a failed open returns
    only once aiosqlite's thread has stopped (see the module's docstring)."""
    from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite

    args, kwargs = SQLiteDialect_aiosqlite().create_connect_args(make_url(url))

    async def connect() -> aiosqlite.Connection:
        connection = aiosqlite.connect(*args, **kwargs)
        thread = connection._thread  # SQLAlchemy's own connect marks the same thread a daemon
        thread.daemon = True
        try:
            return await connection
        except BaseException:
            await asyncio.to_thread(thread.join, 5.0)
            raise

    return connect


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # the driver sends no BEGIN of its own; _sqlite_begin does
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_rollback_only_a_transaction(engine: AsyncEngine) -> None:
    """A ROLLBACK only where SQLite has a transaction open (`in_transaction`, read without a hop).

    SQLAlchemy rolls back as a read's session closes and again as the pool takes the connection back,
    and each is a hop to aiosqlite's thread: two of a one-statement read's six, for nothing when no
    BEGIN was sent (`read()`) or the transaction has ended. `skip_autocommit_rollback` would skip every
    rollback here, since the driver's own transaction handling is off on every connection."""
    dialect = engine.sync_engine.dialect
    rollback = dialect.do_rollback

    def do_rollback(dbapi_connection: Any) -> None:
        if dbapi_connection.driver_connection.in_transaction:
            rollback(dbapi_connection)

    dialect.do_rollback = do_rollback  # type: ignore[method-assign]


def _sqlite_begin(connection: Any) -> None:
    """Every transaction but a read-only session's takes the write lock as it begins."""
    options = connection.get_execution_options()
    if options.get("isolation_level") == "AUTOCOMMIT" or options.get(_NO_BEGIN, False):
        return
    connection.exec_driver_sql("BEGIN" if options.get(_READ_ONLY, False) else "BEGIN IMMEDIATE")
