"""`better-compute join-tokens`: the substrate's join tokens (uses and revocation; never values)."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.ops import join_tokens

__all__ = ["join_tokens_app"]

join_tokens_app = typer.Typer(no_args_is_help=True, help="Join tokens (what lets bcd join a pool).")

COLUMNS = ["id", "pool", "kind", "uses", "usesAllowed", "usesLeft", "lastUsedAt", "revokedAt"]


@join_tokens_app.command("list")
def list_(
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool's (its name).")] = None,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """List join tokens; their values are never kept, so never shown."""
    views = with_tenant(app_ref, tenant, lambda compute, tid: join_tokens.list_join_tokens(compute, tid, pool=pool))
    print_views(views, COLUMNS, as_json=as_json, empty="No join tokens.")


@join_tokens_app.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id, as `join-tokens list` shows it.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Revoke a join token: no node joins with it from now on (joined nodes stay)."""
    view = with_tenant(app_ref, tenant, lambda compute, tid: join_tokens.revoke_join_token(compute, tid, token_id))
    print_views(view, COLUMNS, as_json=as_json, empty="")
