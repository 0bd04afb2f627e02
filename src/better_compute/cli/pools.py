"""`better-compute pools`: read pools, and the pool commands that are not part of a FleetConfig document.

    better-compute pools list [--json]
    better-compute pools get NAME [--json]
    better-compute pools archive NAME     start the same teardown a pruned apply starts

Archiving stops new bookings, cordons the pool's nodes, and queues its substrate's
teardown; bookings that exist are never force-released. It prints the pool's id,
which reads the substrate once the name is taken by another pool. Exit 0 once the
teardown has started, 1 on an error (no such pool, say).
"""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.console import out
from better_compute.cli.context import tenant_id
from better_compute.cli.fleet import with_fleet
from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.compute.models import Pool
from better_compute.fleet import Fleet
from better_compute.ops import pools
from better_compute.server import Compute

__all__ = ["pools_app"]

pools_app = typer.Typer(no_args_is_help=True, help="Pools.")

COLUMNS = ["name", "state", "class", "gpuModel", "nodes", "readyNodes", "connectedNodes"]


@pools_app.command("list")
def list_(
    archived: Annotated[bool, typer.Option("--archived", help="Include archived pools.")] = False,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """List the tenant's pools with their node counts."""
    views = with_tenant(app_ref, tenant, lambda compute, tid: pools.list_pools(compute, tid, include_archived=archived))
    print_views(views, COLUMNS, as_json=as_json, empty="No pools: apply a FleetConfig document to make some.")


@pools_app.command("get")
def get(
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Show one pool, with its policy under --json."""
    view = with_tenant(app_ref, tenant, lambda compute, tid: pools.get_pool(compute, tid, name))
    print_views(view, [*COLUMNS, "id", "siteId", "updatedAt"], as_json=as_json, empty="")


@pools_app.command("archive")
def archive(
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    tenant: Tenant = None,
    app_ref: AppRef = None,
) -> None:
    """Archive a pool: its nodes drain and its substrate is torn down. Prints the pool's id; `substrates get NAME`
    reads the substrate until another pool takes the name, then `substrates get ID` does."""

    async def work(fleet: Fleet, compute: Compute) -> Pool:
        return await fleet.archive_pool(name, tenant_id=await tenant_id(compute, tenant))

    pool = with_fleet(app_ref, work)
    if pool.state == "archived":
        out.print(f"pool {pool.name} ({pool.id}) is archived.")
    else:
        out.print(
            f"pool {pool.name} ({pool.id}) is archiving: its nodes are cordoned and its substrate is being torn "
            f"down; `better-compute substrates get {pool.name}` says when it is deleted."
        )
