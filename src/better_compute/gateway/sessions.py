"""Node sessions in the database, so that every replica answers "is this node connected?".

A session is opened when a node's hello is accepted, touched by heartbeats (flushed in
batches), and closed when its connection ends or its heartbeats stop. Every write after
the open is fenced by the session id: a replica holding a replaced session cannot mark
a reconnected node disconnected. Compute's node (`connected`, `last_seen_at`) follows
in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.nodes import mark_ready, record_heartbeat, set_connected
from better_compute.gateway.tables import NodeSessionRow

__all__ = ["close_session", "connected_nodes", "is_connected", "open_session", "record_heartbeats", "sweep_stale"]


async def open_session(session: AsyncSession, *, node_id: str, session_id: str, replica: str, now: datetime) -> None:
    """The node is connected through `session_id` on `replica`; a joining node becomes ready."""
    row = await session.get(NodeSessionRow, node_id, with_for_update=True)
    if row is None:
        row = NodeSessionRow(node_id=node_id)
        session.add(row)
    row.session_id, row.replica, row.connected = session_id, replica, True
    row.connected_at = row.last_heartbeat_at = now
    row.disconnected_at, row.close_reason = None, None
    await session.flush()
    await set_connected(session, node_id, True, now)
    await mark_ready(session, node_id, now)


async def close_session(session: AsyncSession, *, node_id: str, session_id: str, now: datetime, reason: str) -> bool:
    """Mark the node disconnected if `session_id` is still its session; returns whether it was."""
    closed = await session.execute(
        update(NodeSessionRow)
        .where(
            NodeSessionRow.node_id == node_id,
            NodeSessionRow.session_id == session_id,
            NodeSessionRow.connected.is_(True),
        )
        .values(connected=False, disconnected_at=now, close_reason=reason[:256])
        .returning(NodeSessionRow.node_id)
        .execution_options(synchronize_session=False)
    )
    if closed.scalar_one_or_none() is None:
        return False
    await set_connected(session, node_id, False, now)
    return True


async def record_heartbeats(session: AsyncSession, beats: Mapping[str, tuple[str, datetime]]) -> list[str]:
    """Heartbeats seen since the last flush, {node id: (session id, when)}; returns the nodes recorded."""
    recorded = []
    for node_id, (session_id, at) in beats.items():
        touched = await session.execute(
            update(NodeSessionRow)
            .where(
                NodeSessionRow.node_id == node_id,
                NodeSessionRow.session_id == session_id,
                NodeSessionRow.connected.is_(True),
            )
            .values(last_heartbeat_at=at)
            .returning(NodeSessionRow.node_id)
            .execution_options(synchronize_session=False)
        )
        if touched.scalar_one_or_none() is not None:
            await record_heartbeat(session, node_id, at)
            recorded.append(node_id)
    return recorded


async def sweep_stale(session: AsyncSession, *, now: datetime, timeout_seconds: float) -> list[str]:
    """Mark disconnected every connected session (on any replica) with no heartbeat for `timeout_seconds`."""
    cutoff = now - timedelta(seconds=timeout_seconds)
    rows = list(
        await session.scalars(
            select(NodeSessionRow)
            .where(NodeSessionRow.connected.is_(True), NodeSessionRow.last_heartbeat_at < cutoff)
            .with_for_update(skip_locked=True)
        )
    )
    for row in rows:
        row.connected, row.disconnected_at, row.close_reason = False, now, "missed heartbeats"
        await session.flush()
        await set_connected(session, row.node_id, False, now)
    return [row.node_id for row in rows]


async def is_connected(session: AsyncSession, node_id: str) -> bool:
    return bool(await session.scalar(select(NodeSessionRow.connected).where(NodeSessionRow.node_id == node_id)))


async def connected_nodes(session: AsyncSession) -> list[str]:
    return list(await session.scalars(select(NodeSessionRow.node_id).where(NodeSessionRow.connected.is_(True))))
