"""/v1/secrets: seal a value, list references, delete one, reseal the tenant's under the newest server
secret. No answer ever carries a value."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from better_compute.api.deps import CallerTenant, ComputeDep, IdempotencyKey
from better_compute.ops import secrets
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/secrets", tags=["secrets"])


class SecretBody(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    value: str


@router.post("", status_code=201)
async def create_secret(
    body: SecretBody, compute: ComputeDep, tenant_id: CallerTenant, idempotency_key: IdempotencyKey = None
) -> View:
    """Seal the value; answers its secret:// reference (never the value), the same to a retry with its Idempotency-Key."""
    return await secrets.create_secret(compute, tenant_id, body.value, idempotency_key=idempotency_key)


@router.get("")
async def list_secrets(compute: ComputeDep, tenant_id: CallerTenant) -> list[View]:
    """The tenant's secrets by reference."""
    return await secrets.list_secrets(compute, tenant_id)


@router.post("/reseal")
async def reseal_secrets(compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """Seal the caller's secrets again under the newest server secret (idempotent); answers the counts.
    An API key sees its own tenant only; `better-compute secrets reseal` does every tenant."""
    return await secrets.reseal_secrets(compute, tenant_id)


@router.delete("/{secret_id}")
async def delete_secret(secret_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """Delete a secret by id; answers the reference that is gone."""
    return await secrets.delete_secret(compute, tenant_id, secret_id)
