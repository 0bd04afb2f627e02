"""`better-compute`: the control plane's command line.

    better-compute db upgrade           run every module's migrations
    better-compute serve                HTTP API + engine workers (uvicorn)
    better-compute doctor               self-check and doctor findings; non-zero on errors
    better-compute demo                 the demo
    better-compute tenants create NAME
    better-compute api-keys create --tenant ID
    better-compute fleet schema|plan|apply, pools ...   (cli/fleet.py, cli/pools.py)

Commands call services and print what the render functions return. A ComputeError
becomes one line, `error: CODE at /path: message`, and exit status 1.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
import uvicorn
from rich.console import Console

from better_compute.api import create_app
from better_compute.bcd.protocol import MAX_MESSAGE_BYTES
from better_compute.cli.context import load_compute, resolve_tenant
from better_compute.cli.fleet import fleet_app
from better_compute.cli.pools import pools_app
from better_compute.cli.render import error_line, findings_table
from better_compute.cli.substrates import clusters_app, substrates_app
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.findings import has_errors
from better_compute.core.logging import configure_logging
from better_compute.server import Compute, better_compute, pending_migrations

__all__ = ["app", "main"]

T = TypeVar("T")

app = typer.Typer(no_args_is_help=True, help="better-compute: a control plane for GPU pools.")
db_app = typer.Typer(no_args_is_help=True, help="The database schema.")
tenants_app = typer.Typer(no_args_is_help=True, help="Tenants.")
keys_app = typer.Typer(no_args_is_help=True, help="API keys.")
app.add_typer(db_app, name="db")
app.add_typer(tenants_app, name="tenants")
app.add_typer(keys_app, name="api-keys")
app.add_typer(fleet_app, name="fleet")
app.add_typer(pools_app, name="pools")
app.add_typer(substrates_app, name="substrates")
app.add_typer(clusters_app, name="clusters")

AppRef = Annotated[
    str | None, typer.Option("--app", envvar="BC_APP", help="Your Compute as module:attr (default: from BC_* env).")
]
Tenant = Annotated[str | None, typer.Option("--tenant", envvar="BC_TENANT", help="Tenant id.")]

out = Console()
err = Console(stderr=True)


def run(work: Callable[[], Awaitable[T]]) -> T:
    """Run a command's coroutine; a ComputeError becomes one line on stderr and exit 1."""
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except ComputeError as error:
        err.print(error_line(error), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def with_compute(app_ref: str | None, work: Callable[[Compute], Awaitable[T]]) -> T:
    """Load the Compute, run `work` with it, close it; errors as in `run`."""

    async def go() -> T:
        compute = load_compute(app_ref)
        try:
            return await work(compute)
        finally:
            await compute.close()

    return run(go)


@db_app.command("upgrade")
def db_upgrade(app_ref: AppRef = None) -> None:
    """Bring the schema to every module's newest migration."""

    async def upgrade(compute: Compute) -> str:
        await compute.migrate()
        return f"database schema is current ({compute.db.dialect})"

    out.print(with_compute(app_ref, upgrade))


@app.command()
def serve(
    app_ref: AppRef = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Serve the HTTP API and run the engine workers (any number of processes on PostgreSQL)."""
    configure_logging(log_level.upper())
    try:
        compute = load_compute(app_ref)
    except ComputeError as error:
        err.print(error_line(error), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None

    async def check() -> None:
        pending = await pending_migrations(compute.db)
        await compute.db.dispose()
        if pending:
            raise ComputeError(
                ErrorCode.INVALID_STATE, "the database schema is behind: run `better-compute db upgrade`"
            )

    run(check)
    config = uvicorn.Config(
        create_app(compute), host=host, port=port, log_config=None, lifespan="on", ws_max_size=4 * MAX_MESSAGE_BYTES
    )
    asyncio.run(uvicorn.Server(config).serve())


@app.command()
def doctor(app_ref: AppRef = None) -> None:
    """Print self-check and doctor findings; exit 1 if any is an error."""
    findings = with_compute(app_ref, lambda compute: compute.doctor())
    out.print(findings_table(findings, title="doctor"))
    if has_errors(findings):
        raise typer.Exit(1)


@app.command()
def demo() -> None:
    """Migrate a temporary SQLite database, build a Compute and show its self-check."""
    with tempfile.TemporaryDirectory(prefix="better-compute-demo-") as tmp:
        compute = better_compute(database=f"sqlite:///{Path(tmp) / 'demo.db'}", secret=secrets.token_urlsafe(32))

        async def go() -> None:
            try:
                await compute.migrate()
                out.print(f"migrated a demo database ({compute.db.dialect}) in {tmp}")
                out.print(findings_table(await compute.doctor(), title="self-check"))
            finally:
                await compute.close()

        run(go)


@tenants_app.command("create")
def tenants_create(name: str, app_ref: AppRef = None) -> None:
    """Create a tenant; prints its id."""
    tenant = with_compute(app_ref, lambda compute: compute.iam.create_tenant(name))
    out.print(tenant.id, highlight=False)


@keys_app.command("create")
def api_keys_create(tenant: Tenant = None, app_ref: AppRef = None) -> None:
    """Create an API key for the tenant; prints the key, this once."""

    async def create(compute: Compute) -> str:
        _, plain = await compute.iam.create_api_key(resolve_tenant(tenant))
        return plain

    out.print(with_compute(app_ref, create), highlight=False, soft_wrap=True)


def main() -> None:
    app()
