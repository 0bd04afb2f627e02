"""What a node of a substrate pool is born with when it joins: the gateway's admission hook.

A Node the substrate has listed is spot exactly when its node pool is a Spot flavor's.
A Node it has not listed yet (it came up after the substrate's last look) is taken to be
spot until the substrate matches it: only `spot: true` reservations can land there in
between, which is safe either way. The join also wakes the substrate, which recounts
its token and matches the new node, `JOIN_SETTLE` later: the Nodes of a node pool join
together, and one run then counts them all once their gateway sessions are up.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute import SPOT_LABEL
from better_compute.engine import enqueue
from better_compute.kubernetes.names import SUBSTRATE_KIND
from better_compute.kubernetes.tables import SubstrateNodeRow, SubstrateRow

__all__ = ["JOIN_SETTLE", "admit_substrate_node"]

JOIN_SETTLE = timedelta(seconds=5)


async def admit_substrate_node(session: AsyncSession, *, pool_id: str, node_name: str, now: datetime) -> dict[str, str]:
    if await session.get(SubstrateRow, pool_id) is None:
        return {}
    await enqueue(session, kind=SUBSTRATE_KIND, key=pool_id, now=now, due=now + JOIN_SETTLE)
    listed = await session.get(SubstrateNodeRow, (pool_id, node_name))
    if listed is None or listed.spot:
        return {SPOT_LABEL: "spot"}
    return {}
