"""The substrate's row: made with the first run, then written with what each run found.

Each change of its state is recorded in the decision log (`substrate.state-changed`, from and
to, with the message), in the transaction that writes it: the substrate's lifecycle, which the
console draws as a timeline. A change of state or message marks the pool changed on the
change feed, so an open console page shows it without a reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute import Pool
from better_compute.compute.changes import ChangeFeed, mark_pools_changed
from better_compute.compute.pools import pool_of, pool_row
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.decisions import Decision, Kind, record
from better_compute.engine import RunContext
from better_compute.kubernetes.substrates.lease import hold
from better_compute.kubernetes.substrates.nodes_step import NodesSeen
from better_compute.kubernetes.substrates.steps import StepResult, conditions_json
from better_compute.kubernetes.tables import NodePoolRow, SubstrateNodeRow, SubstrateRow

__all__ = [
    "JOIN_WARNING",
    "Found",
    "PlacedNode",
    "live_substrates",
    "load_pool",
    "placed_nodes",
    "save_found",
    "substrate_row",
    "waiting_message",
]

JOIN_WARNING = timedelta(minutes=15)
"""How long Nodes may wait to join before the message (and doctor) says so."""


@dataclass
class Found:
    """What one run found: the state and message to record, and the Nodes it saw."""

    state: str
    message: str | None = None
    seen: NodesSeen | None = None
    next_attempt_at: datetime | None = None
    conditions: tuple[StepResult, ...] | None = None
    """Each step's condition (steps.py); None leaves the recorded ones as they are (a teardown)."""


async def load_pool(session: AsyncSession, pool_id: str) -> Pool | None:
    try:
        return pool_of(await pool_row(session, pool_id=pool_id))
    except ComputeError as exc:
        if exc.code is ErrorCode.NOT_FOUND:
            return None
        raise


async def live_substrates(session: AsyncSession, tenant_id: str) -> dict[str, str]:
    """The tenant's substrates not yet deleted, by pool id: their state, and message when there is one.
    A pool without `policy.substrate` that is here has its teardown under way."""
    rows = await session.execute(
        select(SubstrateRow.pool_id, SubstrateRow.state, SubstrateRow.message).where(
            SubstrateRow.tenant_id == tenant_id, SubstrateRow.state != "deleted"
        )
    )
    return {pool_id: f"{state}: {message}" if message else state for pool_id, state, message in rows}


@dataclass(frozen=True)
class PlacedNode:
    """A Node the substrate listed last: its flavor (None when its node pool is none of the
    substrate's) and zone, as its labels said."""

    pool_id: str
    name: str
    flavor: str | None
    zone: str | None


async def placed_nodes(session: AsyncSession, tenant_id: str) -> list[PlacedNode]:
    """Every Node the tenant's substrates listed last, with its flavor and zone, by pool and name."""
    query = (
        select(SubstrateNodeRow.pool_id, SubstrateNodeRow.name, NodePoolRow.flavor, SubstrateNodeRow.zone)
        .join(SubstrateRow, SubstrateRow.pool_id == SubstrateNodeRow.pool_id)
        .outerjoin(
            NodePoolRow,
            and_(NodePoolRow.cluster_id == SubstrateRow.cluster_id, NodePoolRow.name == SubstrateNodeRow.node_pool),
        )
        .where(SubstrateRow.tenant_id == tenant_id)
        .order_by(SubstrateNodeRow.pool_id, SubstrateNodeRow.name)
    )
    return [PlacedNode(*row) for row in await session.execute(query)]


async def substrate_row(session: AsyncSession, pool: Pool, *, mode: str, now: datetime) -> SubstrateRow:
    """The pool's substrate row, made (or made anew after a teardown) when missing."""
    row = await session.get(SubstrateRow, pool.id, with_for_update=True)
    if row is None:
        row = SubstrateRow(
            pool_id=pool.id,
            tenant_id=pool.tenant_id,
            cluster_id=None,
            mode=mode,
            state="provisioning",
            message=None,
            join_token_id=None,
            nodes_listed=0,
            nodes_joined=0,
            waiting_since=None,
            last_join_at=None,
            conditions=None,
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        await _state_changed(session, row, None, now)
    elif row.state == "deleted":
        row.state, row.mode, row.message, row.cluster_id = "provisioning", mode, None, None
        row.updated_at = now
        await _state_changed(session, row, "deleted", now)
    await session.flush()
    return row


async def _state_changed(session: AsyncSession, row: SubstrateRow, was: str | None, now: datetime) -> None:
    """Tell the change feed the pool's substrate changed, and record a change of its state in the decision log."""
    mark_pools_changed(session, [row.pool_id])
    if was == row.state:
        return
    reason = f"{was or 'new'} -> {row.state}" + (f": {row.message}" if row.message else "")
    details = {"from": was, "to": row.state, "message": row.message}
    await record(
        session, now, Decision(Kind.SUBSTRATE_STATE, row.tenant_id, reason, pool_id=row.pool_id, details=details)
    )


def waiting_message(waiting: int, since: datetime, now: datetime) -> str | None:
    if waiting == 0 or now - since < JOIN_WARNING:
        return None
    minutes = int((now - since).total_seconds() // 60)
    return (
        f"{waiting} Node(s) have waited {minutes} minutes without joining: look at the pods of DaemonSet "
        "bc-system/bcd (the image pull, the gateway URL and pins given to the substrate agent, the GPU runtime class)"
    )


async def save_found(feed: ChangeFeed, run: RunContext, pool_id: str, found: Found, now: datetime) -> bool:
    """Write what the run found, under its lease; True when the Nodes listed or joined changed since the last run."""
    moved = False
    async with feed.transaction() as session:
        row = await hold(session, run, pool_id)
        if row is None:
            return False
        seen = found.seen
        message = found.message
        if seen is not None:
            moved = (len(seen.listed), len(seen.joined)) != (row.nodes_listed, row.nodes_joined)
            if len(seen.joined) > row.nodes_joined:
                row.last_join_at = now
            row.nodes_listed, row.nodes_joined = len(seen.listed), len(seen.joined)
            if seen.waiting and seen.first_waiting_seen_at is not None:
                since = max(seen.first_waiting_seen_at, row.last_join_at or seen.first_waiting_seen_at)
                row.waiting_since = since
                message = message or waiting_message(len(seen.waiting), since, now)
            else:
                row.waiting_since = None
        was = (row.state, row.message)
        row.state, row.message, row.updated_at = found.state, message, now
        row.next_attempt_at = found.next_attempt_at
        if found.conditions is not None:
            row.conditions = conditions_json(found.conditions, row.conditions, now)
        if was != (row.state, row.message):
            await _state_changed(session, row, was[0], now)
    return moved
