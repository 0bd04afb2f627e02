"""What a node of a substrate pool is born with when it joins, and its first session's wake-up.

A Node the substrate has listed is spot exactly when its node pool is a Spot flavor's;
the identity check reads a joining Node the run has not listed yet and records it first
(join_match.py), so a Spot node is born spot and an on-demand one never is. Only a Node
that could not be read at join is taken to be spot until the substrate matches it:
only `spot: true` reservations can land there in between, which is safe either way. The join also wakes the substrate, which recounts
its token and matches the new node, `JOIN_SETTLE` later: the Nodes of a node pool join
together, and one run then counts them all once their gateway sessions are up.

A session can open later than that (a busy gateway, bcd retrying its connection), and
the substrate counts a Node joined only once its bcd is connected. So the transaction
that opens a node's first gateway session wakes the substrate too, `SESSION_SETTLE`
later: that run sees the node connected (the wake commits with the session), and the
sessions of a node pool opening within those seconds share one run, since a wake keeps
the earlier due time (`engine.enqueue`). Both wakes go through the work queue, so on
PostgreSQL any replica's engine may take them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute import SPOT_LABEL
from better_compute.engine import enqueue
from better_compute.kubernetes.names import SUBSTRATE_KIND
from better_compute.kubernetes.tables import SubstrateNodeRow, SubstrateRow

__all__ = ["JOIN_SETTLE", "SESSION_SETTLE", "admit_substrate_node", "wake_on_first_session"]

JOIN_SETTLE = timedelta(seconds=5)
SESSION_SETTLE = timedelta(seconds=2)


async def admit_substrate_node(session: AsyncSession, *, pool_id: str, node_name: str, now: datetime) -> dict[str, str]:
    found = (
        await session.execute(
            select(SubstrateRow.pool_id, SubstrateNodeRow.spot)
            .select_from(SubstrateRow)
            .outerjoin(
                SubstrateNodeRow,
                and_(SubstrateNodeRow.pool_id == SubstrateRow.pool_id, SubstrateNodeRow.name == node_name),
            )
            .where(SubstrateRow.pool_id == pool_id)
        )
    ).first()
    if found is None:
        return {}
    await enqueue(session, kind=SUBSTRATE_KIND, key=pool_id, now=now, due=now + JOIN_SETTLE)
    if found.spot is None or found.spot:
        return {SPOT_LABEL: "spot"}
    return {}


async def wake_on_first_session(session: AsyncSession, *, pool_id: str, node_name: str, now: datetime) -> None:
    """A node of the pool opened its first gateway session: the substrate counts it joined shortly."""
    if await session.scalar(select(SubstrateRow.pool_id).where(SubstrateRow.pool_id == pool_id)) is None:
        return
    await enqueue(session, kind=SUBSTRATE_KIND, key=pool_id, now=now, due=now + SESSION_SETTLE)
