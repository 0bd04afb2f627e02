"""GET /v1/events: the tenant's decision log by pool, node, reservation, kind and time, a page at a time."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.decisions import Kind
from better_compute.decisions.reading import MAX_LIMIT
from better_compute.ops import events
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/events", tags=["events"])


class EventOut(BaseModel):
    """One decision: what (`kind`), why (`reason`), when, who and about what."""

    id: str
    at: str = Field(description="When it was decided (ISO 8601, UTC).")
    kind: str = Field(description=f"One of {', '.join(k.value for k in Kind)}.")
    reason: str = Field(description="Why, in a sentence.")
    pool: str | None = Field(description="The pool's name.")
    poolId: str | None
    nodeId: str | None
    nodeName: str | None
    reservationId: str | None
    gpuIds: list[str] = Field(description="The GPUs' UUIDs.")
    principal: str | None = Field(description="The API key that decided; null for the system itself.")
    details: dict[str, Any]


class EventPage(BaseModel):
    events: list[EventOut]
    next: str | None = Field(description="The cursor of the next page (?cursor=); null when this page is the last.")


@router.get("", response_model=EventPage)
async def list_events(
    compute: ComputeDep,
    tenant_id: CallerTenant,
    pool: Annotated[str | None, Query(description="Only this pool's (its name).")] = None,
    node: Annotated[str | None, Query(description="Only this node's (its id or name).")] = None,
    reservation: Annotated[str | None, Query(description="Only this reservation's (its id).")] = None,
    kind: Annotated[str | None, Query(description="Only decisions of this kind.")] = None,
    since: Annotated[
        str | None, Query(description="From this time on: ISO 8601, or a span back from now (90s, 30m, 2h, 7d).")
    ] = None,
    limit: Annotated[int, Query(description=f"At most this many (1 to {MAX_LIMIT}).")] = events.DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(description="Start after the page that answered this `next`.")] = None,
) -> View:
    """The tenant's decision log, oldest first, by pool, node, reservation, kind and time, a page at a time.

    Why a booking went where it went, why a reservation was preempted, why a node went. Only the
    caller's tenant's events are ever answered."""
    return await events.list_events(
        compute,
        tenant_id,
        pool=pool,
        node=node,
        reservation=reservation,
        kind=kind,
        since=since,
        limit=limit,
        cursor=cursor,
    )


@router.get("/{event_id}", response_model=EventOut)
async def get_event(event_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """One of the tenant's events by id (404 for another tenant's, as for none)."""
    return await events.get_event(compute, tenant_id, event_id)
