"""What every command shares: its options, how it opens the Compute, and how it prints.

A command builds a coroutine over the Compute and hands it to `with_compute` (or
`with_tenant`, which also resolves --tenant); errors come back as one line (or JSON
with --json) and exit 1, whatever raised them: a ComputeError, or a database that
cannot be reached. Every command runs here, `fleet` too (which prints a document's
problems its own way: `report`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, TypeVar

import typer

from better_compute.cli.console import out
from better_compute.cli.context import open_compute, tenant_id
from better_compute.cli.errors import EXIT_ERROR, as_compute_error, print_error
from better_compute.cli.render import views_table
from better_compute.core.errors import ComputeError
from better_compute.ops.views import View
from better_compute.server import Compute

__all__ = [
    "AppRef",
    "IdempotencyKey",
    "Json",
    "Tenant",
    "idempotency_key_or_new",
    "print_views",
    "run",
    "with_compute",
    "with_tenant",
]

T = TypeVar("T")

AppRef = Annotated[
    str | None, typer.Option("--app", envvar="BC_APP", help="Your Compute as module:attr (default: from BC_* env).")
]
Tenant = Annotated[str | None, typer.Option("--tenant", envvar="BC_TENANT", help="Tenant id or name.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table (errors too).")]
IdempotencyKey = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Run again with the same key after a lost answer to get what the first run made, not a second one"
        " (default: a new key for this command).",
    ),
]


def idempotency_key_or_new(key: str | None) -> str:
    """The --idempotency-key given, or a new UUID4 for this command: any retry of its create makes one object."""
    return key or str(uuid.uuid4())


Report = Callable[[ComputeError], None]


def run(work: Callable[[], Awaitable[T]], *, report: Report = print_error) -> T:
    """Run a command's coroutine; a ComputeError or a database failure is reported (one line on stderr,
    by default) and exits 1."""
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except Exception as exc:
        error = as_compute_error(exc)
        if error is None:
            raise
        report(error)
        raise typer.Exit(EXIT_ERROR) from None


def with_compute(
    app_ref: str | None, work: Callable[[Compute], Awaitable[T]], *, upgrade: bool = True, report: Report = print_error
) -> T:
    """Open the Compute (schema current, see cli.context.open_compute), run `work` with it, close it."""

    async def go() -> T:
        compute = await open_compute(app_ref, upgrade=upgrade)
        try:
            return await work(compute)
        finally:
            await compute.close()

    return run(go, report=report)


def with_tenant(app_ref: str | None, tenant: str | None, work: Callable[[Compute, str], Awaitable[T]]) -> T:
    """As `with_compute`, with the id of the tenant --tenant names."""

    async def go(compute: Compute) -> T:
        return await work(compute, await tenant_id(compute, tenant))

    return with_compute(app_ref, go)


def print_views(views: Sequence[View] | View, columns: Sequence[str], *, as_json: bool, empty: str) -> None:
    """JSON (the API's objects, exactly) with --json; else a table of `columns`, or `empty` when there are none."""
    if as_json:
        out.print(json.dumps(views, indent=2), markup=False, soft_wrap=True)
        return
    rows: Sequence[View] = [views] if isinstance(views, dict) else views
    if not rows:
        out.print(empty, markup=False)
        return
    out.print(views_table(rows, columns))
