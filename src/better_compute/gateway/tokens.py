"""Join tokens: made, topped up and revoked by the substrate; redeemed by bcd's join.

A token belongs to one pool and allows a number of joins (`uses_allowed`). Redemption
is one conditional UPDATE (`uses < uses_allowed AND revoked_at IS NULL`, RETURNING), so
that concurrent joins can never take more uses than the token allows, on SQLite (one
writer) as on PostgreSQL (the row lock re-checks the condition). The token's value is
returned once, at creation, and stored only as its hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.pools import get_pool
from better_compute.compute.tables import NodeRow
from better_compute.core.clock import Clock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id, new_token
from better_compute.core.redaction import redact_value
from better_compute.decisions import Decision, Kind, acting, record
from better_compute.gateway.hashing import digest
from better_compute.gateway.tables import JoinTokenRow, NodeCredentialRow
from better_compute.store import Database

__all__ = [
    "KINDS",
    "JoinToken",
    "JoinTokens",
    "create_join_token",
    "get_join_token",
    "join_token_pool",
    "redeem_join_token",
    "revoke_join_token",
    "set_uses_left",
    "token_decision",
]

KINDS = frozenset({"kubernetes"})
MAX_USES = 100_000


@dataclass(frozen=True, slots=True)
class JoinToken:
    """A join token's record; never its value."""

    id: str
    tenant_id: str
    pool_id: str
    kind: str
    uses_allowed: int
    uses: int
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @property
    def uses_left(self) -> int:
        return 0 if self.revoked_at is not None else max(0, self.uses_allowed - self.uses)


def _token_of(row: JoinTokenRow) -> JoinToken:
    return JoinToken(
        id=row.id,
        tenant_id=row.tenant_id,
        pool_id=row.pool_id,
        kind=row.kind,
        uses_allowed=row.uses_allowed,
        uses=row.uses,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


def _check_uses(uses: object, path: str) -> int:
    if not isinstance(uses, int) or isinstance(uses, bool) or not 0 <= uses <= MAX_USES:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"uses is a whole number from 0 to {MAX_USES}", path)
    return uses


async def create_join_token(
    session: AsyncSession,
    *,
    now: datetime,
    tenant_id: str,
    pool_id: str,
    uses: int,
    kind: str = "kubernetes",
    reason: str,
    principal: str | None = None,
) -> tuple[JoinToken, str]:
    """A new token for the tenant's pool, and its value (shown this once, never stored); `reason` (and
    who asked) go to the decision log."""
    if kind not in KINDS:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"join token kind must be one of {sorted(KINDS)}", "/kind")
    _check_uses(uses, "/uses")
    await get_pool(session, tenant_id=tenant_id, pool_id=pool_id)
    value = new_token("bcj")
    redact_value(value)
    row = JoinTokenRow(
        id=new_id("jtk"),
        tenant_id=tenant_id,
        pool_id=pool_id,
        kind=kind,
        token_hash=digest(value),
        uses_allowed=uses,
        uses=0,
        created_at=now,
        last_used_at=None,
        revoked_at=None,
    )
    session.add(row)
    await session.flush()
    await record(session, now, token_decision(Kind.TOKEN_MADE, row, reason, principal))
    return _token_of(row), value


def token_decision(
    kind: Kind,
    row: JoinToken | JoinTokenRow,
    reason: str,
    principal: str | None = None,
    *,
    node_id: str | None = None,
    node_name: str | None = None,
) -> Decision:
    """A decision about a join token: its id and uses in `details` (never its value)."""
    details = {"tokenId": row.id, "uses": row.uses, "usesAllowed": row.uses_allowed}
    return Decision(
        kind, row.tenant_id, reason, pool_id=row.pool_id, node_id=node_id, node_name=node_name, principal=principal,
        details=details,
    )  # fmt: skip


async def _row(session: AsyncSession, token_id: str, tenant_id: str | None, *, lock: bool = False) -> JoinTokenRow:
    query = select(JoinTokenRow).where(JoinTokenRow.id == token_id)
    if lock:
        query = query.with_for_update()
    row = await session.scalar(query)
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        raise ComputeError(ErrorCode.NOT_FOUND, f"no join token {token_id!r}", "/tokenId")
    return row


async def get_join_token(session: AsyncSession, *, token_id: str, tenant_id: str | None = None) -> JoinToken:
    return _token_of(await _row(session, token_id, tenant_id))


async def revoke_join_token(
    session: AsyncSession,
    *,
    now: datetime,
    token_id: str,
    tenant_id: str | None = None,
    reason: str,
    principal: str | None = None,
) -> JoinToken:
    """No join with this token from now on; revoking twice is a no-op (and records nothing)."""
    row = await _row(session, token_id, tenant_id, lock=True)
    if row.revoked_at is None:
        row.revoked_at = now
        await session.flush()
        await record(session, now, token_decision(Kind.TOKEN_REVOKED, row, reason, principal))
    return _token_of(row)


