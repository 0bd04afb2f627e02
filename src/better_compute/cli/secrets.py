"""`better-compute secrets`: seal a value (from stdin or a file) and get the reference to paste.

    better-compute secrets create < token.txt         prints secret://<tenant>/<id>
    better-compute secrets create --from-file token.txt
    better-compute secrets reseal                      after rotating BC_SECRET (docs/operations.md)

The value is read, sealed and forgotten: it is never echoed, printed or returned. On a
terminal, stdin is read without echo. One trailing newline is dropped (`echo x | ...`).
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Annotated

import typer

from better_compute.cli.console import out
from better_compute.cli.errors import fail
from better_compute.cli.runner import (
    AppRef,
    IdempotencyKey,
    Json,
    Tenant,
    idempotency_key_or_new,
    print_views,
    with_compute,
    with_tenant,
)
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.ops import secrets
from better_compute.ops.tenants import tenant_id_of
from better_compute.ops.views import View
from better_compute.server import Compute

__all__ = ["secrets_app"]

secrets_app = typer.Typer(no_args_is_help=True, help="Sealed secrets, used as secret:// references.")

COLUMNS = ["reference", "createdAt"]


def read_value(from_file: Path | None) -> str:
    """The secret value from the file, or stdin (hidden on a terminal); INVALID_INPUT if unreadable."""
    try:
        if from_file is not None:
            raw = from_file.read_text()
        elif sys.stdin.isatty():
            raw = getpass.getpass("secret value (not echoed): ")
        else:
            raw = sys.stdin.read()
    except OSError as exc:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"cannot read {from_file}: {exc.strerror}", "/from-file") from exc
    except UnicodeDecodeError as exc:
        raise ComputeError(ErrorCode.INVALID_INPUT, "the secret value is not UTF-8 text", "/value") from exc
    return raw.removesuffix("\n").removesuffix("\r")


@secrets_app.command("create")
def create(
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="Read the value from this file instead of stdin.")
    ] = None,
    idempotency_key: IdempotencyKey = None,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Seal a value read from stdin or --from-file; prints its secret:// reference, never the value."""
    try:
        value = read_value(from_file)
    except ComputeError as error:
        fail(error)
    key = idempotency_key_or_new(idempotency_key)
    view = with_tenant(
        app_ref, tenant, lambda compute, tid: secrets.create_secret(compute, tid, value, idempotency_key=key)
    )
    if as_json:
        print_views(view, COLUMNS, as_json=True, empty="")
    else:
        out.print(view["reference"], markup=False, soft_wrap=True)


@secrets_app.command("list")
def list_(tenant: Tenant = None, as_json: Json = False, app_ref: AppRef = None) -> None:
    """List the tenant's secrets by reference (values are never shown)."""
    views = with_tenant(app_ref, tenant, secrets.list_secrets)
    print_views(views, COLUMNS, as_json=as_json, empty="No secrets.")


@secrets_app.command("delete")
def delete(
    reference: Annotated[str, typer.Argument(help="secret://<tenant>/<id>, or the id.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Delete a secret; documents that still reference it stop validating."""
    view = with_tenant(app_ref, tenant, lambda compute, tid: secrets.delete_secret(compute, tid, reference))
    if as_json:
        print_views(view, COLUMNS, as_json=True, empty="")
    else:
        out.print(f"deleted {view['reference']}", markup=False, soft_wrap=True)


@secrets_app.command("reseal")
def reseal(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's secrets (id or name); default: every tenant's.")
    ] = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Seal every secret again under the newest server secret (BC_SECRET), after a rotation; idempotent.

    The old secret must still be given (BC_PREVIOUS_SECRETS) to open what it sealed. BC_TENANT is not
    read: resealing is the operator's, over the whole database, unless --tenant says otherwise.
    """

    async def work(compute: Compute) -> View:
        return await secrets.reseal_secrets(compute, await tenant_id_of(compute, tenant) if tenant else None)

    view = with_compute(app_ref, work)
    if as_json:
        print_views(view, list(view), as_json=True, empty="")
    else:
        out.print(
            f"resealed {view['resealed']} secret(s) under key {view['keyId']}; {view['current']} already were",
            markup=False,
            soft_wrap=True,
        )
        for reference in view["unreadable"]:
            out.print(
                f"cannot open {reference}: give the secret it was sealed with in BC_PREVIOUS_SECRETS",
                markup=False,
                soft_wrap=True,
            )
    if view["unreadable"]:
        raise typer.Exit(1)
