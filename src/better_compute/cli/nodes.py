"""`better-compute nodes list`: each node of the tenant's pools, whether bcd is connected, its state and labels."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.ops import nodes

__all__ = ["nodes_app"]

nodes_app = typer.Typer(no_args_is_help=True, help="Nodes (bcd on a machine of a pool).")


@nodes_app.command("list")
def list_(
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool's nodes (its name).")] = None,
    retired: Annotated[bool, typer.Option("--retired", help="Include retired nodes.")] = False,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """List nodes: pool, state, connected, GPUs and labels."""
    views = with_tenant(
        app_ref, tenant, lambda compute, tid: nodes.list_nodes(compute, tid, pool=pool, include_retired=retired)
    )
    columns = ["name", "pool", "state", "connected", "gpus", "lastSeenAt", "labels"]
    print_views(views, columns, as_json=as_json, empty="No nodes.")