async def set_uses_left(
    session: AsyncSession, *, token_id: str, uses_left: int, tenant_id: str | None = None
) -> JoinToken:
    """Allow exactly `uses_left` more joins (for example one per Node not yet joined)."""
    _check_uses(uses_left, "/usesLeft")
    row = await _row(session, token_id, tenant_id, lock=True)
    if row.revoked_at is not None:
        raise ComputeError(ErrorCode.INVALID_STATE, f"join token {token_id!r} is revoked", "/tokenId")
    row.uses_allowed = row.uses + uses_left
    await session.flush()
    return _token_of(row)


async def redeem_join_token(session: AsyncSession, *, now: datetime, value: str) -> JoinToken:
    """Take one use of the token atomically; PERMISSION_DENIED if unknown, revoked or used up."""
    hashed = digest(value)
    taken = await session.execute(
        update(JoinTokenRow)
        .where(
            JoinTokenRow.token_hash == hashed,
            JoinTokenRow.revoked_at.is_(None),
            JoinTokenRow.uses < JoinTokenRow.uses_allowed,
        )
        .values(uses=JoinTokenRow.uses + 1, last_used_at=now)
        .returning(JoinTokenRow.id)
        .execution_options(synchronize_session=False)
    )
    token_id = taken.scalar_one_or_none()
    if token_id is not None:
        return _token_of(await _row(session, token_id, None))
    row = await session.scalar(select(JoinTokenRow).where(JoinTokenRow.token_hash == hashed))
    if row is None:
        reason = "the join token is not recognised"
    elif row.revoked_at is not None:
        reason = "the join token was revoked"
    else:
        reason = f"the join token is used up ({row.uses} of {row.uses_allowed} joins)"
    raise ComputeError(ErrorCode.PERMISSION_DENIED, reason, "/token")


async def rejoining_token(session: AsyncSession, *, value: str, node_name: str) -> JoinToken | None:
    """The token, when it is live and the pool's live node `node_name` holds a credential it issued.

    A node whose identity is proven and that joins again (its first answer lost on the way, or its
    credential file gone) is a node the token already let in: it takes no further use."""
    row = await session.scalar(
        select(JoinTokenRow)
        .join(NodeCredentialRow, NodeCredentialRow.token_id == JoinTokenRow.id)
        .join(NodeRow, NodeRow.id == NodeCredentialRow.node_id)
        .where(
            JoinTokenRow.token_hash == digest(value),
            JoinTokenRow.revoked_at.is_(None),
            NodeRow.pool_id == JoinTokenRow.pool_id,
            NodeRow.name == node_name,
            NodeRow.state != "retired",
        )
    )
    return None if row is None else _token_of(row)


async def join_token_pool(session: AsyncSession, value: str, node_name: str) -> str | None:
    """The pool of a token that could let `node_name` in now (known, not revoked, and uses left or
    already let in, see `rejoining_token`); None otherwise.

    A read only: the join then redeems the token in its own transaction, and refuses it with the reason."""
    row = await session.scalar(
        select(JoinTokenRow).where(JoinTokenRow.token_hash == digest(value), JoinTokenRow.revoked_at.is_(None))
    )
    if row is None:
        return None
    if row.uses < row.uses_allowed or await rejoining_token(session, value=value, node_name=node_name):
        return row.pool_id
    return None


class JoinTokens:
    """The service the substrate uses: create, top up, revoke and read join tokens."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def create(
        self, tenant_id: str, pool_id: str, *, uses: int, kind: str = "kubernetes"
    ) -> tuple[JoinToken, str]:
        async with self.db.transaction() as session:
            return await create_join_token(
                session, now=self.clock.now(), tenant_id=tenant_id, pool_id=pool_id, uses=uses, kind=kind,
                reason=f"made for {uses} join(s) on request", principal=acting(),
            )  # fmt: skip

    async def get(self, tenant_id: str, token_id: str) -> JoinToken:
        async with self.db.session() as session:
            return await get_join_token(session, token_id=token_id, tenant_id=tenant_id)

    async def list(self, tenant_id: str, *, pool_id: str | None = None) -> list[JoinToken]:
        """The tenant's join tokens (records only: values are never kept), oldest first."""
        query = select(JoinTokenRow).where(JoinTokenRow.tenant_id == tenant_id)
        if pool_id is not None:
            query = query.where(JoinTokenRow.pool_id == pool_id)
        async with self.db.session() as session:
            rows = await session.scalars(query.order_by(JoinTokenRow.created_at, JoinTokenRow.id))
            return [_token_of(row) for row in rows]

    async def set_uses_left(self, tenant_id: str, token_id: str, uses_left: int) -> JoinToken:
        async with self.db.transaction() as session:
            return await set_uses_left(session, token_id=token_id, uses_left=uses_left, tenant_id=tenant_id)

    async def revoke(self, tenant_id: str, token_id: str) -> JoinToken:
        async with self.db.transaction() as session:
            return await revoke_join_token(
                session, now=self.clock.now(), token_id=token_id, tenant_id=tenant_id, reason="the tenant revoked it",
                principal=acting(),
            )  # fmt: skip
