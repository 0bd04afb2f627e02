"""`better-compute`: the control plane's command line.

    better-compute db upgrade           run every module's migrations
    better-compute serve                HTTP API + engine workers (uvicorn)
    better-compute doctor               the server's findings (BC_API_KEY), else this process's own
    better-compute demo                 the demo
    better-compute tenants|api-keys|secrets|pools|nodes|reservations|join-tokens ...
    better-compute events               the decision log (why each booking, preemption, retirement)
    better-compute fleet schema|plan|apply
    better-compute sweep [--delete]     what carries our marks at the providers and no record owns

Each group lives in its own file and is registered below with one line. Commands call
services (better_compute.ops) and print what the render functions return. `main()`
turns every failure into one line and an exit status (cli/errors.py); docs/cli.md is
generated from this command tree (`better-compute docs cli`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from rich.console import Console
from typer._click.exceptions import ClickException

from better_compute.api import create_app
from better_compute.api.serving import Server, raise_open_files_limit, websocket_protocol
from better_compute.cli.api_keys import api_keys_app
from better_compute.cli.console import err, out
from better_compute.cli.context import ENVIRONMENT, data_dir, database_url, open_compute, uses_embedded_database
from better_compute.cli.docs import docs_app
from better_compute.cli.errors import (
    EXIT_ERROR,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    as_compute_error,
    fail,
    install_one_line_logging,
    print_error,
)
from better_compute.cli.events import events
from better_compute.cli.fleet import fleet_app
from better_compute.cli.join_tokens import join_tokens_app
from better_compute.cli.nodes import nodes_app
from better_compute.cli.pools import pools_app
from better_compute.cli.render import findings_table
from better_compute.cli.reservations import reservations_app
from better_compute.cli.runner import AppRef, run, with_compute
from better_compute.cli.secrets import secrets_app
from better_compute.cli.server_doctor import server_address, server_findings
from better_compute.cli.substrates import clusters_app, substrates_app
from better_compute.cli.sweep import sweep
from better_compute.cli.tenants import tenants_app
from better_compute.core import tracing
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.findings import has_errors
from better_compute.core.logging import configure_logging
from better_compute.server import Compute
from better_compute.wire.protocol import MAX_MESSAGE_BYTES

__all__ = ["app", "main"]

DEMO_WIDTH = 100
"""The demo draws at most this wide, so it reads the same in a terminal and in docs/demo.txt."""

HELP = "\n".join(
    [
        "better-compute: a control plane for GPU pools.",
        "",
        "\b",
        "Environment:",
        *(f"  {name}: {meaning}" for name, meaning in ENVIRONMENT),
    ]
)

app = typer.Typer(
    no_args_is_help=True,
    help="better-compute: a control plane for GPU pools.",
    rich_markup_mode=None,
    add_completion=False,
)
db_app = typer.Typer(no_args_is_help=True, help="The database schema.")
app.add_typer(db_app, name="db")
app.add_typer(tenants_app, name="tenants")
app.add_typer(api_keys_app, name="api-keys")
app.add_typer(secrets_app, name="secrets")
app.add_typer(pools_app, name="pools")
app.add_typer(nodes_app, name="nodes")
app.add_typer(reservations_app, name="reservations")
app.add_typer(join_tokens_app, name="join-tokens")
app.add_typer(fleet_app, name="fleet")
app.add_typer(substrates_app, name="substrates")
app.add_typer(clusters_app, name="clusters")
app.add_typer(docs_app, name="docs", hidden=True)
app.command("events")(events)
app.command("sweep")(sweep)


def _version(value: bool) -> None:
    if value:
        out.print(f"better-compute {version('better-compute')}", markup=False)
        raise typer.Exit()


@app.callback(help=HELP)
def _root(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """The --version flag; the commands are the groups registered above."""


@db_app.command("upgrade")
def db_upgrade(app_ref: AppRef = None) -> None:
    """Bring the schema to every module's newest migration."""

    async def upgrade(compute: Compute) -> str:
        await compute.migrate()
        return f"database schema is current ({compute.db.dialect})"

    out.print(with_compute(app_ref, upgrade, upgrade=False), markup=False)


@app.command()
def serve(
    app_ref: AppRef = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
    tls_cert_file: Annotated[
        Path | None, typer.Option(help="PEM certificate chain: serve HTTPS and wss:// (bcd pins its key).")
    ] = None,
    tls_key_file: Annotated[
        Path | None, typer.Option(help="PEM private key of --tls-cert-file (default: that file, holding both).")
    ] = None,
) -> None:
    """Serve the HTTP API and run the engine workers (any number of processes on PostgreSQL)."""
    if tls_key_file is not None and tls_cert_file is None:
        fail(ComputeError(ErrorCode.INVALID_INPUT, "--tls-key-file needs --tls-cert-file", "/tls-key-file"))
    for name, path in (("tls-cert-file", tls_cert_file), ("tls-key-file", tls_key_file)):
        if path is not None and not path.is_file():
            fail(ComputeError(ErrorCode.INVALID_INPUT, f"--{name}: no file at {path}", f"/{name}"))

    async def opened() -> Compute:
        compute = await open_compute(app_ref)  # the schema is current (the embedded default upgrades itself)
        await compute.db.dispose()  # uvicorn's event loop opens it again
        return compute

    try:
        traced = tracing.start_from_env(os.environ)  # OTLP spans when OTEL_EXPORTER_OTLP_*ENDPOINT is set
    except ComputeError as err:
        fail(err)
    compute = run(opened)
    configure_logging(log_level.upper())  # after the checks, which answer in one line of their own
    raise_open_files_limit()  # a socket per connected node (api.serving)
    config = uvicorn.Config(
        create_app(compute),
        host=host,
        port=port,
        log_config=None,
        lifespan="on",
        ws_max_size=4 * MAX_MESSAGE_BYTES,
        ssl_certfile=str(tls_cert_file) if tls_cert_file else None,
        ssl_keyfile=str(tls_key_file or tls_cert_file) if tls_cert_file else None,
        ws=websocket_protocol(),  # api.serving: the gateway's lean WebSocket protocol
        ws_per_message_deflate=False,  # bcd never asks for it: a zlib window a node, for frames of a few hundred bytes
    )
    try:
        asyncio.run(Server(config).serve())  # api.serving: ends the console's event streams at shutdown
    finally:
        if traced:
            tracing.shutdown()  # exports what is still batched


