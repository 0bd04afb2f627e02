"""API keys: a key's value is in the answer to create, once, and nowhere else."""

from __future__ import annotations

from better_compute.iam import ApiKey
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


async def create_api_key(compute: Compute, tenant_id: str) -> View:
    """The new key's record with its value under "key": show it once, it cannot be read again."""
    key, plain = await compute.iam.create_api_key(tenant_id)
    return {**api_key_view(key), "key": plain}


async def list_api_keys(compute: Compute, tenant_id: str) -> list[View]:
    return [api_key_view(k) for k in await compute.iam.list_api_keys(tenant_id)]


async def revoke_api_key(compute: Compute, tenant_id: str, key_id: str) -> View:
    return api_key_view(await compute.iam.revoke_api_key(tenant_id, key_id))
