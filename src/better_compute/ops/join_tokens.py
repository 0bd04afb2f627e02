"""Join tokens: their records (uses, revocation), never their values; revoke one by id."""

from __future__ import annotations

from better_compute.gateway.tokens import JoinToken
from better_compute.ops.pools import pool_named
from better_compute.ops.views import View, iso
from better_compute.server import Compute

__all__ = ["list_join_tokens", "revoke_join_token"]


def join_token_view(token: JoinToken, pool_name: str) -> View:
    return {
        "id": token.id,
        "pool": pool_name,
        "poolId": token.pool_id,
        "kind": token.kind,
        "usesAllowed": token.uses_allowed,
        "uses": token.uses,
        "usesLeft": token.uses_left,
        "createdAt": iso(token.created_at),
        "lastUsedAt": iso(token.last_used_at),
        "revokedAt": iso(token.revoked_at),
    }


async def _names(compute: Compute, tenant_id: str) -> dict[str, str]:
    return {p.id: p.name for p in await compute.pools.list(tenant_id, include_archived=True)}


async def list_join_tokens(compute: Compute, tenant_id: str, *, pool: str | None = None) -> list[View]:
    pool_id = (await pool_named(compute, tenant_id, pool)).id if pool is not None else None
    names = await _names(compute, tenant_id)
    tokens = await compute.join_tokens.list(tenant_id, pool_id=pool_id)
    return [join_token_view(t, names.get(t.pool_id, t.pool_id)) for t in tokens]


async def revoke_join_token(compute: Compute, tenant_id: str, token_id: str) -> View:
    token = await compute.join_tokens.revoke(tenant_id, token_id)
    names = await _names(compute, tenant_id)
    return join_token_view(token, names.get(token.pool_id, token.pool_id))
