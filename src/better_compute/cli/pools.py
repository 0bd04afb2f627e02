"""`better-compute pools`: pool commands that are not part of a FleetConfig document.

    better-compute pools archive NAME     start the same teardown a pruned apply starts

Archiving stops new bookings, cordons the pool's nodes, and queues its substrate's
teardown; bookings that exist are never force-released. Exit 0 once the teardown
has started, 1 on an error (no such pool, say).
"""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.context import resolve_tenant
from better_compute.cli.fleet import AppRef, Tenant, out, with_fleet
from better_compute.compute.models import Pool
from better_compute.fleet import Fleet
from better_compute.server import Compute

__all__ = ["pools_app"]

pools_app = typer.Typer(no_args_is_help=True, help="Pools.")


@pools_app.command("archive")
def archive(
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    tenant: Tenant = None,
    app_ref: AppRef = None,
) -> None:
    """Archive a pool: its nodes drain and its substrate is torn down."""

    async def work(fleet: Fleet, _: Compute) -> Pool:
        return await fleet.archive_pool(name, tenant_id=resolve_tenant(tenant))

    pool = with_fleet(app_ref, work)
    if pool.state == "archived":
        out.print(f"pool {pool.name} is archived.")
    else:
        out.print(f"pool {pool.name} is archiving: its nodes are cordoned and its substrate is being torn down.")
