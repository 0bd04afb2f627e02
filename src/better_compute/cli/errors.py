"""How the CLI reports a failure: one line (or one JSON object with --json), never a traceback.

Exit status of every command (docs/cli.md):

    0    success
    1    an error: `error: CODE at /path: message` on stderr
    2    a usage error (unknown option, missing argument); `fleet plan`: changes pending
    3    `fleet plan`: the plan has blocked items
    130  interrupted (Ctrl-C), at a prompt or while working; nothing more is done
    70   an internal error: a bug in better-compute (BC_DEBUG=1 shows the traceback)
"""

from __future__ import annotations

import json
import logging
import sys
from typing import NoReturn

import typer
from sqlalchemy.exc import DBAPIError
from typer._click.globals import get_current_context

from better_compute.cli.console import err
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import RedactingFilter
from better_compute.store.errors import first_line, unavailable_reason

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "as_compute_error",
    "fail",
    "install_one_line_logging",
    "json_requested",
    "print_error",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def json_requested() -> bool:
    """Whether the running command was given --json (its errors are then JSON too)."""
    ctx = get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return False


def print_error(error: ComputeError, *, as_json: bool | None = None) -> None:
    """`error: CODE at /path: message` plus one line per further problem, or {"error": {...}} with --json."""
    if as_json if as_json is not None else json_requested():
        err.print(json.dumps({"error": error.to_dict()}), markup=False, soft_wrap=True)
        return
    err.print(f"error: {error}", markup=False, soft_wrap=True)
    for problem in error.problems[1:]:
        err.print(f"  {problem.path}: {problem.message}", markup=False, soft_wrap=True)


def fail(error: ComputeError) -> NoReturn:
    print_error(error)
    raise typer.Exit(EXIT_ERROR)


class _OneLine(logging.Formatter):
    """A library's warning (SQLAlchemy closing a connection on Ctrl-C, say) as one line, without its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        reason = f" ({record.exc_info[1]!r})" if record.exc_info and record.exc_info[1] is not None else ""
        return f"{record.levelname.lower()}: {record.name}: {record.getMessage()}{reason}"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a record comes (tests redirect it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


def install_one_line_logging() -> None:
    """Warnings and errors logged during a command go to stderr as one line each (BC_DEBUG keeps tracebacks)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = _Stderr()
    handler.better_compute = True  # type: ignore[attr-defined]  # configure_logging (serve) replaces it
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine())
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)


def as_compute_error(exc: BaseException) -> ComputeError | None:
    """A database that cannot be reached, opened or used now as UNAVAILABLE with what to check
    (store.errors), a file that cannot be read or written as INVALID_STATE; None for anything
    else (a bug)."""
    if isinstance(exc, ComputeError):
        return exc
    if (reason := unavailable_reason(exc)) is not None:
        return ComputeError(ErrorCode.UNAVAILABLE, reason, "/BC_DATABASE_URL")
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return ComputeError(ErrorCode.INVALID_STATE, f"{exc.strerror or exc}{where}")
    if isinstance(exc, DBAPIError):
        return ComputeError(ErrorCode.INVALID_STATE, f"the database said: {first_line(exc.orig)}", "/BC_DATABASE_URL")
    return None
