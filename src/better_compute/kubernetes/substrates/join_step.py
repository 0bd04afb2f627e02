"""Step: keep a join token in the cluster while Nodes are still to join, and only then.

The token allows one use per listed Node whose bcd is not connected. Its value is
made, written to the `bcd-join` Secret and forgotten in one run; only its hash is
stored. When every Node has joined, the token is revoked and the Secret deleted; a new
Node later gets a new token. The Secret is annotated with the id of the token it holds:
a token revoked by someone else, a Secret that went missing, or one that holds another
token than the recorded one (its write failed after the token was recorded) is replaced
by a new pair.
"""

from __future__ import annotations

from datetime import datetime

from lightkube import AsyncClient, codecs
from lightkube.resources.core_v1 import Secret

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.engine import RunContext
from better_compute.gateway.tokens import create_join_token, revoke_join_token, set_uses_left
from better_compute.kubernetes.cluster_access.kube_api import FIELD_MANAGER, kube_call, missing_ok
from better_compute.kubernetes.substrates.lease import hold
from better_compute.kubernetes.substrates.manifests import JOIN_SECRET, JOIN_TOKEN_ID_KEY, NAMESPACE, join_secret
from better_compute.kubernetes.substrates.steps import StepContext, StepResult
from better_compute.store import Database

__all__ = ["JoinStep", "keep_join_token", "revoke_token"]


async def _secret_token(client: AsyncClient) -> str | None:
    """The id of the token the join Secret holds: "" for a Secret without one, None when there is no Secret."""
    try:
        secret = await kube_call("reading the join Secret", client.get(Secret, JOIN_SECRET, namespace=NAMESPACE))
    except ComputeError as exc:
        if exc.code is ErrorCode.NOT_FOUND:
            return None
        raise
    annotations = (secret.metadata.annotations if secret.metadata is not None else None) or {}
    return str(annotations.get(JOIN_TOKEN_ID_KEY, ""))


async def revoke_token(db: Database, run: RunContext, pool_id: str, now: datetime, *, reason: str) -> bool:
    """Revoke the substrate's token (in the database; the Secret is the caller's), under the run's
    lease, saying why; False if it had none."""
    async with db.transaction() as session:
        row = await hold(session, run, pool_id)
        if row is None or row.join_token_id is None:
            return False
        await revoke_join_token(session, now=now, token_id=row.join_token_id, reason=reason)
        row.join_token_id = None
        return True


async def keep_join_token(
    db: Database, run: RunContext, client: AsyncClient, *, pool_id: str, waiting: int, now: datetime
) -> None:
    if waiting == 0:
        held = await revoke_token(db, run, pool_id, now, reason="every Node of the cluster has joined")
        if held or await _secret_token(client) is not None:
            await missing_ok("deleting the join Secret", client.delete(Secret, JOIN_SECRET, namespace=NAMESPACE))
        return
    in_secret = await _secret_token(client)
    async with db.transaction() as session:
        row = await hold(session, run, pool_id)
        token_id = row.join_token_id if row is not None else None
        if token_id is not None and in_secret == token_id:
            try:
                await set_uses_left(session, token_id=token_id, uses_left=waiting)
                return
            except ComputeError as exc:
                if exc.code is not ErrorCode.INVALID_STATE:  # revoked by someone else: make a new one
                    raise
        if row is None:
            return
        if token_id is not None:
            await revoke_join_token(
                session, now=now, token_id=token_id, reason="its Secret is missing or holds another"
            )
        token, value = await create_join_token(
            session, now=now, tenant_id=row.tenant_id, pool_id=pool_id, uses=waiting,
            reason=f"{waiting} Node(s) of the cluster wait to join",
        )  # fmt: skip
        row.join_token_id = token.id
    # The token is committed (recorded) before its value leaves this process; a run that
    # dies here, or whose write fails, leaves a Secret without the recorded token's id,
    # which the next run replaces.
    secret = codecs.from_dict(join_secret(pool_id, token.id, value))
    del value
    await kube_call("writing the join Secret", client.apply(secret, field_manager=FIELD_MANAGER, force=True))


class JoinStep:
    """The `join` condition: a join token kept while listed Nodes wait to join, and revoked once none does."""

    name = "join"
    needs: tuple[str, ...] = ("nodes",)

    async def run(self, ctx: StepContext) -> StepResult:
        waiting = len(ctx.seen.waiting) if ctx.seen is not None else 0
        try:
            await ctx.run.fence()
            await keep_join_token(ctx.k.db, ctx.run, ctx.client, pool_id=ctx.pool_id, waiting=waiting, now=ctx.now)
        except ComputeError as exc:
            return StepResult(self.name, "error", exc.message)
        if waiting:
            return StepResult(self.name, "ok", f"a join token for {waiting} Node(s) that wait to join")
        return StepResult(self.name, "ok", "no Node waits to join: no join token")
