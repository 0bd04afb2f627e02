"""/v1/join-tokens: the tenant's join tokens (never their values) and revoking one."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.deps import CallerTenant, ComputeDep
from better_compute.ops import join_tokens
from better_compute.ops.views import View

__all__ = ["router"]

router = APIRouter(prefix="/v1/join-tokens", tags=["join-tokens"])


@router.get("")
async def list_join_tokens(compute: ComputeDep, tenant_id: CallerTenant, pool: str | None = None) -> list[View]:
    """The tenant's join tokens, or one pool's (?pool=NAME)."""
    return await join_tokens.list_join_tokens(compute, tenant_id, pool=pool)


@router.post("/{token_id}/revoke")
async def revoke_join_token(token_id: str, compute: ComputeDep, tenant_id: CallerTenant) -> View:
    """Revoke a join token: no node joins with it from now on."""
    return await join_tokens.revoke_join_token(compute, tenant_id, token_id)
