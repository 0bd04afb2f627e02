"""Which failures mean the database cannot be used now: the CLI's one line and the API's 503 both rest on it."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from better_compute.cli.errors import as_compute_error
from better_compute.store.errors import unavailable_reason


class _ServerSaid(Exception):
    """A driver error that carries the server's SQLSTATE, as asyncpg's do."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (ConnectionResetError(104, "Connection reset by peer"), "connection was lost"),
        (
            DBAPIError("SELECT 1", {}, _ServerSaid("08003", "connection was closed in the middle of operation")),
            "connection exception",
        ),
        (
            DBAPIError("SELECT 1", {}, _ServerSaid("57P01", "terminating connection due to administrator")),
            "operator intervention",
        ),
        (DBAPIError("SELECT 1", {}, _ServerSaid("53300", "too many connections for role")), "insufficient resources"),
        (DBAPIError("SELECT 1", {}, Exception("gone"), connection_invalidated=True), "connection was lost"),
        (ConnectionRefusedError(111, "Connection refused"), "refused the connection"),
        (socket.gaierror(-2, "Name or service not known"), "does not resolve"),
        (TimeoutError(), "did not answer in time"),
        (PoolTimeout("QueuePool limit of size 5 overflow 10 reached"), "no database connection came free"),
        (OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked\nmore")), "database is locked"),
    ],
)
def test_a_database_that_cannot_be_used_now_is_unavailable_with_its_reason(exc: BaseException, says: str) -> None:
    reason = unavailable_reason(exc)
    assert reason is not None and says in reason and "\n" not in reason
    error = as_compute_error(exc)
    assert error is not None and error.code == "UNAVAILABLE" and error.path == "/BC_DATABASE_URL"


def test_anything_else_is_not_the_database_s_fault() -> None:
    assert unavailable_reason(ValueError("a bug")) is None
    assert unavailable_reason(PermissionError(13, "Permission denied")) is None
    assert as_compute_error(ValueError("a bug")) is None
    assert unavailable_reason(DBAPIError("INSERT", {}, _ServerSaid("23505", "duplicate key value"))) is None
