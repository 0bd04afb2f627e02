"""`better-compute reservations`: book GPUs in a pool, list the bookings, read one with its GPUs' health,
release one."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.console import out
from better_compute.cli.render import devices_table
from better_compute.cli.runner import (
    AppRef,
    IdempotencyKey,
    Json,
    Tenant,
    idempotency_key_or_new,
    print_views,
    with_tenant,
)
from better_compute.ops import reservations

__all__ = ["reservations_app"]

reservations_app = typer.Typer(no_args_is_help=True, help="Reservations (GPUs booked on a node of a pool).")

COLUMNS = ["id", "pool", "nodeId", "gpuModel", "gpuCount", "spot", "state", "health", "createdAt"]


@reservations_app.command("create")
def create(
    pool: Annotated[str, typer.Option("--pool", help="The pool's name.")],
    gpus: Annotated[int, typer.Option("--gpus", help="How many GPUs, all on one node.")] = 1,
    spot: Annotated[bool, typer.Option("--spot", help="Accept a Spot node the provider may reclaim.")] = False,
    idempotency_key: IdempotencyKey = None,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Book GPUs on one ready node of the pool."""
    key = idempotency_key_or_new(idempotency_key)
    view = with_tenant(
        app_ref,
        tenant,
        lambda compute, tid: reservations.create_reservation(
            compute, tid, pool=pool, gpus=gpus, spot=spot, idempotency_key=key
        ),
    )
    print_views(view, COLUMNS, as_json=as_json, empty="")


@reservations_app.command("list")
def list_(
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool's (its name).")] = None,
    state: Annotated[
        str | None, typer.Option("--state", help="Only these: active, released, preempted or ended.")
    ] = None,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """List the tenant's reservations."""
    views = with_tenant(
        app_ref, tenant, lambda compute, tid: reservations.list_reservations(compute, tid, pool=pool, state=state)
    )
    print_views(views, COLUMNS, as_json=as_json, empty="No reservations.")


@reservations_app.command("get")
def get(
    reservation_id: Annotated[str, typer.Argument(help="The reservation's id.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Show one reservation and each of its GPUs with its health (state, reason, XID, since, until)."""
    view = with_tenant(app_ref, tenant, lambda compute, tid: reservations.get_reservation(compute, tid, reservation_id))
    print_views(view, [*COLUMNS, "endedAt"], as_json=as_json, empty="")
    if not as_json:
        out.print(devices_table(view["devices"]))


@reservations_app.command("release")
def release(
    reservation_id: Annotated[str, typer.Argument(help="The reservation's id.")],
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """Give the GPUs back; releasing twice is harmless."""
    view = with_tenant(
        app_ref, tenant, lambda compute, tid: reservations.release_reservation(compute, tid, reservation_id)
    )
    print_views(view, COLUMNS, as_json=as_json, empty="")
