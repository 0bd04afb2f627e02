"""/v1/api-keys: the caller's tenant's keys; a new key's value is in the create answer only."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.deps import CallerTenant, ComputeDep, IdempotencyKey
from better_compute.ops import api_keys
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/api-keys", tags=["api-keys"])


@router.post("", status_code=201)
async def create_api_key(compute: ComputeDep, tenant_id: CallerTenant, idempotency_key: IdempotencyKey = None) -> View:
    """A new key for the caller's tenant; its value ("key") is shown this once, and to a retry with its Idempotency-Key.

    The value is never stored in plain form: a retry's answer is opened from a record sealed under the
    client's Idempotency-Key, kept for the key's retention period."""
    return await api_keys.create_api_key(compute, tenant_id, idempotency_key=idempotency_key)


@router.get("")
async def list_api_keys(compute: ComputeDep, tenant_id: CallerTenant) -> list[View]:
    """The tenant's keys: ids and dates, never values."""
    return await api_keys.list_api_keys(compute, tenant_id)


@router.post("/{key_id}/revoke")
async def revoke_api_key(key_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """Revoke a key: it stops authenticating at once (revoking twice is harmless)."""
    return await api_keys.revoke_api_key(compute, tenant_id, key_id)
