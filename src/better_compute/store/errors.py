"""Which failures mean the database cannot be used right now, and what to tell the operator.

A database that is down, unreachable, too busy to hand out a connection in time, or that
drops a connection in the middle of a statement is not a bug of the caller's: the CLI says
so in one line (exit 1) and the HTTP API answers 503 UNAVAILABLE with `Retry-After`,
instead of an internal error and a traceback.

A connection cut mid-statement reaches us from asyncpg as a plain `DBAPIError` (asyncpg's
ConnectionDoesNotExistError, "connection was closed in the middle of operation", is a
PostgresError that SQLAlchemy does not map to OperationalError), with SQLAlchemy's
`connection_invalidated` set; a server that ends a session itself (a restart, an
administrator's pg_terminate_backend, too many connections, a statement cancelled) says
so by the SQLSTATE class of its error. Both are recognised here, whatever the wrapper.
"""

from __future__ import annotations

import socket

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

__all__ = ["TRANSIENT_SQLSTATE_CLASSES", "first_line", "unavailable_reason"]

TRANSIENT_SQLSTATE_CLASSES = {
    "08": "connection exception",
    "40": "transaction rollback",  # serialization failure, deadlock
    "53": "insufficient resources",  # too many connections, disk full, out of memory
    "57": "operator intervention",  # admin shutdown, crash shutdown, cannot connect now, statement cancelled
}
"""SQLSTATE classes (PostgreSQL, Appendix A) of failures that a retry later can get past."""


def unavailable_reason(exc: BaseException) -> str | None:
    """What keeps the database from answering, for the operator; None if `exc` is something else."""
    if isinstance(exc, ConnectionRefusedError):
        return "the database refused the connection: is it running, and is the port right?"
    if isinstance(exc, ConnectionError):
        return f"the database connection was lost: {first_line(exc)}"
    if isinstance(exc, socket.gaierror):
        return "the database host name does not resolve: check BC_DATABASE_URL"
    if isinstance(exc, TimeoutError):
        return "the database did not answer in time: check BC_DATABASE_URL and the network"
    if isinstance(exc, PoolTimeout):
        return "no database connection came free in time: the process is overloaded"
    if isinstance(exc, OperationalError | InterfaceError):
        return f"cannot use the database: {first_line(exc.orig)}"
    if isinstance(exc, DBAPIError):
        transient = _transient(exc)
        if transient is not None:
            return f"the database ended the statement ({transient}): {first_line(exc.orig)}"
        if exc.connection_invalidated:
            return f"the database connection was lost: {first_line(exc.orig)}"
        return None
    if type(exc).__module__.startswith("asyncpg"):  # raised at connect (no such database, bad password) unwrapped
        return f"cannot use the database: {first_line(exc)}"
    return None


def _transient(exc: DBAPIError) -> str | None:
    """The transient SQLSTATE class of the driver's error under `exc`, if it has one."""
    seen: BaseException | None = exc.orig
    for _ in range(4):  # SQLAlchemy's adapter error, then the driver's own
        if seen is None:
            return None
        sqlstate = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in TRANSIENT_SQLSTATE_CLASSES:
            return TRANSIENT_SQLSTATE_CLASSES[sqlstate[:2]]
        seen = seen.__cause__
    return None


def first_line(exc: object) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