@app.command()
def doctor(
    app_ref: AppRef = None,
    local: Annotated[
        bool, typer.Option("--local", help="Check only this command's own configuration, not the server's.")
    ] = False,
) -> None:
    """The server's self-check and doctor findings (with BC_API_KEY), else this command's own; exit 1 on an error.

    With BC_API_KEY the server at BC_BASE_URL answers (GET /v1/doctor, the key's tenant's view). Otherwise, or
    when no server answers there, the findings are this process's own configuration and database, and it says so.
    """
    address = None if local else server_address()
    findings = server_findings(address) if address is not None else None
    if address is not None and findings is not None:
        out.print(f"server: {address.base_url} (its own view, for this API key's tenant)", markup=False, soft_wrap=True)
    else:
        if address is not None:
            out.print(f"no server answers at {address.base_url}.", markup=False, soft_wrap=True)
        out.print(
            "checked only this command's own configuration and database, not a running server's"
            + ("" if local else ": set BC_API_KEY (and BC_BASE_URL) to ask the server"),
            markup=False,
            soft_wrap=True,
        )
        if not (app_ref or os.environ.get("BC_APP")):
            where = "embedded SQLite, in the data directory" if uses_embedded_database() else "BC_DATABASE_URL"
            out.print(f"database: {_shown(database_url())} ({where})", markup=False, soft_wrap=True)
            out.print(f"data directory: {data_dir()}", markup=False, soft_wrap=True)
        findings = with_compute(app_ref, lambda compute: compute.doctor(), upgrade=uses_embedded_database(app_ref))
    out.print(findings_table(findings, title="doctor"))
    if has_errors(findings):
        raise typer.Exit(EXIT_ERROR)


def _shown(url: str) -> str:
    """The URL with any password masked."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(BC_DATABASE_URL is not a database URL)"


@app.command()
def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the control plane and emulators serving; print their environment.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Quiet: print only the summary, as JSON.")] = False,
    fleet: Annotated[
        Path | None, typer.Option("--fleet", help="The FleetConfig document (default: examples/fleet.json).")
    ] = None,
) -> None:
    """Tell the whole story on emulated GKE, EKS and DOKS: apply, join, book, scale, Spot reclaim, prune."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # gRPC's C core logs device plugin streams closing at teardown
    from better_compute.demo import Display, Summary, default_fleet_path, run_demo

    path = fleet or default_fleet_path()
    if not path.is_file():
        fail(
            ComputeError(
                ErrorCode.NOT_FOUND,
                f"no fleet document at {path}: run from the repository root or give --fleet",
                "/fleet",
            )
        )
    display = Display(None if as_json else Console(width=min(out.width, DEMO_WIDTH), highlight=False))

    def print_json(summary: Summary) -> None:
        print(json.dumps(summary.to_dict()), flush=True)

    summary = run(lambda: run_demo(display, path.read_text(), keep=keep, on_kept=print_json if as_json else None))
    if as_json and not keep:
        print_json(summary)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; every failure is one line (JSON with --json) and an exit status, never a traceback."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    if not os.environ.get("BC_DEBUG"):
        install_one_line_logging()
    try:
        result = typer.main.get_command(app).main(args=args, prog_name="better-compute", standalone_mode=False)
    except (typer.Abort, KeyboardInterrupt):
        err.print("\ninterrupted: nothing more was done.", markup=False)
        return EXIT_INTERRUPTED
    except ClickException as exc:
        if as_json:
            err.print(json.dumps({"error": {"code": "USAGE", "message": exc.format_message()}}), markup=False)
        else:
            exc.show()
        return exc.exit_code
    except Exception as exc:
        error = as_compute_error(exc)
        if error is not None:
            print_error(error, as_json=as_json)
            return EXIT_ERROR
        if os.environ.get("BC_DEBUG"):
            traceback.print_exc()
        message = f"internal error: {type(exc).__name__}: {exc} (a bug in better-compute; BC_DEBUG=1 shows where)"
        if as_json:
            err.print(json.dumps({"error": {"code": "INTERNAL", "message": message}}), markup=False)
        else:
            err.print(message, markup=False, soft_wrap=True)
        return EXIT_INTERNAL
    return result if isinstance(result, int) else EXIT_OK
