"""`better-compute api-keys`: create (the value is printed this once), list and revoke a tenant's keys."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.console import out
from better_compute.cli.runner import (
    AppRef,
    IdempotencyKey,
    Json,
    Tenant,
    idempotency_key_or_new,
    print_views,
    with_tenant,
)
from better_compute.ops import api_keys

__all__ = ["api_keys_app"]

api_keys_app = typer.Typer(no_args_is_help=True, help="API keys (Authorization: Bearer <key> on /v1).")


@api_keys_app.command("create")
def create(
    idempotency_key: IdempotencyKey = None, tenant: Tenant = None, as_json: Json = False, app_ref: AppRef = None
) -> None:
    """Create an API key for the tenant; prints the key, this once: it cannot be shown again.

    Only a run with the same --idempotency-key, within its retention period, prints that key again."""
    key = idempotency_key_or_new(idempotency_key)
    view = with_tenant(app_ref, tenant, lambda compute, tid: api_keys.create_api_key(compute, tid, idempotency_key=key))
    if as_json:
        print_views(view, [], as_json=True, empty="")
    else:
        out.print(view["key"], markup=False, soft_wrap=True)


@api_keys_app.command("list")
def list_(tenant: Tenant = None, as_json: Json = False, app_ref: AppRef = None) -> None:
    """List the tenant's API keys (ids and dates; never the values)."""
    views = with_tenant(app_ref, tenant, api_keys.list_api_keys)
    print_views(views, ["id", "createdAt", "revokedAt"], as_json=as_json, empty="No API keys.")


@api_keys_app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...), as `api-keys list` shows it.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Revoke an API key: it stops authenticating at once. Revoking twice is harmless."""
    view = with_tenant(app_ref, tenant, lambda compute, tid: api_keys.revoke_api_key(compute, tid, key_id))
    print_views(view, ["id", "createdAt", "revokedAt"], as_json=as_json, empty="")
