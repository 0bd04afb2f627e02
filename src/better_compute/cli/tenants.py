"""`better-compute tenants`: create and list tenants (the operator sees every tenant)."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.console import out
from better_compute.cli.runner import AppRef, Json, print_views, with_compute
from better_compute.ops import tenants

__all__ = ["tenants_app"]

tenants_app = typer.Typer(no_args_is_help=True, help="Tenants.")


@tenants_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Lowercase letters, digits, '.', '_' or '-'.")],
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Create a tenant; prints its id (--tenant takes the id or the name)."""
    view = with_compute(app_ref, lambda compute: tenants.create_tenant(compute, name))
    if as_json:
        print_views(view, [], as_json=True, empty="")
    else:
        out.print(view["id"], markup=False)


@tenants_app.command("list")
def list_(as_json: Json = False, app_ref: AppRef = None) -> None:
    """List every tenant."""
    views = with_compute(app_ref, tenants.list_tenants)
    print_views(
        views,
        ["id", "name"],
        as_json=as_json,
        empty="No tenants: create one with `better-compute tenants create NAME`.",
    )
