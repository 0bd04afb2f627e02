"""The SQL of the engine: enqueue, claim, heartbeat, complete, next due time.

Claims are one statement, `UPDATE work_items SET <lease> WHERE id IN (SELECT ...
LIMIT n FOR UPDATE SKIP LOCKED) RETURNING ...`. On PostgreSQL the row locks make
replicas skip each other's rows; on SQLite (one process) the statement is atomic and
FOR UPDATE is dropped by the dialect. Every later write on a claimed item is guarded
by its lock token: zero rows touched means the lease went to someone else, and the
caller drops its result.

Leases are written and judged by the database's clock (`store.clock`), read in the
claiming or renewing transaction, so two replicas whose clocks disagree still agree on
whether a lease has expired. Due times stay on the replicas' clocks: they are delays a
replica chose, not a promise one replica makes to another.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, case, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.core.ids import new_id
from better_compute.engine.decide import Completion
from better_compute.engine.models import WorkItem
from better_compute.engine.notify import notify_work
from better_compute.store import Database
from better_compute.store.clock import DatabaseClock

__all__ = [
    "Claim",
    "Failing",
    "Upcoming",
    "claim",
    "complete",
    "enqueue",
    "extend",
    "failing",
    "holds",
    "next_due",
    "release",
    "upcoming",
]


@dataclass(frozen=True)
class Claim:
    """One item this worker holds, and the token that proves it."""

    id: str
    kind: str
    key: str
    token: str
    attempts: int


@dataclass(frozen=True)
class Failing:
    """An item whose last run failed: what `doctor` reports."""

    kind: str
    key: str
    attempts: int
    last_error: str
    retrying: bool


_ENQUEUE: dict[str, Any] = {}
"""The enqueue upsert, built once per dialect (building it is most of an enqueue's cost)."""


def _enqueue_statement(dialect: str) -> Any:
    stmt = _ENQUEUE.get(dialect)
    if stmt is None:
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        upsert = insert(WorkItem).values(
            id=bindparam("e_id"),
            kind=bindparam("e_kind"),
            key=bindparam("e_key"),
            due_at=bindparam("e_due"),
            attempts=0,
            created_at=bindparam("e_now"),
            updated_at=bindparam("e_now"),
        )
        current, wanted = WorkItem.due_at, upsert.excluded.due_at
        stmt = _ENQUEUE[dialect] = upsert.on_conflict_do_update(
            index_elements=[WorkItem.kind, WorkItem.key],
            set_={
                "due_at": case((and_(current.is_not(None), current <= wanted), current), else_=wanted),
                "updated_at": upsert.excluded.updated_at,
            },
        )
    return stmt


async def enqueue(session: AsyncSession, *, kind: str, key: str, now: datetime, due: datetime | None = None) -> None:
    """Make (kind, key) due at `due or now`, keeping an earlier due time; in the caller's transaction."""
    stmt = _enqueue_statement(session.get_bind().dialect.name)
    await session.execute(stmt, {"e_id": new_id("wi"), "e_kind": kind, "e_key": key, "e_due": due or now, "e_now": now})
    await notify_work(session)


async def claim(
    db: Database,
    *,
    kinds: Sequence[str],
    owner: str,
    now: datetime,
    lease_seconds: float,
    limit: int,
    lease_clock: DatabaseClock,
) -> list[Claim]:
    """Lease up to `limit` items that are due (on `now`), or whose lease has expired (on `lease_clock`)."""
    if not kinds or limit <= 0:
        return []
    token = new_id("lease")
    async with db.transaction() as session:
        lease_now = await lease_clock.now(session)
        ready = and_(WorkItem.lock_token.is_(None), WorkItem.due_at <= now)
        abandoned = and_(WorkItem.lock_token.is_not(None), WorkItem.lease_expires_at <= lease_now)
        candidates = (
            select(WorkItem.id)
            .where(WorkItem.kind.in_(kinds), or_(ready, abandoned))
            .order_by(func.coalesce(WorkItem.due_at, WorkItem.lease_expires_at))
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        stmt = (
            update(WorkItem)
            .where(WorkItem.id.in_(candidates.scalar_subquery()))
            .values(
                lock_token=token,
                lease_owner=owner,
                lease_expires_at=lease_now + timedelta(seconds=lease_seconds),
                due_at=None,
                last_run_at=now,
                updated_at=now,
            )
            .returning(WorkItem.id, WorkItem.kind, WorkItem.key, WorkItem.attempts)
            .execution_options(synchronize_session=False)
        )
        rows = (await session.execute(stmt)).all()
    return [Claim(id=r.id, kind=r.kind, key=r.key, token=token, attempts=r.attempts) for r in rows]


async def extend(db: Database, held: Sequence[Claim], *, lease_seconds: float, lease_clock: DatabaseClock) -> set[str]:
    """Renew these leases for `lease_seconds` from now, in one statement; returns the ids still held.

    An expired lease is lost even if nobody has claimed the item yet: from the moment it
    expired another worker could have, so a run that finds it expired must stop writing.

    A renewal never shortens a lease. Two renewals of one run (the engine's keeper and a
    reconciler's heartbeat) can commit in the other order from the one they read the
    time in; the older one must not pull back the expiry the newer one wrote, or the run
    loses a lease it renewed.
    """
    if not held:
        return set()
    by_token: dict[str, list[str]] = defaultdict(list)
    for claim in held:
        by_token[claim.token].append(claim.id)
    async with db.transaction() as session:
        lease_now = await lease_clock.now(session)
        expires = literal(lease_now + timedelta(seconds=lease_seconds), WorkItem.lease_expires_at.type)
        stmt = (
            update(WorkItem)
            .where(
                or_(*(and_(WorkItem.lock_token == token, WorkItem.id.in_(ids)) for token, ids in by_token.items())),
                WorkItem.lease_expires_at > lease_now,
            )
            .values(
                lease_expires_at=case((WorkItem.lease_expires_at < expires, expires), else_=WorkItem.lease_expires_at)
            )
            .returning(WorkItem.id)
            .execution_options(synchronize_session=False)
        )
        return set((await session.execute(stmt)).scalars())


async def holds(session: AsyncSession, held: Claim, *, lease_clock: DatabaseClock) -> bool:
    """Whether `held` still holds its lease, read in the caller's transaction on the database's clock.

    A plain read, no row lock: the caller has already locked the domain rows it writes, so a
    worker that takes the item over after this read waits for those rows until the caller commits.
    (Locking the item's row too would deadlock with the engine's renewal of many leases at once.)
    """
    lease_now = await lease_clock.now(session)
    found = await session.scalar(
        select(WorkItem.id).where(
            WorkItem.id == held.id, WorkItem.lock_token == held.token, WorkItem.lease_expires_at > lease_now
        )
    )
    return found is not None


async def complete(db: Database, done: Sequence[tuple[Claim, Completion]], *, now: datetime) -> list[bool]:
    """Apply runs' completions under their tokens in one transaction.

    Returns, per completion, whether it was applied; False means the lease had passed
    to another worker and nothing was written for that item. Completions that write
    the same values under the same claim token (a batch of no-op runs, say) share one
    statement.
    """
    groups: dict[tuple[str, int, str | None, datetime | None], list[str]] = defaultdict(list)
    for held, completion in done:
        groups[(held.token, completion.attempts, completion.last_error, completion.due_at)].append(held.id)
    applied: set[str] = set()
    if groups:
        async with db.transaction() as session:
            for (token, attempts, last_error, due_at), ids in groups.items():
                stmt = _completion(token, ids, attempts=attempts, last_error=last_error, due_at=due_at, now=now)
                applied.update((await session.execute(stmt)).scalars())
    return [held.id in applied for held, _ in done]


def _completion(
    token: str, ids: list[str], *, attempts: int, last_error: str | None, due_at: datetime | None, now: datetime
) -> Any:
    values: dict[str, Any] = {
        "lock_token": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "attempts": attempts,
        "last_error": last_error,
        "updated_at": now,
    }
    if due_at is not None:
        # An enqueue during the run may have set an earlier time: the earlier one wins.
        pending = WorkItem.due_at
        values["due_at"] = case((and_(pending.is_not(None), pending <= due_at), pending), else_=due_at)
    return (
        update(WorkItem)
        .where(WorkItem.id.in_(ids), WorkItem.lock_token == token)
        .values(**values)
        .returning(WorkItem.id)
        .execution_options(synchronize_session=False)
    )


async def release(db: Database, *, owner: str, now: datetime) -> int:
    """Hand back every lease `owner` still holds, due now; for a clean shutdown. Returns how many."""
    stmt = (
        update(WorkItem)
        .where(WorkItem.lease_owner == owner, WorkItem.lock_token.is_not(None))
        .values(
            lock_token=None,
            lease_owner=None,
            lease_expires_at=None,
            due_at=func.coalesce(WorkItem.due_at, now),
            updated_at=now,
        )
        .returning(WorkItem.id)
        .execution_options(synchronize_session=False)
    )
    async with db.transaction() as session:
        return len((await session.execute(stmt)).all())


async def failing(db: Database, *, limit: int = 100) -> list[Failing]:
    """Items whose last run failed, the longest failure streaks first."""
    stmt = (
        select(WorkItem.kind, WorkItem.key, WorkItem.attempts, WorkItem.last_error, WorkItem.due_at)
        .where(WorkItem.last_error.is_not(None))
        .order_by(WorkItem.attempts.desc(), WorkItem.kind, WorkItem.key)
        .limit(limit)
    )
    async with db.session() as session:
        rows = (await session.execute(stmt)).all()
    return [Failing(r.kind, r.key, r.attempts, r.last_error or "", r.due_at is not None) for r in rows]


@dataclass(frozen=True)
class Upcoming:
    """When the next item becomes claimable, read in one statement (`upcoming`)."""

    due_at: datetime | None
    """The earliest due time of an item nobody holds (on the replicas' clocks, as `claim` judges it)."""
    lease_expires_at: datetime | None
    """The earliest lease expiry of a held item (on the database's clock)."""
    lease_now: datetime | None
    """The database's clock as it was read; None when no item is held."""

    def seconds(self, now: datetime) -> float | None:
        """Seconds from `now` (this replica's clock) until an item is claimable, 0 if one is now; None
        if none is due nor held."""
        waits = []
        if self.due_at is not None:
            waits.append((self.due_at - now).total_seconds())
        if self.lease_expires_at is not None and self.lease_now is not None:
            waits.append((self.lease_expires_at - self.lease_now).total_seconds())
        return max(0.0, min(waits)) if waits else None


_UPCOMING: dict[tuple[str, ...], Any] = {}
"""The upcoming statement, built once per set of kinds (an engine's are fixed): building it cost more
than sending it, at every move of a simulated clock (`Engine.run_until_idle`)."""


def _upcoming_statement(kinds: Sequence[str]) -> Any:
    key = tuple(kinds)
    stmt = _UPCOMING.get(key)
    if stmt is None:
        ours = WorkItem.kind.in_(key)
        waiting = select(func.min(WorkItem.due_at)).where(ours, WorkItem.lock_token.is_(None)).scalar_subquery()
        leased = select(func.min(WorkItem.lease_expires_at)).where(ours, WorkItem.lock_token.is_not(None))
        stmt = _UPCOMING[key] = select(waiting, leased.scalar_subquery())
    return stmt


async def upcoming(db: Database, *, kinds: Sequence[str], lease_clock: DatabaseClock) -> Upcoming:
    """The earliest due time and the earliest lease expiry, in one statement and no transaction (a
    hint: `claim` judges again); the database's clock is read only when an item is held."""
    if not kinds:
        return Upcoming(None, None, None)
    async with db.read() as session:
        due_at, expires = (await session.execute(_upcoming_statement(kinds))).one()
        lease_now = await lease_clock.now(session) if expires is not None else None
    return Upcoming(due_at, expires, lease_now)


async def next_due(db: Database, *, kinds: Sequence[str]) -> datetime | None:
    """When the next item becomes claimable: the earliest due time or lease expiry (one statement)."""
    if not kinds:
        return None
    async with db.read() as session:
        times = (await session.execute(_upcoming_statement(kinds))).one()
    known: list[datetime] = [t for t in times if t is not None]
    return min(known) if known else None
