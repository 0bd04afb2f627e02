"""`better-compute events`: the tenant's decision log (why each booking, preemption, cordon and retirement)."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli.console import out
from better_compute.cli.runner import AppRef, Json, Tenant, print_views, with_tenant
from better_compute.ops import events as ops_events

__all__ = ["events"]

COLUMNS = ["at", "kind", "pool", "nodeName", "reservationId", "reason"]


def events(
    event_id: Annotated[str | None, typer.Argument(help="Show only this event (its id).")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool's (its name).")] = None,
    node: Annotated[str | None, typer.Option("--node", help="Only this node's (its id or name).")] = None,
    reservation: Annotated[str | None, typer.Option("--reservation", help="Only this reservation's (its id).")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="Only decisions of this kind (e.g. node.retired).")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="From this time on: ISO 8601, or back from now (90s, 30m, 2h, 7d).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many.")] = ops_events.DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Start after the page that printed this cursor.")
    ] = None,
    tenant: Tenant = None,
    as_json: Json = False,
    app_ref: AppRef = None,
) -> None:
    """The decision log, oldest first: what was decided about each node, GPU and reservation, and why."""
    if event_id is not None:
        view = with_tenant(app_ref, tenant, lambda compute, tid: ops_events.get_event(compute, tid, event_id))
        print_views(view, COLUMNS, as_json=as_json, empty="")
        return
    page = with_tenant(
        app_ref,
        tenant,
        lambda compute, tid: ops_events.list_events(
            compute,
            tid,
            pool=pool,
            node=node,
            reservation=reservation,
            kind=kind,
            since=since,
            limit=limit,
            cursor=cursor,
        ),
    )
    if as_json:
        print_views(page, COLUMNS, as_json=True, empty="")
        return
    print_views(page["events"], COLUMNS, as_json=False, empty="No events.")
    if page["next"] is not None:
        out.print(f"more: --cursor {page['next']}", markup=False, soft_wrap=True)
