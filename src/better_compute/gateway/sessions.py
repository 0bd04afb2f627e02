"""Node sessions in the database, so that every replica answers "is this node connected?".

A session is opened when a node's hello is accepted, touched by heartbeats (flushed in
batches), and closed when its connection ends or its heartbeats stop. Every write after
the open is fenced by the session id: a replica holding a replaced session cannot mark
a reconnected node disconnected. Compute's node (`connected`, `last_seen_at`) follows
in the same transaction.

A session loses its right to exist when a newer one of the node opens (on any replica),
when the node's credential is replaced by a new join, or when its node is retired. Each
of those writes marks the node changed, so compute's change feed (and NOTIFY, on
PostgreSQL) reaches the replica holding the old socket; `ended_sessions` is the check that
replica runs before every push, every inventory write and every tick, and it closes the
socket when the answer is no. Session times (`last_heartbeat_at`, the stale cutoff) are
on the database's clock, so replicas whose clocks disagree still agree on staleness.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute import mark_changed
from better_compute.compute.nodes import mark_ready, record_heartbeat, retired_among, set_connected
from better_compute.gateway.tables import NodeSessionRow

__all__ = [
    "CREDENTIAL_REPLACED",
    "REPLACED",
    "SessionEnd",
    "close_open_session",
    "close_session",
    "ended_sessions",
    "is_connected",
    "open_session",
    "record_heartbeats",
    "sweep_stale",
]

REPLACED = "replaced by a newer session of the same node"
CREDENTIAL_REPLACED = "node credential replaced by a new join"
_CHUNK = 1000  # ids per IN list: a replica may hold many thousands of sessions


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """Why a live socket's session has no right to go on.

    `replaced`: a newer session of the node is open; `revoked`: the node is retired or its
    credential was replaced (bcd must join again); `stale`: the session was marked
    disconnected (missed heartbeats, seen by some replica), so bcd should reconnect.
    """

    why: Literal["replaced", "revoked", "stale"]
    reason: str


async def open_session(session: AsyncSession, *, node_id: str, session_id: str, replica: str, now: datetime) -> bool:
    """The node is connected through `session_id` on `replica`; a joining node becomes ready.

    Returns whether this is the node's first session (it never had one before)."""
    row = await session.get(NodeSessionRow, node_id, with_for_update=True)
    first = row is None
    if row is None:
        row = NodeSessionRow(node_id=node_id)
        session.add(row)
    elif row.connected and row.session_id != session_id:
        mark_changed(session, [node_id])  # the replica holding the older socket closes it
    row.session_id, row.replica, row.connected = session_id, replica, True
    row.connected_at = row.last_heartbeat_at = now
    row.disconnected_at, row.close_reason = None, None
    await session.flush()
    await mark_ready(session, node_id, now)  # locks the node row; set_connected then finds it in the session
    await set_connected(session, node_id, True, now)
    return first


async def close_session(session: AsyncSession, *, node_id: str, session_id: str, now: datetime, reason: str) -> bool:
    """Mark the node disconnected if `session_id` is still its session; returns whether it was."""
    return await _close(session, node_id, now, reason, NodeSessionRow.session_id == session_id)


async def close_open_session(session: AsyncSession, *, node_id: str, now: datetime, reason: str) -> bool:
    """End whatever session the node has open (its credential was replaced); the holder closes its socket."""
    if not await _close(session, node_id, now, reason):
        return False
    mark_changed(session, [node_id])
    return True


async def _close(session: AsyncSession, node_id: str, now: datetime, reason: str, *guard: Any) -> bool:
    closed = await session.execute(
        update(NodeSessionRow)
        .where(NodeSessionRow.node_id == node_id, NodeSessionRow.connected.is_(True), *guard)
        .values(connected=False, disconnected_at=now, close_reason=reason[:256])
        .returning(NodeSessionRow.node_id)
        .execution_options(synchronize_session=False)
    )
    if closed.scalar_one_or_none() is None:
        return False
    await set_connected(session, node_id, False, now)
    return True


async def ended_sessions(
    session: AsyncSession, held: Mapping[str, str], *, lock: bool = False
) -> dict[str, SessionEnd]:
    """Of the sessions a replica holds ({node id: session id}), those that must end, and why.

    Only reads: the holder closes the socket, and its close (fenced by the session id)
    marks the row disconnected. With `lock`, the rows are locked (an inventory write holds
    them until it commits, so that a newer session cannot open in between).
    """
    ended: dict[str, SessionEnd] = {}
    nodes = list(held)
    for start in range(0, len(nodes), _CHUNK):
        chunk = nodes[start : start + _CHUNK]
        query = select(
            NodeSessionRow.node_id, NodeSessionRow.session_id, NodeSessionRow.connected, NodeSessionRow.close_reason
        ).where(NodeSessionRow.node_id.in_(chunk))
        if lock:
            query = query.with_for_update()
        rows = {row.node_id: row for row in await session.execute(query)}
        retired = await retired_among(session, chunk)
        for node_id in chunk:
            row = rows.get(node_id)
            if row is None or row.session_id != held[node_id]:
                ended[node_id] = SessionEnd("replaced", REPLACED)
            elif node_id in retired:
                ended[node_id] = SessionEnd("revoked", "node retired")
            elif not row.connected:
                reason = row.close_reason or "session closed"
                ended[node_id] = SessionEnd("revoked" if reason == CREDENTIAL_REPLACED else "stale", reason)
    return ended


async def record_heartbeats(
    session: AsyncSession, beats: Mapping[str, tuple[str, datetime]], *, last_seen: Collection[str] = ()
) -> list[str]:
    """Write the heartbeats seen since the last tick, {node id: (session id, when)}, in one statement.

    Compute's `last_seen_at` is written for the nodes in `last_seen` only (the hub asks for
    each node about once a minute, not every beat), and only while their session is still
    open: the row lock taken here orders it with a concurrent `close_session`, so a node
    that just went away is never marked connected again. Returns the nodes written to compute.
    """
    if not beats:
        return []
    table = cast(Table, NodeSessionRow.__table__)
    await session.execute(
        update(table)
        .where(
            table.c.node_id == bindparam("b_node"),
            table.c.session_id == bindparam("b_session"),
            table.c.connected.is_(True),
        )
        .values(last_heartbeat_at=bindparam("b_at")),
        [{"b_node": node, "b_session": sid, "b_at": at} for node, (sid, at) in beats.items()],
    )
    wanted = [node for node in last_seen if node in beats]
    if not wanted:
        return []
    live = await session.execute(
        select(NodeSessionRow.node_id, NodeSessionRow.session_id)
        .where(NodeSessionRow.node_id.in_(wanted), NodeSessionRow.connected.is_(True))
        .with_for_update()
    )
    written = []
    for node_id, session_id in live.all():
        if beats[node_id][0] == session_id:
            await record_heartbeat(session, node_id, beats[node_id][1])
            written.append(node_id)
    return written


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
