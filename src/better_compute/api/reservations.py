"""/v1/reservations: book GPUs in a pool by name, list the bookings, read one with its GPUs' health, release one."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from better_compute.api.answers import JsonArray
from better_compute.api.deps import CallerTenant, ComputeDep, IdempotencyKey
from better_compute.ops import reservations
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/reservations", tags=["reservations"])


class ReservationBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: str = Field(description="The pool's name.")
    gpus: int = Field(default=1, description="How many GPUs, all on one node.")
    spot: bool = Field(default=False, description="Accept a Spot node the provider may reclaim.")


@router.post("", status_code=201)
async def create_reservation(
    body: ReservationBody, compute: ComputeDep, tenant_id: CallerTenant, idempotency_key: IdempotencyKey = None
) -> View:
    """Book GPUs on one ready node of the pool; a retry with the same Idempotency-Key answers that booking."""
    return await reservations.create_reservation(
        compute, tenant_id, pool=body.pool, gpus=body.gpus, spot=body.spot, idempotency_key=idempotency_key
    )


@router.get("", response_model=list[View])
async def list_reservations(
    compute: ComputeDep, tenant_id: CallerTenant, pool: str | None = None, state: str | None = None
) -> JsonArray:
    """The tenant's reservations, by ?pool=NAME and ?state=active|released|preempted|ended."""
    return JsonArray(await reservations.list_reservations_json(compute, tenant_id, pool=pool, state=state))


@router.get("/{reservation_id}")
async def get_reservation(reservation_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """One reservation, with each of its GPUs and that GPU's health."""
    return await reservations.get_reservation(compute, tenant_id, reservation_id)


@router.post("/{reservation_id}/release")
async def release_reservation(reservation_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """Give the GPUs back; releasing twice is harmless."""
    return await reservations.release_reservation(compute, tenant_id, reservation_id)
