"""API keys: a key's value is in the answer to create, once, and nowhere else."""

from __future__ import annotations

from better_compute.iam import ApiKey, new_api_key
from better_compute.ops.idempotency import claim_once
from better_compute.ops.views import View, iso
from better_compute.server import Compute

__all__ = ["create_api_key", "list_api_keys", "revoke_api_key"]


def api_key_view(key: ApiKey) -> View:
    return {
        "id": key.id,
        "tenantId": key.tenant_id,
        "createdAt": iso(key.created_at),
        "revokedAt": iso(key.revoked_at),
    }


async def create_api_key(compute: Compute, tenant_id: str, *, idempotency_key: str | None = None) -> View:
    """The new key's record with its value under "key": show it once, it cannot be read again.

    With `idempotency_key`, a retry of the same request answers the key it made, value and all: the value
    is kept sealed under the client's key for the retention period (ops.idempotency), never in plain form."""
    made = None
    if idempotency_key is not None:
        made = await claim_once(compute, tenant_id, "api-keys.create", idempotency_key, {}, new_api_key)
    key, plain = await compute.iam.create_api_key(tenant_id, made=made)
    return {**api_key_view(key), "key": plain}


async def list_api_keys(compute: Compute, tenant_id: str) -> list[View]:
    return [api_key_view(k) for k in await compute.iam.list_api_keys(tenant_id)]


async def revoke_api_key(compute: Compute, tenant_id: str, key_id: str) -> View:
    return api_key_view(await compute.iam.revoke_api_key(tenant_id, key_id))
