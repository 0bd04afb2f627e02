"""`better-compute nodes list`: each node of the tenant's pools, whether bcd is connected, its state and labels;
`nodes get NODE`: one node with each GPU and its health."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.console import out
from better_compute.cli.render import devices_table
from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.ops import nodes

__all__ = ["nodes_app"]

nodes_app = typer.Typer(no_args_is_help=True, help="Nodes (bcd on a machine of a pool).")

COLUMNS = ["name", "pool", "state", "connected", "gpus", "lastSeenAt", "labels"]


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
    print_views(views, COLUMNS, as_json=as_json, empty="No nodes.")


@nodes_app.command("get")
def get(
    node: Annotated[str, typer.Argument(help="The node's id, or its name (or Kubernetes Node name) among live ones.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Show one node and each of its GPUs: booked or not, and its health (state, reason, XID, since, until)."""
    view = with_tenant(app_ref, tenant, lambda compute, tid: nodes.get_node(compute, tid, node))
    print_views(view, [*COLUMNS, "id"], as_json=as_json, empty="")
    if not as_json:
        out.print(devices_table(view["devices"]))
