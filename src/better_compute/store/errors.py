"""Which failures mean the database cannot be used right now, and what to tell the operator.

A database that is down, unreachable, or too busy to hand out a connection in time is
not a bug of the caller's: the CLI says so in one line (exit 1) and the HTTP API answers
503 UNAVAILABLE with `Retry-After`, instead of an internal error and a traceback.
"""

from __future__ import annotations

import socket

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

__all__ = ["first_line", "unavailable_reason"]


def unavailable_reason(exc: BaseException) -> str | None:
    """What keeps the database from answering, for the operator; None if `exc` is something else."""
    if isinstance(exc, ConnectionRefusedError):
        return "the database refused the connection: is it running, and is the port right?"
    if isinstance(exc, socket.gaierror):
        return "the database host name does not resolve: check BC_DATABASE_URL"
    if isinstance(exc, TimeoutError):
        return "the database did not answer in time: check BC_DATABASE_URL and the network"
    if isinstance(exc, PoolTimeout):
        return "no database connection came free in time: the process is overloaded"
    if isinstance(exc, OperationalError | InterfaceError):
        return f"cannot use the database: {first_line(exc.orig)}"
    if type(exc).__module__.startswith("asyncpg"):  # raised at connect (no such database, bad password) unwrapped
        return f"cannot use the database: {first_line(exc)}"
    return None


def first_line(exc: object) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
